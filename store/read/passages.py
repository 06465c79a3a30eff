"""The passage lanes: BM25 search over paragraphs, the source filter, and the vector lane fused in."""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import ParamSpec, Protocol

import attrs
import numpy as np

from taguru_server.store.model.context import Context
from taguru_server.store.model.passage import Passage
from taguru_server.store.read.vector_lane import FusedHit, LaneState, VectorQuery, classify, fuse, sweep
from taguru_server.store.text import query_terms
from taguru_server.store.wire import F32

P = ParamSpec("P")
NO_EMBEDDINGS = "no embedding provider is configured"


@attrs.frozen
class Skip:
    """Why a lane did not run: a stable token and the plan's text."""

    token: str
    text: str


ZERO_LIMIT = Skip("zero_limit", "the requested limit is 0")
NO_QUERY_TERMS = Skip("no_query_terms", "the query yields no searchable terms")


@attrs.frozen
class SourceFilter:
    """The sources a passage search may answer from: those carrying any of `tags`, dated in [since, until).
    A part that is None does not filter; with all three None the search is not filtered at all."""

    tags: list[str] | None = None
    since: int | None = None
    until: int | None = None

    @property
    def active(self) -> bool:
        return self.tags is not None or self.since is not None or self.until is not None

    def admits(self, passage: Passage) -> bool:
        return passes_filter(passage, set(self.tags or []), self.since, self.until)


EVERY_SOURCE = SourceFilter()


class LaneTrace(Protocol):
    """What watches the passage lanes of a search (the server's tracing; none by default)."""

    def lane(self, name: str, started_ns: int, ended_ns: int, counts: dict[str, int | bool]) -> None:
        """One lane ran (`taguru.search.bm25`, `.ann` or `.fuse`), with its counts (no text)."""

    def outcome(self, found: PassageSearch, state: LaneState | None, hits: list[PassageHit | FusedHit]) -> None:
        """The search is done: BM25's search, the vector lane's state, the hits."""

    def event(self, name: str, reason: str) -> None:
        """An event (`taguru.cache`, ...) with its closed reason code, on the span current now."""


# set by the server for the request it serves while tracing; unset, a search records nothing
LANE_TRACE: ContextVar[LaneTrace | None] = ContextVar("lane_trace", default=None)


@attrs.frozen
class PassageHit:
    """One BM25 hit: the paragraph, its f32 score and its rank in the lane."""

    source: str
    paragraph: int
    score: float
    text: str
    rank: int


@attrs.frozen
class PassageSearch:
    """The passage lanes over one context: BM25 hits, or why BM25 did not run; the filter's counts."""

    hits: tuple[PassageHit, ...]
    skipped: Skip | None = None
    eligible_sources: int | None = None
    total_sources: int | None = None


def passage_search(ctx: Context, query: str, limit: int, scope: SourceFilter = EVERY_SOURCE) -> PassageSearch:
    """BM25 over paragraphs, optionally restricted to sources by tag and date."""
    allowed = None
    eligible = total = None
    if scope.active:
        allowed, eligible = eligible_sources(ctx, scope)
        total = len(ctx.passages)
    if limit == 0:
        return PassageSearch((), ZERO_LIMIT, eligible, total)
    q_terms = query_terms(query)
    if not q_terms:
        return PassageSearch((), NO_QUERY_TERMS, eligible, total)
    doc_source, doc_par = ctx.bm25.doc_source, ctx.bm25.doc_par
    sources, passages = ctx.sources, ctx.passages
    make = float.__new__
    hits = []
    for rank, (doc, score) in enumerate(top_documents(ctx, q_terms, limit, allowed), start=1):
        sid = doc_source[doc]
        par = doc_par[doc]
        s = make(F32, score)  # already an f32 value: F32() would round it to itself
        hits.append(PassageHit(sources[sid], par, s, passages[sid].paragraphs[par], rank))
    return PassageSearch(tuple(hits), None, eligible, total)


def searched(
    ctx: Context, query: str, limit: int, scope: SourceFilter = EVERY_SOURCE, vector: VectorQuery | None = None
) -> tuple[PassageSearch, LaneState | None, list[PassageHit | FusedHit]]:
    """The passage lanes: BM25's search, the vector lane's state (None when both lanes were skipped), the hits."""
    trace = LANE_TRACE.get()
    found, state, hits = _searched(ctx, query, limit, scope, vector, trace)
    if trace is not None:
        trace.outcome(found, state, hits)
    return found, state, hits


def _searched(
    ctx: Context, query: str, limit: int, scope: SourceFilter, vector: VectorQuery | None, trace: LaneTrace | None
) -> tuple[PassageSearch, LaneState | None, list[PassageHit | FusedHit]]:
    """`searched`, each lane that runs reported to `trace`."""
    vq = vector or VectorQuery()
    state = None if limit == 0 or not query_terms(query) else classify(ctx, vq)
    pool = max(4 * limit, 50)
    asked = pool if state is not None and state.ran else limit
    started = time.time_ns()
    found = passage_search(ctx, query, asked, scope)
    if trace is not None and found.skipped is None:
        counts = {"taguru.search.terms": len(set(query_terms(query))), "taguru.search.pool": asked}
        trace.lane("taguru.search.bm25", started, time.time_ns(), {**counts, "taguru.search.hits": len(found.hits)})
    if state is None or not state.ran:
        return found, state, list[PassageHit | FusedHit](found.hits)
    store = ctx.vectors.passages
    assert store is not None and vq.vector is not None and state.floor is not None
    allowed = eligible_names(ctx, eligible_sources(ctx, scope)[0]) if scope.active else None
    started = time.time_ns()
    rows = sweep(store, vq.vector, pool, state.floor, allowed)
    if trace is not None:
        counts = {"taguru.search.pool": min(pool, store.rows), "taguru.search.rows": store.rows}
        swept = {**counts, "taguru.search.exact": True, "taguru.search.hits": len(rows)}  # a full scan, no ANN index
        trace.lane("taguru.search.ann", started, time.time_ns(), swept)
    started = time.time_ns()
    bm25 = [(h.source, h.paragraph, h.score) for h in found.hits]
    fused = list[PassageHit | FusedHit](fuse(ctx, bm25, rows, True, limit))
    if trace is not None:
        pools = {"taguru.search.lexical_pool": len(bm25), "taguru.search.semantic_pool": len(rows)}
        trace.lane("taguru.search.fuse", started, time.time_ns(), {**pools, "taguru.passage.hit_count": len(fused)})
    return found, state, fused


def top_documents(ctx: Context, q_terms: list[str], limit: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
    """The best `limit` paragraphs by score desc, source name asc, paragraph asc."""
    if limit <= 0:
        return []
    return ctx.bm25.top(q_terms, limit, allowed, ctx.source_rank())


def passes_filter(passage: Passage, wanted: set[str], since: int | None, until: int | None) -> bool:
    """Whether a source is eligible: any of the wanted tags (none wanted: any), its date in [since, until)."""
    if wanted and not wanted.intersection(passage.tags):
        return False
    when = passage.date if passage.date is not None else passage.stored_at
    if since is not None and (when is None or when < since):
        return False
    return until is None or (when is not None and when < until)


def eligible_sources(ctx: Context, scope: SourceFilter) -> tuple[np.ndarray, int]:
    """The source-id mask the filter admits, and how many sources with passages it admits."""
    wanted, since, until = set(scope.tags or []), scope.since, scope.until
    allowed = np.zeros(max(len(ctx.sources), 1), dtype=bool)
    eligible = 0
    for sid, passage in ctx.passages.items():
        if passes_filter(passage, wanted, since, until):
            allowed[sid] = True
            eligible += 1
    return allowed, eligible


def eligible_names(ctx: Context, mask: np.ndarray) -> set[str]:
    """The names of the sources a source-id mask admits (the vector lane filters by name)."""
    return {ctx.sources[sid] for sid in np.nonzero(mask)[0].tolist() if sid < len(ctx.sources)}
