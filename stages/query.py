"""The query stage: associations of the anchors under the requested labels."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.candidates import association_candidate
from taguru_server.stages.lanes import ANCHORS, QUERY_HITS
from taguru_server.stages.model import CONTEXT, NO_ANCHORS, REQUEST, Candidate, LaneResult, gate
from taguru_server.store.model.context import Context
from taguru_server.store.read import query

QUERY_LIMIT = 100


def query_candidates(ctx: Context, anchors: tuple[str, ...], labels: tuple[str, ...]) -> tuple[Candidate, ...]:
    """The first 100 matches in /query order, as graph_query candidates."""
    ordered = query.ranked_facets(ctx, list(anchors), list(labels), QUERY_LIMIT)
    return tuple(association_candidate(ctx, e, "graph_query", i + 1) for i, e in enumerate(ordered))


@attrs.frozen
class Query:
    """Pin the anchors' facets named by `labels`."""

    name: ClassVar[str] = "query"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT, ANCHORS)
    provides: ClassVar[tuple[Key[Any], ...]] = (QUERY_HITS,)

    async def run(self, ctx: StageContext) -> Outcome:
        anchors = ctx[ANCHORS].value
        if not anchors:
            return Outcome.skipped("no_anchors", {QUERY_HITS: LaneResult((), False, NO_ANCHORS)})
        request = ctx[REQUEST]
        if not request.labels:
            return Outcome.skipped("labels_absent", {QUERY_HITS: LaneResult((), False, "no 'labels' given")})
        gate(ctx.remaining())
        hits = query_candidates(ctx[CONTEXT], anchors, request.labels)
        return Outcome.ran({QUERY_HITS: LaneResult(hits, True)}, detail={"out": len(hits)})
