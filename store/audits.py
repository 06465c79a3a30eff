"""The audits of a context: twin sweeps, drift and consolidation candidates (read-only, never verdicts).

Everything here reads one in-memory context and writes nothing. Orders and tie-breaks follow
the wire contract: ids are the dense intern-order ids the context keeps, names sort as Python
strings (UTF-8 byte order), sums are the f64 values the context holds.

The lexical twin sweep runs on the spelling index resolve already keeps (`store/lexicon.py`):
every posting list of a non-stop bigram is expanded into its spelling pairs with array
operations, block by block over the first spelling's id (so each pair is counted once, in
bounded memory), and the best Dice per record pair is kept.
Tests compare it with a plain transcription of the contract on seeded random contexts.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np

from taguru_server.store.context import CONCEPT, LABEL, UNSOURCED_EXPORT, Context, _saturate
from taguru_server.store.lexicon import Lexicon
from taguru_server.store.wire import F32

DEFAULT_FLOOR = 0.6
NO_VECTORS_NOTE = "ベクトル未生成のため意味的検出はスキップ (POST embeddings/refresh を実行)"
EXPIRED_NOTE = "意味的検出はスキップ (期限切れ)"
TOO_MANY_NAMES_NOTE = "語彙が 2000 名を超えるためこの名前空間の意味的検出はスキップ"
CUT_SHORT_NOTE = "意味的検出は期限切れのため途中で打ち切り (一部の結果のみ)"
SEMANTIC_MAX_NAMES = 2000
SEMANTIC_MAX_PAIRS = 100
DETECTOR = "consolidation/1"
CHECKS = ("merge", "contradiction", "staleness")
CHECK_EVERY = 512  # entries between deadline checks

FNV_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFF_FFFF_FFFF_FFFF


class Expired(Exception):
    """The request's budget ran out in the middle of a sweep."""


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise Expired


def clamp01(value: float | None, default: float = DEFAULT_FLOOR) -> float:
    v = default if value is None else float(value)
    return min(max(v, 0.0), 1.0)


# ----- fingerprints ------------------------------------------------------------------------


def fold(d: int, data: bytes) -> int:
    for byte in data:
        d = ((d ^ byte) * FNV_PRIME) & MASK64
    return d


def field(d: int, s: str) -> int:
    return fold(fold(d, s.encode("utf-8")), b"\0")


def u64le(n: int) -> bytes:
    return struct.pack("<Q", n & MASK64)


def f64le(x: float) -> bytes:
    return struct.pack("<d", x)


def hex16(d: int) -> str:
    return f"{d:016x}"


# ----- the lexical twin sweep (docs/audits.md, "Twin sweep") -------------------------------


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
                if ctx.e_o[e] == o and ctx.e_cnt[e] > 0:
                    return True
        return False
    x, y = ctx.label_id.get(a), ctx.label_id.get(b)
    if x is None or y is None:
        return False
    subjects = {ctx.e_s[e] for e in ctx.label_edges[x] if ctx.e_cnt[e] > 0}
    return any(ctx.e_s[e] in subjects for e in ctx.label_edges[y] if ctx.e_cnt[e] > 0)


@attrs.frozen
class Twins:
    """What the twin sweeps found: per namespace, lexical (ids) and semantic (names, unfiltered) pairs, and the note."""

    lexical: dict[int, list[tuple[int, int, float]]]
    semantic: dict[int, list[tuple[float, str, str]]]
    note: str | None


@attrs.frozen
class TwinSweep:
    """The twin sweeps of one context: prepared on the event loop (copies), run anywhere, finished on the loop."""

    kinds: tuple[int, ...]
    lexical: tuple[SpellingIndex, ...]
    vectors: tuple[NameVectors, ...] | None  # None: no gloss vectors serve

    @classmethod
    def prepare(cls, ctx: Context, kinds: tuple[int, ...], vectors: bool) -> TwinSweep:
        served = vectors and ctx.vectors.glosses is not None
        return cls(
            kinds,
            tuple(SpellingIndex.of(ctx.lexicons[k]) for k in kinds),
            tuple(NameVectors.of(ctx, k) for k in kinds) if served else None,
        )

    def run(self, dice_floor: float, cosine_floor: float, deadline: float | None) -> Twins:
        """Raises Expired when the budget runs out in the lexical half; the semantic half notes it instead."""
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


def semantic_out(ctx: Context, kind: int, found: Twins) -> list[dict[str, Any]]:
    """The semantic pairs of one namespace on the wire, related pairs removed (read on the loop)."""
    return [
        {"a": a, "b": b, "score": F32(score)} for score, a, b in found.semantic[kind] if not _related(ctx, kind, a, b)
    ]


def sweep(
    ctx: Context, kinds: tuple[int, ...], dice_floor: float, cosine_floor: float, deadline: float | None, vectors: bool
) -> Twins:
    """The twin sweeps in place (tests, and callers with nothing else to serve meanwhile)."""
    return TwinSweep.prepare(ctx, kinds, vectors).run(dice_floor, cosine_floor, deadline)


def vocabulary(ctx: Context, found: Twins) -> dict[str, Any]:
    """The vocabulary audit's result from a sweep of both namespaces."""
    return {
        "lexical_concepts": _pairs_out(ctx.concepts, found.lexical[CONCEPT]),
        "lexical_labels": _pairs_out(ctx.labels, found.lexical[LABEL]),
        "semantic_concepts": semantic_out(ctx, CONCEPT, found),
        "semantic_labels": semantic_out(ctx, LABEL, found),
        "semantic_note": found.note,
    }


def _pairs_out(names: list[str], pairs: list[tuple[int, int, float]]) -> list[dict[str, Any]]:
    return [{"a": names[a], "b": names[b], "score": d} for a, b, d in pairs]


# ----- drift -------------------------------------------------------------------------------


def _sort_key(ctx: Context, weight: float, e: int) -> tuple[float, str, str, str]:
    return (-abs(weight), ctx.concepts[ctx.e_s[e]], ctx.labels[ctx.e_l[e]], ctx.concepts[ctx.e_o[e]])


def unsourced(
    ctx: Context, floor: float, limit: int, after: dict[str, Any] | None, deadline: float | None
) -> tuple[int, list[dict[str, Any]]]:
    """(total past the floor, one page) of edges whose attributions do not cover their count."""
    export_sid = ctx.source_id.get(UNSOURCED_EXPORT)
    found: list[tuple[tuple[float, str, str, str], int, float, int]] = []
    bar = abs(floor)
    for e in range(len(ctx.e_s)):
        if e % 4096 == 0:
            _check(deadline)
        cnt = ctx.e_cnt[e]
        if cnt <= 0:
            continue
        covered = 0
        covered_sum = 0.0
        for sid, rsum, rcount, _p in ctx.e_attr[e]:
            if rcount > 0 and sid != export_sid:
                covered += rcount
                covered_sum = _saturate(covered_sum + rsum)
        rest = cnt - covered
        if rest <= 0:
            continue
        weight = _saturate(ctx.e_sum[e] - covered_sum)
        if abs(weight) >= bar:
            found.append((_sort_key(ctx, weight, e), e, weight, rest))
    total = len(found)
    if after is not None:
        bound = (-abs(float(after["weight"])), after["subject"], after["label"], after["object"])
        found = [f for f in found if f[0] > bound]
    found.sort(key=lambda f: f[0])
    page = found[:limit]
    return total, [
        {"unsourced_weight": w, "unsourced_count": rest, "association": ctx.association_out(e)}
        for _k, e, w, rest in page
    ]


def live_concepts(ctx: Context) -> set[int]:
    out: set[int] = set()
    for e in range(len(ctx.e_s)):
        if ctx.e_cnt[e] > 0:
            out.add(ctx.e_s[e])
            out.add(ctx.e_o[e])
    return out


def live_labels(ctx: Context) -> set[int]:
    return {ctx.e_l[e] for e in range(len(ctx.e_s)) if ctx.e_cnt[e] > 0}


def dead_aliases(ctx: Context) -> tuple[dict[str, str], dict[str, str]]:
    """({alias: canonical} of concept aliases, of label aliases) whose canonical is on no live edge."""
    concepts, labels = live_concepts(ctx), live_labels(ctx)
    out: list[dict[str, str]] = []
    for kind, live, names in ((CONCEPT, concepts, ctx.concepts), (LABEL, labels, ctx.labels)):
        table = ctx.aliases[kind]
        out.append({alias: names[table[alias]] for alias in sorted(table) if table[alias] not in live})
    return out[0], out[1]


# ----- consolidation (docs/audits.md, "Consolidation") -------------------------------------


def effective_times(ctx: Context) -> dict[int, int]:
    """Source id -> `date ?? stored_at` of its passage, for every datable source."""
    out: dict[int, int] = {}
    for sid, passage in ctx.passages.items():
        when = passage.date if passage.date is not None else passage.stored_at
        if when is not None:
            out[sid] = when
    return out


def _neighbours(ctx: Context, x: int) -> set[tuple[int, int, int]]:
    out: set[tuple[int, int, int]] = set()
    for e in ctx.out_edges[x]:
        if ctx.e_cnt[e] > 0:
            out.add((0, ctx.e_l[e], ctx.e_o[e]))
            if ctx.e_o[e] == x:
                out.add((1, ctx.e_l[e], x))
    for e in ctx.in_edges[x]:
        if ctx.e_cnt[e] > 0:
            out.add((1, ctx.e_l[e], ctx.e_s[e]))
    return out


def _merge_candidate(
    ctx: Context, a: str, b: str, tier: str, score: float, cap: int
) -> tuple[tuple[float, float, str, str], dict[str, Any]]:
    ia, ib = ctx.concept_id.get(a), ctx.concept_id.get(b)
    na = _neighbours(ctx, ia) if ia is not None else set()
    nb = _neighbours(ctx, ib) if ib is not None else set()
    shared, only_a, only_b = sorted(na & nb), sorted(na - nb), sorted(nb - na)
    union = len(shared) + len(only_a) + len(only_b)
    overlap = len(shared) / union if union else 0.0

    def fact(t: tuple[int, int, int]) -> dict[str, str]:
        return {"direction": "out" if t[0] == 0 else "in", "label": ctx.labels[t[1]], "other": ctx.concepts[t[2]]}

    def text(t: tuple[int, int, int]) -> str:
        return f"{t[0]}|{ctx.labels[t[1]]}|{ctx.concepts[t[2]]}"

    first, second, f_only, s_only = (a, b, only_a, only_b) if a <= b else (b, a, only_b, only_a)
    d = field(field(field(FNV_BASIS, "merge"), first), second)
    for tag, facts in (("s", shared), ("f", f_only), ("g", s_only)):
        d = field(d, tag)
        for s in sorted(text(t) for t in facts):
            d = field(d, s)
    candidate = {
        "a": a,
        "b": b,
        "tier": tier,
        "name_score": score,
        "overlap": overlap,
        "shared_total": len(shared),
        "only_a_total": len(only_a),
        "only_b_total": len(only_b),
        "shared": [fact(t) for t in shared[:cap]],
        "only_a": [fact(t) for t in only_a[:cap]],
        "only_b": [fact(t) for t in only_b[:cap]],
        "fingerprint": hex16(d),
    }
    return (-overlap, -score, a, b), candidate


def merge_section(ctx: Context, found: Twins, limit: int, cap: int, deadline: float | None) -> dict[str, Any]:
    pairs: list[tuple[str, str, str, float]] = [
        (ctx.concepts[a], ctx.concepts[b], "lexical", d) for a, b, d in found.lexical[CONCEPT]
    ]
    pairs.extend((p["a"], p["b"], "semantic", float(p["score"])) for p in semantic_out(ctx, CONCEPT, found))
    # every pair is ranked on its overlap; only the first `limit` get their evidence lists and fingerprint
    neighbours: dict[str, set[tuple[int, int, int]]] = {}

    def live(name: str) -> set[tuple[int, int, int]]:
        got = neighbours.get(name)
        if got is None:
            x = ctx.concept_id.get(name)
            got = neighbours[name] = _neighbours(ctx, x) if x is not None else set()
        return got

    seen: set[tuple[str, str]] = set()
    ranked: list[tuple[tuple[float, float, str, str], str]] = []
    for i, (a, b, tier, score) in enumerate(pairs):
        key = (a, b) if a <= b else (b, a)
        if key in seen:
            continue
        seen.add(key)
        if i % 4096 == 0:
            _check(deadline)
        na, nb = live(a), live(b)
        shared = len(na & nb)
        union = len(na) + len(nb) - shared
        ranked.append(((-(shared / union if union else 0.0), -score, a, b), tier))
    ranked.sort()
    top = [_merge_candidate(ctx, k[2], k[3], tier, -k[1], cap)[1] for k, tier in ranked[:limit]]
    out: dict[str, Any] = {"total": len(ranked), "candidates": top}
    if found.note is not None:
        out["semantic_note"] = found.note
    return out


def _objects_candidate(
    ctx: Context, subject: int, label: int, edges: list[int], tendency: float, times: dict[int, int]
) -> dict[str, Any]:
    rows = []
    for e in edges:
        records = [rec for rec in ctx.e_attr[e] if rec[1] != 0.0]
        row: dict[str, Any] = {
            "object": ctx.concepts[ctx.e_o[e]],
            "weight": ctx.weight(e),
            "count": ctx.e_cnt[e],
            "sources": [ctx.sources[rec[0]] for rec in records],
        }
        dated = [times[rec[0]] for rec in records if rec[0] in times]
        if dated:
            row["latest"] = max(dated)
        rows.append(row)
    s_name, l_name = ctx.concepts[subject], ctx.labels[label]
    d = field(field(field(FNV_BASIS, "objects"), s_name), l_name)
    for row in sorted(rows, key=lambda r: r["object"]):
        d = field(d, row["object"])
        d = fold(d, u64le(row["count"]))
        d = fold(d, f64le(row["weight"]))
        for s in sorted(row["sources"]):
            d = field(d, s)
    return {
        "kind": "objects",
        "subject": s_name,
        "label": l_name,
        "functional_tendency": tendency,
        "objects": rows,
        "fingerprint": hex16(d),
    }


def _contested_candidate(ctx: Context, e: int) -> dict[str, Any] | None:
    records = ctx.e_attr[e]
    supporting = [ctx.sources[r[0]] for r in records if r[1] > 0.0]
    disputing = [ctx.sources[r[0]] for r in records if r[1] < 0.0]
    if not supporting or not disputing:
        return None
    s, lab, o = ctx.concepts[ctx.e_s[e]], ctx.labels[ctx.e_l[e]], ctx.concepts[ctx.e_o[e]]
    d = field(field(field(field(FNV_BASIS, "contested"), s), lab), o)
    d = fold(fold(d, u64le(ctx.e_cnt[e])), f64le(ctx.e_sum[e]))
    d = field(d, "+")
    for src in sorted(supporting):
        d = field(d, src)
    d = field(d, "-")
    for src in sorted(disputing):
        d = field(d, src)
    return {
        "kind": "contested",
        "subject": s,
        "label": lab,
        "object": o,
        "weight": ctx.weight(e),
        "count": ctx.e_cnt[e],
        "supporting_sources": supporting,
        "disputing_sources": disputing,
        "fingerprint": hex16(d),
    }


def contradiction_section(ctx: Context, limit: int, times: dict[int, int], deadline: float | None) -> dict[str, Any]:
    groups: dict[tuple[int, int], list[int]] = {}
    contested: list[int] = []
    for e in range(len(ctx.e_s)):
        if e % 4096 == 0:
            _check(deadline)
        if ctx.e_cnt[e] <= 0:
            continue
        groups.setdefault((ctx.e_s[e], ctx.e_l[e]), []).append(e)
        records = ctx.e_attr[e]
        if any(r[1] > 0.0 for r in records) and any(r[1] < 0.0 for r in records):
            contested.append(e)
    one: dict[int, int] = {}
    some: dict[int, int] = {}
    for (_s, lab), edges in groups.items():
        some[lab] = some.get(lab, 0) + 1
        if len(edges) == 1:
            one[lab] = one.get(lab, 0) + 1
    tendency = {lab: one.get(lab, 0) / n for lab, n in some.items()}
    objects = sorted(
        (-tendency[lab], ctx.labels[lab], ctx.concepts[s], s, lab)
        for (s, lab), edges in groups.items()
        if len(edges) >= 2
    )
    # only the candidates inside `limit` are rendered (rows, sources, fingerprint)
    shown: list[dict[str, Any]] = [
        _objects_candidate(ctx, s, lab, groups[(s, lab)], tendency[lab], times)
        for _t, _l, _s, s, lab in objects[:limit]
    ]
    shown += [c for c in map(lambda e: _contested_candidate(ctx, e), contested[: max(limit - len(shown), 0)]) if c]
    return {"total": len(objects) + len(contested), "candidates": shown}


def staleness_section(
    ctx: Context, limit: int, floor_secs: int, times: dict[int, int], deadline: float | None
) -> dict[str, Any]:
    latest: dict[int, int] = {}
    undatable = 0
    neighbourhood: dict[int, int] = {}
    for e in range(len(ctx.e_s)):
        if e % 4096 == 0:
            _check(deadline)
        if ctx.e_cnt[e] <= 0:
            continue
        dated = [times[r[0]] for r in ctx.e_attr[e] if r[0] in times]
        if not dated:
            undatable += 1
            continue
        latest[e] = max(dated)
        s = ctx.e_s[e]
        neighbourhood[s] = max(neighbourhood.get(s, latest[e]), latest[e])
    found: list[tuple[int, str, str, str, int]] = []
    for e, when in latest.items():
        gap = neighbourhood[ctx.e_s[e]] - when
        if gap <= 0 or gap < floor_secs:
            continue
        found.append((-gap, ctx.concepts[ctx.e_s[e]], ctx.labels[ctx.e_l[e]], ctx.concepts[ctx.e_o[e]], e))
    found.sort()
    shown = []
    for negative, sn, ln, on, e in found[:limit]:  # only the candidates inside `limit` are rendered
        when, top = latest[e], neighbourhood[ctx.e_s[e]]
        d = field(field(field(field(FNV_BASIS, "stale"), sn), ln), on)
        d = fold(fold(d, u64le(when)), u64le(top))
        shown.append(
            {
                "subject": sn,
                "label": ln,
                "object": on,
                "latest": when,
                "neighborhood_latest": top,
                "gap": -negative,
                "sources": [ctx.sources[r[0]] for r in ctx.e_attr[e]],
                "fingerprint": hex16(d),
            }
        )
    return {"total": len(found), "undatable": undatable, "candidates": shown}


def consolidation(
    ctx: Context,
    checks: set[str],
    *,
    limit: int = 100,
    evidence_cap: int = 20,
    dice_floor: float = DEFAULT_FLOOR,
    cosine_floor: float = DEFAULT_FLOOR,
    floor_secs: int = 0,
    deadline: float | None = None,
    vectors: bool = False,
    twins: Twins | None = None,
) -> dict[str, Any]:
    """The consolidation audit's result with the requested sections; raises Expired past the budget.

    `twins` is the concept sweep when the caller ran it already (off the event loop)."""
    out: dict[str, Any] = {"detector": DETECTOR}
    if "merge" in checks:
        if twins is None:
            twins = sweep(ctx, (CONCEPT,), dice_floor, cosine_floor, deadline, vectors)
        out["merge"] = merge_section(ctx, twins, limit, evidence_cap, deadline)
    times = effective_times(ctx) if checks & {"contradiction", "staleness"} else {}
    if "contradiction" in checks:
        out["contradiction"] = contradiction_section(ctx, limit, times, deadline)
    if "staleness" in checks:
        out["staleness"] = staleness_section(ctx, limit, floor_secs, times, deadline)
    return out
