"""The twin sweeps of the vocabulary audit (docs/audits.md, "Twin sweep"): lexical pairs from the
spelling index resolve keeps, semantic pairs from the name vectors, and the vocabulary result.

The lexical sweep expands every posting list of a non-stop bigram into its spelling pairs with array
operations, block by block over the first spelling's id (so each pair is counted once, in bounded
memory), and keeps the best Dice per record pair. Tests compare it with a plain transcription of the
contract on seeded random contexts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import attrs
import numpy as np

from taguru_server.store.derive.audits import Expired, _check
from taguru_server.store.index.lexicon import Lexicon
from taguru_server.store.model.context import CONCEPT, Context
from taguru_server.store.model.schema_check import type_names
from taguru_server.store.wire import F32

NO_VECTORS_NOTE = "ベクトル未生成のため意味的検出はスキップ (POST embeddings/refresh を実行)"
EXPIRED_NOTE = "意味的検出はスキップ (期限切れ)"
TOO_MANY_NAMES_NOTE = "語彙が 2000 名を超えるためこの名前空間の意味的検出はスキップ"
CUT_SHORT_NOTE = "意味的検出は期限切れのため途中で打ち切り (一部の結果のみ)"
SEMANTIC_MAX_NAMES = 2000
SEMANTIC_MAX_PAIRS = 100


PAIR_CHUNK = 4_000_000  # spelling pairs counted at once (bounds the sweep's memory)


@attrs.frozen
class SpellingIndex:
    """A copy of what the lexical sweep reads from one namespace's spelling index (safe off the event loop)."""

    t_size: np.ndarray  # non-stop bigrams per spelling
    df: np.ndarray  # live spellings per bigram
    stop: int
    posts: list[np.ndarray | None]  # per bigram: its live spellings, ascending (None: fewer than two)
    grams: np.ndarray  # every spelling's distinct bigrams, flat
    ptr: np.ndarray
    records: np.ndarray  # per spelling: its record id

    @classmethod
    def of(cls, lex: Lexicon) -> SpellingIndex:
        t_size, _lengths, df, stop = lex._views()  # also indexes pending spellings
        return cls(
            t_size,
            df,
            stop,
            [np.frombuffer(p, dtype=np.int32).astype(np.int64) if len(p) >= 2 else None for p in lex.gram_post],
            np.array(lex.entry_grams, dtype=np.int32),
            np.array(lex.entry_ptr, dtype=np.int64),
            np.asarray(lex.records, dtype=np.int64),
        )

    def twins(self, dice_floor: float, deadline: float | None = None) -> list[tuple[int, int, float]]:
        """(lower record id, higher record id, best dice) of every twin pair at or above the floor, in wire order."""
        n = len(self.t_size)
        if n < 2:
            return []
        t_size, records = self.t_size, self.records
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for keys, counts in self._shared_counts(n, deadline):
            i, j = keys // n, keys % n
            dice = 2.0 * counts.astype(np.float64) / (t_size[i] + t_size[j]).astype(np.float64)
            ri, rj = records[i], records[j]
            keep = (dice >= dice_floor) & (ri != rj)
            found.append((np.minimum(ri, rj)[keep], np.maximum(ri, rj)[keep], dice[keep]))
        if not found:
            return []
        lo, hi, dice = (np.concatenate(parts) for parts in zip(*found, strict=True))
        if not len(dice):
            return []
        # per record pair, the best dice: sort by (pair, -dice) and keep each pair's first row
        order = np.lexsort((-dice, hi, lo))
        lo, hi, dice = lo[order], hi[order], dice[order]
        first = np.ones(len(lo), dtype=bool)
        first[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
        lo, hi, dice = lo[first], hi[first], dice[first]
        # wire order: best dice first, then by the pair; numpy's sort rather than list.sort, which would hold the
        # interpreter lock for the whole sort (the event loop could not run meanwhile)
        order = np.lexsort((hi, lo, -dice))
        lo, hi, dice = lo[order], hi[order], dice[order]
        out: list[tuple[int, int, float]] = []
        for at in range(0, len(lo), TOLIST_CHUNK):  # in pieces: one conversion holds the lock throughout
            cut = slice(at, at + TOLIST_CHUNK)
            out.extend(zip(lo[cut].tolist(), hi[cut].tolist(), dice[cut].tolist(), strict=True))
        return out

    def _shared_counts(self, n: int, deadline: float | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Blocks of (pair keys i*n + j with i < j, shared non-stop bigrams) over every pair of live spellings
        sharing one; the blocks split the first spelling's id range, so no pair appears in two blocks."""
        posts = self.posts
        usable = np.array([p is not None for p in posts], dtype=bool) & (self.df <= self.stop)
        later = np.zeros(n, dtype=np.int64)  # per spelling: pairs it opens with later spellings
        for gid in np.flatnonzero(usable).tolist():
            p = posts[gid]
            assert p is not None
            later[p] += len(p) - 1 - np.arange(len(p))
        csum = np.cumsum(later)
        grams, ptr = self.grams, self.ptr
        lo = 0
        while lo < n:
            _check(deadline)
            base = csum[lo - 1] if lo else 0
            hi = min(max(int(np.searchsorted(csum, base + PAIR_CHUNK, side="right")), lo + 1), n)
            gids = np.unique(grams[ptr[lo] : ptr[hi]])
            chunk: list[np.ndarray] = []
            for gid in gids[usable[gids]].tolist():
                p = posts[gid]
                assert p is not None
                a, b = np.searchsorted(p, (lo, hi))
                if a < b:
                    chunk.append(_pairs_from(p, int(a), int(b), n))
            if chunk:
                keys, counts = np.unique(np.concatenate(chunk), return_counts=True)
                yield keys, counts
            lo = hi


TOLIST_CHUNK = 1 << 15  # array elements turned into Python objects per step (~5 ms with the lock held)


def _pairs_from(p: np.ndarray, a: int, b: int, n: int) -> np.ndarray:
    """Keys of the pairs (p[x], p[y]) for a <= x < b and x < y, as p[x] * n + p[y]."""
    rows = np.arange(a, b)
    lengths = len(p) - 1 - rows
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    cols = np.arange(total) - np.repeat(starts - rows - 1, lengths)
    return p[np.repeat(rows, lengths)] * n + p[cols]


def lexical_twins(lex: Lexicon, dice_floor: float, deadline: float | None = None) -> list[tuple[int, int, float]]:
    """The lexical twin sweep over one namespace, in place."""
    return SpellingIndex.of(lex).twins(dice_floor, deadline)


# ----- the semantic half (docs/audits.md, "Twin sweep") ------------------------------------


@attrs.frozen
class NameVectors:
    """One namespace's stored name vectors sorted by name (a copy), or the note that skips it."""

    names: list[str]
    matrix: np.ndarray
    note: str | None = None

    @classmethod
    def of(cls, ctx: Context, kind: int) -> NameVectors:
        store = ctx.vectors.glosses
        assert store is not None
        table = store.concepts if kind == CONCEPT else store.labels
        names = sorted(table.rows)
        if len(names) > SEMANTIC_MAX_NAMES:
            return cls([], np.zeros((0, 0), np.float32), TOO_MANY_NAMES_NOTE)
        if not names:
            return cls([], np.zeros((0, 0), np.float32))
        return cls(names, np.vstack([table.rows[n] for n in names]).astype(np.float32))

    def pairs(self, cosine_floor: float, deadline: float | None) -> list[tuple[float, str, str]]:
        """The best 100 pairs (score, a, b) with the f32 sequential dot product at or over the floor.

        A BLAS product picks the candidates; its error and the sequential sum's are each within
        width * 2^-24 * |x||y| of the exact value, so every pair that can reach the floor or the
        top 100 is re-scored exactly (component by component in f32) before anything is decided."""
        n = len(self.names)
        if n < 2:
            return []
        m = self.matrix
        width = m.shape[1]
        top = float(np.max(np.sum(m.astype(np.float64) ** 2, axis=1)))
        margin = 2.2 * width * 2.0**-24 * top + 1e-12
        upper = np.triu_indices(n, 1)
        approx = (m @ m.T)[upper]
        floor = np.float32(cosine_floor)
        near = approx >= float(floor) - margin
        if int(near.sum()) > SEMANTIC_MAX_PAIRS:
            kth = np.partition(approx[near], -SEMANTIC_MAX_PAIRS)[-SEMANTIC_MAX_PAIRS]
            near &= approx >= kth - 2 * margin
        i, j = upper[0][near], upper[1][near]
        exact = np.zeros(len(i), dtype=np.float32)
        for k in range(width):
            if k % 64 == 0:
                _check(deadline)
            exact += m[i, k] * m[j, k]  # float32 in, float32 out: one rounding per product and per addition
        keep = exact >= floor
        order = sorted(zip((-exact[keep]).tolist(), i[keep].tolist(), j[keep].tolist(), strict=True))
        return [(-negative, self.names[a], self.names[b]) for negative, a, b in order[:SEMANTIC_MAX_PAIRS]]


def _related(ctx: Context, kind: int, a: str, b: str) -> bool:
    if kind == CONCEPT:
        x, y = ctx.concept_id.get(a), ctx.concept_id.get(b)
        if x is None or y is None:
            return False
        for s, o in ((x, y), (y, x)):
            for e in ctx.out_edges[s]:
                if ctx.edges.object[e] == o and ctx.edges.count[e] > 0:
                    return True
        return False
    x, y = ctx.label_id.get(a), ctx.label_id.get(b)
    if x is None or y is None:
        return False
    subjects = {ctx.edges.subject[e] for e in ctx.label_edges[x] if ctx.edges.count[e] > 0}
    return any(ctx.edges.subject[e] in subjects for e in ctx.label_edges[y] if ctx.edges.count[e] > 0)


@attrs.frozen
class Twins:
    """What the twin sweeps found: per namespace, lexical (ids) and semantic (names, unfiltered) pairs, and the note."""

    lexical: dict[int, list[tuple[int, int, float]]]
    semantic: dict[int, list[tuple[float, str, str]]]
    note: str | None


@attrs.frozen
class TypeNames:
    """The type names of a context with a schema (by name, and the interned ones by concept id)."""

    names: frozenset[str]
    ids: frozenset[int]

    @classmethod
    def of(cls, ctx: Context) -> TypeNames | None:
        """None when the context has no schema (nothing is dropped)."""
        schema = ctx.schema
        if schema is None:
            return None
        names = frozenset(type_names(ctx, schema))
        return cls(names, frozenset(c for c in map(ctx.concept_id.get, names) if c is not None))

    def drop(self, found: Twins) -> Twins:
        """The concept pairs, lexical and semantic, where neither side is a type name; label pairs untouched."""
        if CONCEPT not in found.lexical:
            return found
        ids, names = self.ids, self.names
        lexical = {**found.lexical, CONCEPT: [p for p in found.lexical[CONCEPT] if p[0] not in ids and p[1] not in ids]}
        semantic = {**found.semantic, CONCEPT: [p for p in found.semantic[CONCEPT] if not {p[1], p[2]} & names]}
        return Twins(lexical, semantic, found.note)


@attrs.frozen
class TwinSweep:
    """The twin sweeps of one context: prepared on the event loop (copies), run anywhere, finished on the loop.

    With a schema installed, concept pairs naming a type name are dropped after the sweeps."""

    kinds: tuple[int, ...]
    lexical: tuple[SpellingIndex, ...]
    vectors: tuple[NameVectors, ...] | None  # None: no gloss vectors serve
    types: TypeNames | None = None

    @classmethod
    def prepare(cls, ctx: Context, kinds: tuple[int, ...], vectors: bool) -> TwinSweep:
        served = vectors and ctx.vectors.glosses is not None
        return cls(
            kinds,
            tuple(SpellingIndex.of(ctx.lexicons[k]) for k in kinds),
            tuple(NameVectors.of(ctx, k) for k in kinds) if served else None,
            TypeNames.of(ctx) if CONCEPT in kinds else None,
        )

    def run(self, dice_floor: float, cosine_floor: float, deadline: float | None) -> Twins:
        """Raises Expired when the budget runs out in the lexical half; the semantic half notes it instead."""
        found = self._run(dice_floor, cosine_floor, deadline)
        return found if self.types is None else self.types.drop(found)

    def _run(self, dice_floor: float, cosine_floor: float, deadline: float | None) -> Twins:
        lexical = {k: idx.twins(dice_floor, deadline) for k, idx in zip(self.kinds, self.lexical, strict=True)}
        semantic: dict[int, list[tuple[float, str, str]]] = {k: [] for k in self.kinds}
        if deadline is not None and time.monotonic() > deadline:
            return Twins(lexical, semantic, EXPIRED_NOTE)
        if self.vectors is None:
            return Twins(lexical, semantic, NO_VECTORS_NOTE)
        note: str | None = None
        for kind, names in zip(self.kinds, self.vectors, strict=True):
            if names.note is not None:
                note = names.note
                continue
            try:
                semantic[kind] = names.pairs(cosine_floor, deadline)
            except Expired:
                return Twins(lexical, semantic, CUT_SHORT_NOTE)
        return Twins(lexical, semantic, note)


def semantic_pairs(ctx: Context, kind: int, found: Twins) -> list[tuple[str, str, float]]:
    """The semantic pairs of one namespace (a, b, f32 score), related pairs removed (read on the loop)."""
    return [(a, b, F32(score)) for score, a, b in found.semantic[kind] if not _related(ctx, kind, a, b)]


def sweep(
    ctx: Context, kinds: tuple[int, ...], dice_floor: float, cosine_floor: float, deadline: float | None, vectors: bool
) -> Twins:
    """The twin sweeps in place (tests, and callers with nothing else to serve meanwhile)."""
    return TwinSweep.prepare(ctx, kinds, vectors).run(dice_floor, cosine_floor, deadline)
