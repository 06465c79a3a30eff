"""The activate stage: spreading activation from all anchors."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.candidates import association_candidate
from taguru_server.stages.lanes import ACTIVATE_HITS, ANCHORS
from taguru_server.stages.model import CONTEXT, NO_ANCHORS, REQUEST, Candidate, LaneResult, gate
from taguru_server.store.model.context import Context
from taguru_server.store.read import activation


def activate_candidates(ctx: Context, anchors: tuple[str, ...], decay: float, limit: int) -> tuple[Candidate, ...]:
    """Activated edges, strongest first (the /activate lane itself), as graph_activate candidates."""
    found = activation.activation(ctx, list(anchors), decay, limit, total=False)  # evidence shows no total
    return tuple(association_candidate(ctx, m.edge, "graph_activate", i + 1) for i, m in enumerate(found.matches))


@attrs.frozen
class Activate:
    """Spread activation from the anchors and keep the strongest edges."""

    name: ClassVar[str] = "activate"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT, ANCHORS)
    provides: ClassVar[tuple[Key[Any], ...]] = (ACTIVATE_HITS,)

    async def run(self, ctx: StageContext) -> Outcome:
        anchors = ctx[ANCHORS].value
        if not anchors:
            return Outcome.skipped("no_anchors", {ACTIVATE_HITS: LaneResult((), False, NO_ANCHORS)})
        request = ctx[REQUEST]
        gate(ctx.remaining())
        decay = min(max(request.activate_decay, 0.0), 1.0)
        hits = activate_candidates(ctx[CONTEXT], anchors, decay, request.activate_limit)
        return Outcome.ran({ACTIVATE_HITS: LaneResult(hits, True)}, detail={"out": len(hits)})
