"""The search explanation's reruns (docs/explain.md): the passage lanes with nothing truncated.

It reruns the passage lanes (`passages.searched`, BM25's ranking, the vector lane's sweep) and locates
a target in what they produced; `server/wire/explain_search.py` names the verdict and renders it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from taguru_server.store.model.context import Context
from taguru_server.store.model.passage import Passage
from taguru_server.store.read.explain import F32
from taguru_server.store.read.passages import SourceFilter, eligible_names, eligible_sources, searched, top_documents
from taguru_server.store.read.vector_lane import VectorQuery, VectorRow, classify, fuse, sweep
from taguru_server.store.text import query_terms, terms


@attrs.frozen
class SearchTarget:
    """What the request names, checked: the source's passage and whether a paragraph was named."""

    passage: Passage
    paragraph: int | None


@attrs.frozen
class Ranked:
    """One paragraph of the untruncated ranking, with each lane's (rank, raw score) evidence."""

    source: str
    paragraph: int
    score: float
    bm25: tuple[int, float] | None
    vector: tuple[int, float] | None


@attrs.frozen
class SearchRun:
    """The search being explained: its inputs, the untruncated ranking, the whole vector sweep."""

    ctx: Context
    query: str
    scope: SourceFilter
    vq: VectorQuery
    ranked: list[Ranked]
    rows: list[VectorRow]
    fused: bool
    floor: float | None

    def served(self, limit: int) -> list[Any]:
        """Exactly what `…/sources/search` answers at `limit`."""
        return searched(self.ctx, self.query, limit, self.scope, self.vq)[2]


def full_ranking(ctx: Context, query: str, scope: SourceFilter, vq: VectorQuery) -> SearchRun:
    """The search rerun with nothing truncated: every paragraph touching a term (and every swept row)."""
    q_terms = query_terms(query)
    allowed = None
    names = None
    if scope.active:
        allowed, _n = eligible_sources(ctx, scope)
        names = eligible_names(ctx, allowed)
    docs = top_documents(ctx, q_terms, max(ctx.bm25.n_live, 1), allowed)
    doc_source, doc_par = ctx.bm25.doc_source, ctx.bm25.doc_par
    lexical = [(ctx.sources[doc_source[d]], doc_par[d], F32(s)) for d, s in docs]
    state = classify(ctx, vq)
    store = ctx.vectors.passages
    if not state.ran or store is None or vq.vector is None or state.floor is None:
        ranked = [Ranked(s, p, float(sc), (i, float(sc)), None) for i, (s, p, sc) in enumerate(lexical, start=1)]
        return SearchRun(ctx, query, scope, vq, ranked, [], False, None)
    rows = sweep(store, vq.vector, store.rows, -2.0, names)
    f_floor = F32(state.floor)
    floored = [r for r in rows if F32(r.score) >= f_floor]
    hits = fuse(ctx, [(s, p, float(sc)) for s, p, sc in lexical], floored, True, len(lexical) + len(floored))
    ranked = [Ranked(h.source, h.paragraph, h.score, h.bm25, h.vector) for h in hits]
    return SearchRun(ctx, query, scope, vq, ranked, rows, True, state.floor)


def _pool_floor(rank: int) -> int:
    """The smallest limit whose lane pool (max(4·limit, 50)) holds a lane rank."""
    return 1 if rank <= 50 else -(-rank // 4)


def probe_reach(
    run: SearchRun, source: str, paragraph: int, rank: int, hit: Ranked, expired: Callable[[], bool]
) -> int | None:
    """The smallest verified limit that serves the target, from its rank up (None: none found in budget)."""
    full = len(run.ranked)
    lane_ranks = [lane[0] for lane in (hit.bm25, hit.vector) if lane is not None]
    need = _pool_floor(max(lane_ranks)) if lane_ranks else 1
    ceiling = max(full, len(run.rows))
    candidate = min(max(rank, need), full)
    for _ in range(2 * max(ceiling, 2).bit_length() + 4):
        if expired():
            return None
        if any(h.source == source and h.paragraph == paragraph for h in run.served(candidate)):
            return candidate
        if candidate >= ceiling:
            return None
        candidate = min(candidate * 2, full if candidate < full else ceiling)
    return None


def paragraph_terms(passage: Passage, paragraph: int) -> list[str]:
    """The paragraph's own spelled terms (its text, then its questions), deduplicated, first kept."""
    texts = [passage.paragraphs[paragraph]] + [q for p, q in passage.questions if p == paragraph]
    out: dict[str, None] = {}
    for text in texts:
        out.update(dict.fromkeys(terms(text)))
    return list(out)
