"""The graph-passages stage: paragraphs ranked by personalized PageRank from the anchors (the mode's lane)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.candidates import graph_passage_candidate
from taguru_server.stages.lanes import ANCHORS, GRAPH_PASSAGE_HITS
from taguru_server.stages.model import (
    CONTEXT,
    NO_ANCHORS,
    REQUEST,
    SERVICES,
    Candidate,
    EvidenceRequest,
    LaneResult,
    gate,
)
from taguru_server.store.model.context import Context
from taguru_server.store.read.passage_graph import graph_passages, passage_graph, passage_graph_built

GRAPH_LANE_CEILING = 30  # paragraphs the lane offers at most (docs/evidence.md, "Graph passages")


def graph_lane_limit(request: EvidenceRequest) -> int:
    """How many paragraphs the lane offers: as many as the budget could admit, at most GRAPH_LANE_CEILING."""
    return min(request.max_items, GRAPH_LANE_CEILING)


def graph_passage_candidates(
    ctx: Context, request: EvidenceRequest, anchors: tuple[str, ...], limit: int
) -> tuple[Candidate, ...]:
    """The lane's paragraphs in its order as `passage_graph` passage candidates."""
    hits = graph_passages(ctx, anchors, limit, request.query, request.origins)
    return tuple(graph_passage_candidate(ctx.name, hit) for hit in hits)


@attrs.frozen
class GraphPassages:
    """Rank the context's paragraphs by a walk over the concept–paragraph graph from the anchors."""

    name: ClassVar[str] = "graph_passages"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT, SERVICES, ANCHORS)
    provides: ClassVar[tuple[Key[Any], ...]] = (GRAPH_PASSAGE_HITS,)

    async def run(self, ctx: StageContext) -> Outcome:
        anchors = ctx[ANCHORS].value
        if not anchors:
            return Outcome.skipped("no_anchors", {GRAPH_PASSAGE_HITS: LaneResult((), False, NO_ANCHORS)})
        request = ctx[REQUEST]
        limit = graph_lane_limit(request)
        if limit == 0:
            return Outcome.skipped("zero_limit", {GRAPH_PASSAGE_HITS: LaneResult((), False, "max_items was 0")})
        gate(ctx.remaining())
        context, build_apart = ctx[CONTEXT], ctx[SERVICES].build_apart
        if build_apart is not None and not passage_graph_built(context):
            # the first walk after a write builds the graph's arrays (seconds at 100k paragraphs): not on
            # the event loop
            await build_apart(lambda: passage_graph(context))
            gate(ctx.remaining())
        hits = graph_passage_candidates(context, request, anchors, limit)
        return Outcome.ran({GRAPH_PASSAGE_HITS: LaneResult(hits, True)}, detail={"out": len(hits)})
