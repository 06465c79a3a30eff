"""The resolve stage: each origin's best resolve candidate becomes an anchor."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.lanes import ANCHORS
from taguru_server.stages.model import CONTEXT, REQUEST, EvidenceRequest, LaneResult, gate
from taguru_server.store import lanes
from taguru_server.store.context import CONCEPT, Context


def resolve_anchors(ctx: Context, request: EvidenceRequest, remaining: Any = None) -> tuple[str, ...]:
    """First served candidate of each origin, first-seen order, no repeats."""
    floor = request.dice_floor
    if floor is None:
        floor = ctx.meta.dice_floor if ctx.meta.dice_floor is not None else 0.3
    floor = min(max(floor, 0.0), 1.0)
    anchors: dict[str, None] = {}
    for origin in request.origins:
        if remaining is not None:
            gate(remaining())
        if request.resolve_limit == 0:
            continue
        found = lanes.resolve_matches(ctx, CONCEPT, origin, floor, min(request.resolve_limit, 1))
        if found:
            anchors.setdefault(found[0].name, None)
    return tuple(anchors)


@attrs.frozen
class Resolve:
    """Resolve every origin to a canonical concept (its anchor)."""

    name: ClassVar[str] = "resolve"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT)
    provides: ClassVar[tuple[Key[Any], ...]] = (ANCHORS,)

    async def run(self, ctx: StageContext) -> Outcome:
        request = ctx[REQUEST]
        if not request.origins:
            return Outcome.skipped("origins_empty", {ANCHORS: LaneResult((), False, "origins was empty")})
        anchors = resolve_anchors(ctx[CONTEXT], request, ctx.remaining)
        return Outcome.ran(
            {ANCHORS: LaneResult(anchors, True)}, detail={"in": len(request.origins), "out": len(anchors)}
        )
