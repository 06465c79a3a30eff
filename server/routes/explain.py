"""The explain routes (docs/explain.md): why a name did (or didn't) resolve, why a source did (or didn't)
appear. Every diagnosis is a 200; each counts as a read, never as a search (no resolve-tier or lane metric)."""

from __future__ import annotations

import time
from typing import Any

from taguru_server.server.call import Call, Handler, Route
from taguru_server.server.providers.embedder import Embedder
from taguru_server.server.routes.common import MAX_MATCH_LIMIT, before_start, clamp_limit, count_read, search_vector
from taguru_server.server.routes.passages import source_filter
from taguru_server.server.semantic import (
    DEADLINE_RESERVE_SECS,
    QueryFailed,
    clamp_floor,
    cue_cache,
    query_vector,
    semantic_tier,
)
from taguru_server.server.state import EMBEDDER_KEY
from taguru_server.server.wire.explain import RESOLVE_EXPLAIN, SEARCH_EXPLAIN
from taguru_server.server.wire.render import explain as explain_wire
from taguru_server.server.wire.render import explain_search as search_wire
from taguru_server.store.model.context import Context
from taguru_server.store.read import explain, semantic
from taguru_server.store.read import explain_search as explain_search_lane
from taguru_server.store.read.vector_lane import VectorQuery
from taguru_server.store.text import query_terms


async def _nearest_glosses(
    embedder: Embedder | None, ctx: Context, kind: int, expected: str, deadline: float
) -> tuple[list[tuple[str, float]], str | None]:
    """The gloss neighbours of `expected` (floor 0), or why none could be had (a failure is a note, not an error)."""
    if embedder is None or not semantic.wants_vector(ctx, kind, [], embedder.model):
        return [], None
    try:
        q = await query_vector(embedder, cue_cache(embedder), expected, deadline - DEADLINE_RESERVE_SECS)
    except QueryFailed as exc:
        return [], exc.message
    return semantic.candidates(ctx, kind, q, 0.0), None


async def _gloss_lane(
    embedder: Embedder | None, ctx: Context, kind: int, cue: str, canonical: str, floor: float, deadline: float
) -> explain.GlossLane:
    """The gloss lane's account of (cue, canonical); with no provider, the fixed no-provider reason."""
    reason = explain.gloss_gate(ctx, kind, embedder.model if embedder is not None else None)
    if reason is not None or embedder is None:
        return explain.GlossLane(reason or explain.NO_EMBEDDINGS)
    try:
        q = await query_vector(embedder, cue_cache(embedder), cue, deadline - DEADLINE_RESERVE_SECS)
    except QueryFailed as exc:
        return explain.GlossLane(f"the cue embedding failed: {exc.message}")
    return explain.gloss_lane(ctx, kind, q, canonical, floor)


def _explain_resolve(kind: int) -> Handler:
    async def handler(call: Call) -> Any:
        args = await call.decode(RESOLVE_EXPLAIN)
        before_start(call)
        cue, expected, dice = args["cue"], args["expected"], args["dice_floor"]
        limit = clamp_limit(args["limit"], MAX_MATCH_LIMIT)
        ctx = call.context()
        floor = dice if dice is not None else ctx.meta.dice_floor if ctx.meta.dice_floor is not None else 0.3
        floor = min(max(floor, 0.0), 1.0)
        view = explain.vocabulary(ctx, kind, cue, expected, floor)
        embedder = call.app_state.get(EMBEDDER_KEY)
        if view.membership is None:
            glosses, note = await _nearest_glosses(embedder, ctx, kind, expected, call.deadline)
            count_read(ctx, True)
            return explain_wire.not_in_vocabulary(kind, cue, expected, view, glosses, note)
        floors = (args["semantic_floor"], ctx.meta.semantic_floor, call.settings.semantic_floor)
        found = semantic.lexical(ctx, kind, cue, floor)
        extra = await semantic_tier(embedder, ctx, kind, cue, found[:limit], found, floors, call.deadline)
        lane = await _gloss_lane(embedder, ctx, kind, cue, view.membership.name, clamp_floor(*floors), call.deadline)
        count_read(ctx, False)
        return explain_wire.resolve_explanation(cue, expected, view, found, extra, limit, lane)

    return handler


async def explain_search(call: Call) -> Any:
    args = await call.decode(SEARCH_EXPLAIN)
    before_start(call)
    query, source = args["query"], args["source"]
    limit = clamp_limit(args["limit"], 5)
    scope = source_filter(args)
    ctx = call.context()
    target = search_wire.early_verdict(ctx, query, source, args["paragraph"], scope)
    if not isinstance(target, explain_search_lane.SearchTarget):
        count_read(ctx, True)
        return target
    vector = VectorQuery()
    if query_terms(query):  # the query is embedded as the search would (whatever the limit)
        vector = await search_vector(call, ctx, query, args["semantic_floor"])
    run = explain_search_lane.full_ranking(ctx, query, scope, vector)
    deadline = call.deadline
    result = search_wire.search_explanation(run, source, target, limit, lambda: time.monotonic() > deadline)
    count_read(ctx, False)
    return result


ROUTES: list[Route] = [
    Route(
        "POST",
        "/contexts/{name}/resolve/explain",
        _explain_resolve(0),
        "read",
        request=RESOLVE_EXPLAIN,
        response="ResolveExplanation",
    ),
    Route(
        "POST",
        "/contexts/{name}/resolve_label/explain",
        _explain_resolve(1),
        "read",
        request=RESOLVE_EXPLAIN,
        response="ResolveExplanation",
    ),
    Route(
        "POST",
        "/contexts/{name}/sources/search/explain",
        explain_search,
        "read",
        request=SEARCH_EXPLAIN,
        response="SearchExplanation",
    ),
]
