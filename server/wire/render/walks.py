"""The wire results of the graph walks (explore, paths, unreachable_from), rendered from the store's typed pages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taguru_server.stages.render import association_out, windowed_association_out
from taguru_server.store.model.context import Context
from taguru_server.store.read.walks import PATHS_BUDGET, explored, trails, unreached
from taguru_server.store.read.window import WindowView


def explore(
    ctx: Context,
    origins: list[str],
    max_depth: int,
    limit: int,
    after: dict[str, Any] | None,
    view: WindowView | None = None,
) -> dict[str, Any]:
    """Explore's wire page: {total, matches: [{distance, path, association}]}; with a window's view, the
    walk over the edges alive in it, each rendered on its windowed view."""
    if view is None:
        found = explored(ctx, origins, max_depth, limit, after)
        concepts = ctx.concepts
        matches = [
            {"distance": m.distance, "path": [concepts[c] for c in m.path], "association": association_out(ctx, m.edge)}
            for m in found.matches
        ]
        return {"total": found.total, "matches": matches}
    found = explored(ctx, origins, max_depth, limit, after, view.walk_graph())
    return {
        "total": found.total,
        "matches": [
            {
                "distance": m.distance,
                "path": [ctx.concepts[c] for c in m.path],
                "association": windowed_association_out(ctx, m.edge, view),
            }
            for m in found.matches
        ],
    }


def paths(
    ctx: Context, origins: list[str], targets: list[str], max_depth: int, limit: int, budget: int = PATHS_BUDGET
) -> dict[str, Any]:
    """Paths' wire result: {total, capped, matches: [{distance, path, strength, associations}]}."""
    found = trails(ctx, origins, targets, max_depth, limit, budget)
    concepts = ctx.concepts
    matches = [
        {
            "distance": m.distance,
            "path": [concepts[c] for c in m.path],
            "strength": m.strength,
            "associations": [association_out(ctx, e) for e in m.edges],
        }
        for m in found.matches
    ]
    return {"total": found.total, "capped": found.capped, "matches": matches}


def unreachable_from(
    ctx: Context, origins: list[str], limit: int, after: dict[str, Any] | None, check: Callable[[], None]
) -> dict[str, Any]:
    """unreachable_from's wire page: {total, matches: [association]}."""
    found = unreached(ctx, origins, limit, after, check)
    return {"total": found.total, "matches": [association_out(ctx, e) for e in found.edges]}
