"""The passages stage: BM25 paragraph search for the canonical query."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.candidates import passage_candidate
from taguru_server.stages.lanes import PASSAGE_HITS
from taguru_server.stages.model import CONTEXT, REQUEST, Candidate, LaneResult, gate
from taguru_server.store import lanes
from taguru_server.store.context import Context


def passage_candidates(ctx: Context, query: str, limit: int) -> tuple[LaneResult[tuple[Candidate, ...]], str | None]:
    """Search hits in search order as passage candidates, the lane's plan entry, and its skip token."""
    found = lanes.passage_search(ctx, query, limit)
    if found.skipped is not None:
        return LaneResult((), False, found.skipped.text), found.skipped.token
    return LaneResult(tuple(passage_candidate(ctx.name, hit) for hit in found.hits), True), None


@attrs.frozen
class Passages:
    """Search the context's paragraphs."""

    name: ClassVar[str] = "passages"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT)
    provides: ClassVar[tuple[Key[Any], ...]] = (PASSAGE_HITS,)

    async def run(self, ctx: StageContext) -> Outcome:
        gate(ctx.remaining())
        request = ctx[REQUEST]
        result, skipped = passage_candidates(ctx[CONTEXT], request.query, request.search_limit)
        if skipped is not None:
            return Outcome.skipped(skipped, {PASSAGE_HITS: result})
        return Outcome.ran({PASSAGE_HITS: result}, detail={"out": len(result.value)})
