"""BM25 postings over paragraphs, scored in f32 exactly as the reference does.

Documents are registered cheaply (their texts are kept by reference) and tokenized in bulk
the first time the index is read after a change (``seal``), into immutable compressed-row
segments: one large main segment plus one small delta segment that is rebuilt from the
documents added since the last full build. Removed documents are tombstoned; the
statistics N, n_t and the total length stay exact at every read.

Scoring keeps the reference's arithmetic: per-term contributions are computed with numpy f32 in
the specified grouping (and cached until the next change), and a document's score is the
f32 sum of its contributions in query-term order. Top-k selection is exact: candidates are
grown from the terms with the largest maximum contribution until the sum of the remaining
terms' maxima (with a safety margin for f32 rounding) falls strictly below the k-th best
exact score found, so no skipped document could rank (ties included).
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from taguru_server.store.text import bulk_term_counts, terms

F = np.float32
K1 = F(1.2)
B = F(0.75)
K1_PLUS_1 = F(K1 + F(1.0))
ONE_MINUS_B = F(F(1.0) - B)
HALF = F(0.5)
ONE = F(1.0)
ZERO = F(0.0)

BULK_CHUNK = 4096  # documents tokenized per numpy pass
DENSE_FACTOR = 24  # scoring a candidate by binary search costs about this many dense additions (measured, hub corpus)
CACHE_POSTINGS = 16_000_000  # per-term contribution arrays kept before the cache is dropped
# a term held by at least 1/DENSE_ROW of the documents is also kept as one contribution per document when it is
# scored densely: one vector addition instead of a scatter into the scores (a row counts n_docs in the cache)
DENSE_ROW = 4


class TermStat(NamedTuple):
    """One query term against one document: tf there, df corpus-wide, idf, and its score addend (f32)."""

    tf: np.float32
    df: int
    idf: np.float32
    contribution: np.float32


class _Segment:
    """Immutable postings: for term id t, docs[start[t]:start[t]+count[t]] ascending."""

    __slots__ = ("start", "count", "docs", "tfs", "n_postings")

    def __init__(self, n_terms: int, term: np.ndarray, doc: np.ndarray, tf: np.ndarray) -> None:
        order = np.argsort(term * np.int64(1 << 32) + doc, kind="stable") if len(term) else np.empty(0, np.int64)
        term = term[order]
        self.docs = doc[order].astype(np.int32)
        self.tfs = tf[order].astype(F)
        self.count = np.bincount(term, minlength=n_terms).astype(np.int64)
        self.start = np.zeros(n_terms, dtype=np.int64)
        if n_terms > 1:
            np.cumsum(self.count[:-1], out=self.start[1:])
        self.n_postings = len(self.docs)

    def postings(self, t: int) -> tuple[np.ndarray, np.ndarray] | None:
        if t >= len(self.count):
            return None
        c = self.count[t]
        if not c:
            return None
        a = self.start[t]
        return self.docs[a : a + c], self.tfs[a : a + c]

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        term = np.repeat(np.arange(len(self.count), dtype=np.int64), self.count)
        return term, self.docs.astype(np.int64), self.tfs


class Bm25Index:
    """Append-only documents with tombstones; document frequencies kept exact."""

    def __init__(self) -> None:
        self.term_id: dict[str, int] = {}
        self.df = np.zeros(0, dtype=np.int64)  # live documents per term id (sealed documents)
        self.doc_len: array[float] = array("f")  # term count, set when sealed
        self.doc_alive = bytearray()
        self.doc_source: array[int] = array("i")
        self.doc_par: array[int] = array("i")
        # each document's parts; None once removed, or for a document registered by count (`add_counted`), whose
        # parts `resolve(doc)` gives when they are needed (its removal, a digest; never its terms: it is sealed)
        self.doc_parts: list[Sequence[str] | None] = []
        self.resolve: Callable[[int], Sequence[str]] | None = None
        self.n_live = 0  # live documents, sealed or not
        self.total_len = 0  # over live sealed documents
        self.n_dead = 0
        self._sealed = 0  # documents below this id are tokenized
        self._main: _Segment | None = None
        self._main_upto = 0  # documents below this id are in the main segment
        self._delta: _Segment | None = None
        self._delta_raw: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._delta_postings = 0
        self._dead_in_segments = 0
        self._version = 0
        self._cache: dict[str, tuple[np.ndarray, np.ndarray, float] | None] = {}
        self._rows: dict[str, np.ndarray] = {}  # dense contribution rows of common terms (`DENSE_ROW`)
        self._hot: set[str] = set()  # terms read from the cache at least once since it was last emptied
        self._norm = np.zeros(0, dtype=F)
        self._norms_version = -1
        self._cache_version = -1
        self._cache_size = 0
        self._np_version = -1
        self._lens = np.zeros(0, dtype=F)
        self._alive = np.zeros(0, dtype=bool)
        self._src = np.zeros(0, dtype=np.int32)
        self._par = np.zeros(0, dtype=np.int32)

    @property
    def version(self) -> int:
        """Bumped by every document added or removed."""
        return self._version

    # ----- writes ------------------------------------------------------------------------

    def add(self, source_id: int, paragraph: int, parts: Sequence[str]) -> int:
        """Register one paragraph (its text, then its questions); returns its document id."""
        doc = len(self.doc_alive)
        self.doc_len.append(0.0)
        self.doc_alive.append(1)
        self.doc_source.append(source_id)
        self.doc_par.append(paragraph)
        self.doc_parts.append(parts)
        self.n_live += 1
        self._version += 1
        return doc

    def add_sources(self, sources: Sequence[tuple[int, Sequence[Sequence[str]]]]) -> list[range]:
        """`add` for each paragraph of each (source id, its paragraphs' parts) in order (paragraph i the i-th
        parts), in one call; each source's document ids."""
        counts = np.fromiter((len(parts) for _, parts in sources), dtype=np.int64, count=len(sources))
        ranges = self._register([sid for sid, _ in sources], counts)
        for _, parts in sources:
            self.doc_parts.extend(parts)
        return ranges

    def add_counted(self, sources: Sequence[int], counts: np.ndarray) -> list[range]:
        """`add_sources` for sources given by their paragraph counts, the parts left to `resolve`: for the
        documents a load registers and then seals from a file that numbers them (nothing to tokenize)."""
        ranges = self._register(sources, counts)
        self.doc_parts.extend(itertools.repeat(None, int(counts.sum())))
        return ranges

    def parts(self, doc: int) -> Sequence[str]:
        """A live document's parts (a removed one's: none)."""
        found = self.doc_parts[doc]
        if found is None and self.doc_alive[doc] and self.resolve is not None:
            return self.resolve(doc)
        return found or ()

    def _register(self, source_ids: Sequence[int], counts: np.ndarray) -> list[range]:
        first = len(self.doc_alive)
        n = int(counts.sum())
        starts = np.zeros(len(source_ids) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        self.doc_len.frombytes(bytes(4 * n))
        self.doc_alive.extend(b"\x01" * n)
        sids = np.fromiter(source_ids, dtype=np.int32, count=len(source_ids))
        self.doc_source.frombytes(np.repeat(sids, counts).astype(np.int32).tobytes())
        self.doc_par.frombytes(
            (np.arange(n, dtype=np.int64) - np.repeat(starts[:-1], counts)).astype(np.int32).tobytes()
        )
        self.n_live += n
        self._version += n
        bounds = (starts + first).tolist()
        return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]

    def remove(self, doc: int) -> None:
        """Tombstone a document and take it out of the exact statistics."""
        if not self.doc_alive[doc]:
            return
        self.doc_alive[doc] = 0
        self.n_live -= 1
        self.n_dead += 1
        self._version += 1
        parts = self.doc_parts[doc]
        if parts is None and doc < self._sealed and self.resolve is not None:
            parts = self.resolve(doc)  # registered by count: read while the document is still its source's
        self.doc_parts[doc] = None
        if doc >= self._sealed:
            return  # never tokenized: it simply will not be
        self._dead_in_segments += 1
        self.total_len -= int(self.doc_len[doc])
        term_id = self.term_id
        ids = {term_id[t] for p in parts or () for t in terms(p)}
        if ids:
            self.df[np.fromiter(ids, dtype=np.int64, count=len(ids))] -= 1

    # ----- sealing -----------------------------------------------------------------------

    def seal(self) -> None:
        """Tokenize every pending document into the delta (or a rebuilt main) segment."""
        n_docs = len(self.doc_alive)
        if self._sealed < n_docs:
            new_raw = self._tokenize(self._sealed, n_docs)
            self._sealed = n_docs
            self._delta_raw.extend(new_raw)
            self._delta_postings += sum(len(r[0]) for r in new_raw)
            main_size = self._main.n_postings if self._main is not None else 0
            if self._delta_postings > max(main_size // 8, 200_000) or self._dead_in_segments * 4 > max(self.n_live, 1):
                self._rebuild_main()
            else:
                self._rebuild_delta()
        elif self._dead_in_segments * 4 > max(self.n_live, 64) and self._dead_in_segments > 1024:
            self._rebuild_main()
        if self._np_version != self._version:
            self._lens = np.array(self.doc_len, dtype=F)
            self._alive = np.frombuffer(bytes(self.doc_alive), dtype=np.uint8).astype(bool)
            self._src = np.array(self.doc_source, dtype=np.int32)
            self._par = np.array(self.doc_par, dtype=np.int32)
            self._np_version = self._version

    def _tokenize(self, first: int, end: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        alive = self.doc_alive
        return self.tokenize_docs([d for d in range(first, end) if alive[d]])

    def tokenize_docs(self, docs: list[int]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Tokenize these live documents: (term ids, doc ids, tfs) chunks; df, lengths and total grow."""
        out = []
        parts = self.doc_parts
        term_id = self.term_id
        for a in range(0, len(docs), BULK_CHUNK):
            ids = docs[a : a + BULK_CHUNK]
            found, p_term, p_doc, p_tf, lens = bulk_term_counts(
                [parts[d] or self.parts(d) for d in ids]  # type: ignore[misc]
            )
            mapped = np.fromiter((term_id.setdefault(t, len(term_id)) for t in found), dtype=np.int64, count=len(found))
            doc_ids = np.array(ids, dtype=np.int64)
            term = mapped[p_term]
            docs_of = doc_ids[p_doc]
            if len(self.df) < len(term_id):
                grown = np.zeros(max(len(term_id), 2 * len(self.df)), dtype=np.int64)
                grown[: len(self.df)] = self.df
                self.df = grown
            if len(term) < 4096:
                np.add.at(self.df, term, 1)
            else:
                self._add_df(term)
            for d, n in zip(ids, lens.tolist(), strict=False):
                self.doc_len[d] = float(n)
            self.total_len += int(lens.sum())
            out.append((term, docs_of, p_tf))
        return out

    def _add_df(self, term: np.ndarray) -> None:
        counts = np.bincount(term, minlength=len(self.df))
        self.df[: len(counts)] += counts

    def _n_terms(self) -> int:
        return len(self.term_id)

    def _rebuild_main(self) -> None:
        parts = list(self._delta_raw)
        if self._main is not None:
            parts.insert(0, self._main.flat())
        if parts:
            term = np.concatenate([p[0] for p in parts])
            doc = np.concatenate([p[1] for p in parts])
            tf = np.concatenate([p[2] for p in parts])
        else:
            term = doc = np.empty(0, np.int64)
            tf = np.empty(0, F)
        if self.n_dead:
            alive = np.frombuffer(bytes(self.doc_alive), dtype=np.uint8).astype(bool)
            keep = alive[doc]
            term, doc, tf = term[keep], doc[keep], tf[keep]
        self._main = _Segment(self._n_terms(), term, doc, tf)
        self._main_upto = self._sealed
        self._delta = None
        self._delta_raw = []
        self._delta_postings = 0
        self._dead_in_segments = 0

    def _rebuild_delta(self) -> None:
        if not self._delta_raw:
            self._delta = None
            return
        term = np.concatenate([p[0] for p in self._delta_raw])
        doc = np.concatenate([p[1] for p in self._delta_raw])
        tf = np.concatenate([p[2] for p in self._delta_raw])
        self._delta = _Segment(self._n_terms(), term, doc, tf)

    # ----- reads -------------------------------------------------------------------------

    def _term(self, term: str) -> tuple[np.ndarray, np.ndarray, float] | None:
        """Live postings of a term with their f32 contributions and the largest one."""
        if self._cache_version != self._version:
            self._cache, self._rows, self._hot = {}, {}, set()
            self._cache_size = 0
            self._cache_version = self._version
        if term in self._cache:
            hit = self._cache[term] = self._cache.pop(term)  # the most recently used last: evicted from the front
            self._hot.add(term)
            return hit
        t = self.term_id.get(term)
        entry = None
        if t is not None and self.df[t] > 0:
            found = [seg.postings(t) for seg in (self._main, self._delta) if seg is not None]
            pieces = [p for p in found if p is not None]
            if pieces:
                docs = pieces[0][0] if len(pieces) == 1 else np.concatenate([p[0] for p in pieces])
                tfs = pieces[0][1] if len(pieces) == 1 else np.concatenate([p[1] for p in pieces])
                if self.n_dead:
                    keep = self._alive[docs]
                    if not keep.all():
                        docs, tfs = docs[keep], tfs[keep]
                if len(docs):
                    idf = self._idf(int(self.df[t]))
                    c = (idf * (tfs * K1_PLUS_1)) / (tfs + self._norms()[docs])
                    entry = (docs, c, float(c.max()))
        while self._cache_size > CACHE_POSTINGS and self._cache:  # the least recently used go first
            old = self._cache.pop(next(iter(self._cache)))
            if old is not None:
                self._cache_size -= len(old[0])
        while self._cache_size > CACHE_POSTINGS and self._rows:
            self._rows.pop(next(iter(self._rows)))
            self._cache_size -= len(self.doc_alive)
        self._cache[term] = entry
        if entry is not None:
            self._cache_size += len(entry[0])
        return entry

    def _norms(self) -> np.ndarray:
        """Each document's length part of the denominator, K1·(1 − B + B·dl/avgdl) in f32 (the same
        operations, element by element, as on a term's gathered lengths), computed once per version."""
        if self._norms_version != self._version or len(self._norm) != len(self._lens):
            avgdl = F(max(self.total_len / self.n_live, 1.0))
            self._norm = K1 * (ONE_MINUS_B + (B * self._lens) / avgdl)
            self._norms_version = self._version
        return self._norm

    def _row(self, term: str, entry: tuple[np.ndarray, np.ndarray, float]) -> np.ndarray | None:
        """A common term's contributions as one value per document (0 where it is absent), cached with its
        entry; None for a term held by fewer than 1/DENSE_ROW of the documents, and for one read for the first
        time (a row is built for terms that recur: for one query it costs more than the scatter it saves)."""
        n_docs = len(self.doc_alive)
        docs, c, _ub = entry
        if len(docs) * DENSE_ROW < n_docs:
            return None
        row = self._rows.get(term)
        if row is None and term not in self._hot:
            return None
        if row is None or len(row) != n_docs:
            row = np.zeros(n_docs, dtype=F)
            row[docs] = c
            if self._cache.get(term) is entry:  # kept only while its entry is
                self._rows[term] = row
                self._cache_size += n_docs
        return row

    def _idf(self, n_t: int) -> np.float32:
        """The idf of a term held by `n_t` live paragraphs (f32 operations, the platform log)."""
        big_n = F(self.n_live)
        nt = F(n_t)
        return F(math.log(float(ONE + (big_n - nt + HALF) / (nt + HALF))))

    def _tf(self, t: int, doc: int) -> np.float32:
        """How often term id `t` occurs in one sealed document (0 when it does not)."""
        for seg in (self._main, self._delta):
            found = seg.postings(t) if seg is not None else None
            if found is None:
                continue
            docs, tfs = found
            pos = int(np.searchsorted(docs, doc))
            if pos < len(docs) and docs[pos] == doc:
                return F(tfs[pos])
        return ZERO

    def explain(self, query: list[str], doc: int | None) -> list[TermStat]:
        """Per query term, in order: its tf in `doc`, df, idf and the addend a search gives `doc` (f32).

        The addend is read from the very array the search sums, so the f32 sum of the addends in
        query-term order is bit-equal to the document's search score."""
        self.seal()
        out = []
        for term in query:
            t = self.term_id.get(term)
            df = int(self.df[t]) if t is not None and t < len(self.df) else 0
            if df <= 0 or t is None:
                out.append(TermStat(ZERO, 0, ZERO, ZERO))
                continue
            tf = c = ZERO
            entry = self._term(term)
            if doc is not None and self.doc_alive[doc] and entry is not None:
                docs, contributions, _ub = entry
                pos = int(np.searchsorted(docs, doc))
                if pos < len(docs) and docs[pos] == doc:
                    c = F(contributions[pos])
                    tf = self._tf(t, doc)
            out.append(TermStat(tf, df, self._idf(df), c))
        return out

    def search(self, query: list[str], allowed_sources: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Return (doc ids, f32 scores) of every live paragraph holding a query term."""
        self.seal()
        if self.n_live == 0 or not query:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=F)
        entries = [e for e in map(self._term, query) if e is not None]
        if not entries:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=F)
        docs, scores = _dense(entries, len(self.doc_alive))
        if allowed_sources is not None:
            keep = allowed_sources[self._src[docs]]
            docs, scores = docs[keep], scores[keep]
        return docs.astype(np.int64), scores

    def top(
        self, query: list[str], limit: int, allowed_sources: np.ndarray | None, source_rank: np.ndarray
    ) -> list[tuple[int, float]]:
        """The best `limit` live paragraphs: score desc, source name asc (by rank), paragraph asc."""
        self.seal()
        if self.n_live == 0 or not query or limit <= 0:
            return []
        found = [(t, e) for t in query if (e := self._term(t)) is not None]
        if not found:
            return []
        entries = [e for _t, e in found]
        src = self._src
        m = len(entries)
        order = sorted(range(m), key=lambda j: -entries[j][2])
        rest = [0.0] * (m + 1)
        for j in range(m - 1, -1, -1):
            rest[j] = rest[j + 1] + entries[order[j]][2]
        margin = 1.0 + 2.5e-7 * (m + 2)
        total_postings = sum(len(e[0]) for e in entries)
        cand: np.ndarray | None = None
        scores: np.ndarray | None = None
        for j in range(m):
            docs_j = entries[order[j]][0]
            cand = docs_j if cand is None else _union(cand, docs_j)
            if allowed_sources is not None:
                cand = cand[allowed_sources[src[cand]]]
            if j == m - 1:
                break
            if len(cand) * m * DENSE_FACTOR > len(self.doc_alive) + total_postings:
                cand = None  # scoring the candidates would cost more than scoring everything
                break
            if len(cand) < limit:
                continue
            bound = rest[j + 1] * margin
            if bound >= (rest[0] - rest[j + 1]) * margin:
                continue  # no candidate can yet outscore the remaining terms' bound
            scores = _exact(entries, cand)
            kth = float(np.partition(scores, len(scores) - limit)[len(scores) - limit])
            if bound < kth:
                break
            scores = None
        if cand is None:
            cand, scores = self._scored_densely(found, limit, allowed_sources, total_postings)
        elif scores is None:
            scores = _exact(entries, cand)
        if len(cand) == 0:
            return []
        if len(cand) > limit:
            kth = np.partition(scores, len(scores) - limit)[len(scores) - limit]
            keep = scores >= kth
            cand, scores = cand[keep], scores[keep]
        idx = np.lexsort((self._par[cand], source_rank[src[cand]], -scores))[:limit]
        return list(zip(cand[idx].tolist(), scores[idx].tolist(), strict=False))

    def _scored_densely(
        self,
        found: list[tuple[str, tuple[np.ndarray, np.ndarray, float]]],
        limit: int,
        allowed_sources: np.ndarray | None,
        total_postings: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every posting scored: the allowed documents holding a query term (or, when the postings
        cover most documents, just those at or above the limit-th score) with their scores."""
        n_docs = len(self.doc_alive)
        entries = [e for _t, e in found]
        if allowed_sources is None and total_postings * 2 > n_docs and all(e[2] > 0.0 for e in entries):
            return _dense_top(entries, [self._row(t, e) for t, e in found], n_docs, limit)
        docs, sc = _dense(entries, n_docs)
        if allowed_sources is not None:
            keep = allowed_sources[self._src[docs]]
            docs, sc = docs[keep], sc[keep]
        return docs, sc


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted distinct values of two sorted arrays (np.union1d hashes, which is slow here)."""
    c = np.concatenate((a, b))
    c.sort(kind="stable")
    if len(c) < 2:
        return c
    keep = np.empty(len(c), dtype=bool)
    keep[0] = True
    np.not_equal(c[1:], c[:-1], out=keep[1:])
    return c[keep]


def _exact(entries: list[tuple[np.ndarray, np.ndarray, float]], cand: np.ndarray) -> np.ndarray:
    """f32 scores of the candidate documents, contributions added in query-term order."""
    scores = np.zeros(len(cand), dtype=F)
    for docs, c, _ub in entries:
        pos = np.searchsorted(docs, cand)
        np.minimum(pos, len(docs) - 1, out=pos)
        found = docs[pos] == cand
        scores += np.where(found, c[pos], ZERO)
    return scores


def _dense_top(
    entries: list[tuple[np.ndarray, np.ndarray, float]], rows: list[np.ndarray | None], n_docs: int, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """The documents `_dense` would give whose score is at least the limit-th best (ties kept), and their scores.

    Every contribution is positive here, so a document holds a query term exactly when its score is
    not zero: no hit mask, and the selection runs on the score array itself. `rows[j]`: entry j's
    contributions per document, or None (a row adds 0 where the term is absent: the same f32 sums)."""
    scores = np.zeros(n_docs, dtype=F)
    for (docs, c, _ub), row in zip(entries, rows, strict=True):
        if row is not None:
            scores += row
        else:
            scores[docs] += c
    # every score is at least each of its contributions, so the limit-th best contribution of one term is a
    # floor of the limit-th best score: the selection runs over the documents at or above it (a partition
    # over every document is slow where most of them are zero: numpy's selection degrades on ties)
    long_enough = [e for e in entries if len(e[1]) >= limit]
    if n_docs > limit and long_enough:
        c = max(long_enough, key=lambda e: e[2])[1]
        floor = np.partition(c, len(c) - limit)[len(c) - limit]
        docs = np.flatnonzero(scores >= floor)
        top = scores[docs]
        kth = np.partition(top, len(top) - limit)[len(top) - limit]
        keep = top >= kth
        return docs[keep], top[keep]
    if n_docs > limit:
        kth = np.partition(scores, n_docs - limit)[n_docs - limit]
        if kth > ZERO:
            docs = np.flatnonzero(scores >= kth)
            return docs, scores[docs]
    docs = np.flatnonzero(scores)
    return docs, scores[docs]


def _dense(entries: list[tuple[np.ndarray, np.ndarray, float]], n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """Every document holding a query term, with its f32 score (query-term order)."""
    scores = np.zeros(n_docs, dtype=F)
    hit = np.zeros(n_docs, dtype=bool)
    for docs, c, _ub in entries:
        scores[docs] += c
        hit[docs] = True
    docs = np.flatnonzero(hit)
    return docs, scores[docs]
