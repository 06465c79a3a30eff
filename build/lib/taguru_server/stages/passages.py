"""The passages stage: BM25 paragraph search for the canonical query."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.candidates import passage_candidate
from taguru_server.stages.model import CONTEXT, PASSAGE_HITS, REQUEST, Candidate, LaneResult, gate
from taguru_server.store import lanes
from taguru_server.store.context import Context

ZERO_LIMIT = "the requested limit is 0"
NO_TERMS = "the query yields no searchable terms"


def passage_candidates(ctx: Context, query: str, limit: int) -> LaneResult[tuple[Candidate, ...]]:
    """Search hits in search order as passage candidates, with the lane's plan entry."""
    if limit == 0:
        return LaneResult((), False, ZERO_LIMIT)
    found = lanes.search_passages(ctx, query, limit)
    bm25 = found["plan"]["contexts"][0]["lanes"]["bm25"]
    if not bm25["ran"]:
        return LaneResult((), False, NO_TERMS)
    hits = tuple(passage_candidate(ctx.name, hit, i + 1) for i, hit in enumerate(found["hits"]))
    return LaneResult(hits, True)


@attrs.frozen
class Passages:
    """Search the context's paragraphs."""

    name: ClassVar[str] = "passages"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT)
    provides: ClassVar[tuple[Key[Any], ...]] = (PASSAGE_HITS,)

    async def run(self, ctx: StageContext) -> Outcome:
        gate(ctx.remaining())
        request = ctx[REQUEST]
        result = passage_candidates(ctx[CONTEXT], request.query, request.search_limit)
        if not result.ran:
            token = "zero_limit" if result.reason == ZERO_LIMIT else "no_query_terms"
            return Outcome.skipped(token, {PASSAGE_HITS: result})
        return Outcome.ran({PASSAGE_HITS: result}, detail={"out": len(result.value)})
