"""The resolve stage: each origin's best resolve candidate becomes an anchor."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.lanes import ANCHORS
from taguru_server.stages.model import (
    CONTEXT,
    REQUEST,
    SERVICES,
    EvidenceRequest,
    LaneResult,
    OriginAnchor,
    SemanticTier,
    gate,
)
from taguru_server.store.model.context import CONCEPT, Context
from taguru_server.store.read import resolve, semantic

Remaining = Callable[[], float | None]  # seconds left before the deadline (StageContext.remaining)


def dice_floor(ctx: Context, request: EvidenceRequest) -> float:
    """The Dice floor of lexical resolve: the request's, else the context's, else 0.3; clamped to [0, 1]."""
    floor = request.dice_floor
    if floor is None:
        floor = ctx.meta.dice_floor if ctx.meta.dice_floor is not None else 0.3
    return min(max(floor, 0.0), 1.0)


def _origins(request: EvidenceRequest, remaining: Remaining | None) -> Iterator[str]:
    """The origins to resolve, in order, each after the deadline gate (none with a resolve limit of 0,
    though every gate still runs)."""
    for origin in request.origins:
        if remaining is not None:
            gate(remaining())
        if request.resolve_limit != 0:
            yield origin


def resolve_anchors(ctx: Context, request: EvidenceRequest, remaining: Remaining | None = None) -> tuple[str, ...]:
    """First served lexical candidate of each origin, first-seen order, no repeats."""
    return _unique(resolve_origins(ctx, request, remaining))


def _unique(found: tuple[OriginAnchor, ...]) -> tuple[str, ...]:
    """The anchors of the origins, first-seen order, no repeats."""
    anchors: dict[str, None] = {}
    for one in found:
        if one.name is not None:
            anchors.setdefault(one.name, None)
    return tuple(anchors)


def resolve_origins(
    ctx: Context, request: EvidenceRequest, remaining: Remaining | None = None
) -> tuple[OriginAnchor, ...]:
    """Each resolved origin (request order) with its first served lexical candidate: name, hit kind, score."""
    floor = dice_floor(ctx, request)
    out = []
    for origin in _origins(request, remaining):
        found = resolve.resolve_matches(ctx, CONCEPT, origin, floor, min(request.resolve_limit, 1))
        if found:
            out.append(OriginAnchor(origin, found[0].name, found[0].kind, found[0].score))
        else:
            out.append(OriginAnchor(origin))
    return tuple(out)


async def resolve_origins_semantic(
    ctx: Context, request: EvidenceRequest, tier: SemanticTier, remaining: Remaining | None = None
) -> tuple[OriginAnchor, ...]:
    """Each origin through the whole resolve ladder (lexical, then the semantic tier when it is weak):
    the first served candidate is its anchor (tier `semantic` when it came from there). A failed
    semantic entry ends the call (raised)."""
    floor = dice_floor(ctx, request)
    out = []
    for origin in _origins(request, remaining):
        found = semantic.lexical(ctx, CONCEPT, origin, floor)
        extra = await tier(ctx, origin, found[: request.resolve_limit], found, request.semantic_floor)
        lex, sem = semantic.ladder(found, extra, request.resolve_limit)
        if lex:
            out.append(OriginAnchor(origin, lex[0].name, lex[0].kind, lex[0].score))
        elif sem:
            out.append(OriginAnchor(origin, sem[0][0], "semantic", float(sem[0][1])))
        else:
            out.append(OriginAnchor(origin))
    return tuple(out)


async def resolve_anchors_semantic(
    ctx: Context, request: EvidenceRequest, tier: SemanticTier, remaining: Remaining | None = None
) -> tuple[str, ...]:
    """Each origin's anchor through the whole resolve ladder, first-seen order, no repeats."""
    return _unique(await resolve_origins_semantic(ctx, request, tier, remaining))


@attrs.frozen
class Resolve:
    """Resolve every origin to a canonical concept (its anchor)."""

    name: ClassVar[str] = "resolve"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT, SERVICES)
    provides: ClassVar[tuple[Key[Any], ...]] = (ANCHORS,)

    async def run(self, ctx: StageContext) -> Outcome:
        request = ctx[REQUEST]
        if not request.origins:
            return Outcome.skipped("origins_empty", {ANCHORS: LaneResult((), False, "origins was empty")})
        tier = ctx[SERVICES].semantic_tier
        if tier is None:
            found = resolve_origins(ctx[CONTEXT], request, ctx.remaining)
        else:
            found = await resolve_origins_semantic(ctx[CONTEXT], request, tier, ctx.remaining)
        anchors = _unique(found)
        return Outcome.ran(
            {ANCHORS: LaneResult(anchors, True, detail=found)}, detail={"in": len(request.origins), "out": len(anchors)}
        )
