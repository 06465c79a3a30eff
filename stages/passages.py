"""The passages stage: BM25 paragraph search for the canonical query."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.candidates import passage_candidate
from taguru_server.stages.lanes import PASSAGE_HITS
from taguru_server.stages.model import CONTEXT, REQUEST, SERVICES, Candidate, LaneResult, gate
from taguru_server.store.model.context import Context
from taguru_server.store.read import passages
from taguru_server.store.read.vector_lane import VectorQuery
from taguru_server.store.text import query_terms


def passage_candidates(
    ctx: Context, query: str, limit: int, vector: VectorQuery | None = None
) -> tuple[LaneResult[tuple[Candidate, ...]], str | None]:
    """Search hits in search order as passage candidates, the lane's plan entry, and its skip token.

    The plan entry is only "ran" or a skip: a degraded vector lane is invisible here (its hits are
    then BM25's), as in the reference."""
    found, _state, hits = passages.searched(ctx, query, limit, vector=vector)
    if found.skipped is not None:
        return LaneResult((), False, found.skipped.text), found.skipped.token
    return LaneResult(tuple(passage_candidate(ctx.name, hit, i) for i, hit in enumerate(hits, 1)), True), None


@attrs.frozen
class Passages:
    """Search the context's paragraphs."""

    name: ClassVar[str] = "passages"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT, SERVICES)
    provides: ClassVar[tuple[Key[Any], ...]] = (PASSAGE_HITS,)

    async def run(self, ctx: StageContext) -> Outcome:
        gate(ctx.remaining())
        request = ctx[REQUEST]
        embed = ctx[SERVICES].vector_query
        vq = None
        if embed is not None and request.search_limit > 0 and query_terms(request.query):  # else no provider call
            vq = await embed(ctx[CONTEXT], request.query, request.semantic_floor)
        result, skipped = passage_candidates(ctx[CONTEXT], request.query, request.search_limit, vq)
        if skipped is not None:
            return Outcome.skipped(skipped, {PASSAGE_HITS: result})
        return Outcome.ran({PASSAGE_HITS: result}, detail={"out": len(result.value)})
