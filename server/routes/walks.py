"""The graph walks: explore, paths and unreachable_from (read role, no heavy-operation permit)."""

from __future__ import annotations

import time
from typing import Any

from taguru_server.server import walk_bodies
from taguru_server.server.call import Call, Route
from taguru_server.server.routes.common import before_start, count_read
from taguru_server.server.state import METRICS_KEY
from taguru_server.server.wire.render import walks as walk_wire
from taguru_server.store.errors import budget_spent
from taguru_server.store.model.context import Context


def _searched(call: Call, ctx: Context, op: str, empty: bool) -> None:
    """A search read: the context's usage counters and `taguru_searches_total{op}`."""
    count_read(ctx, empty)
    metrics = call.app_state.get(METRICS_KEY)
    if metrics is not None:
        metrics.searched(op, empty)


async def explore(call: Call) -> Any:
    args = await call.decode(walk_bodies.EXPLORE)
    before_start(call)
    ctx = call.context()
    result = walk_wire.explore(ctx, args["origins"], args["max_depth"], args["limit"], args["after"])
    _searched(call, ctx, "explore", result["total"] == 0)
    return result


async def paths(call: Call) -> Any:
    args = await call.decode(walk_bodies.PATHS)
    before_start(call)
    ctx = call.context()
    result = walk_wire.paths(ctx, args["origins"], args["targets"], args["max_depth"], args["limit"])
    _searched(call, ctx, "paths", result["total"] == 0)
    return result


async def unreachable_from(call: Call) -> Any:
    args = await call.decode(walk_bodies.UNREACHABLE_FROM)
    before_start(call)
    ctx = call.context()
    deadline = call.deadline

    def check() -> None:
        if time.monotonic() > deadline:
            raise budget_spent()

    result = walk_wire.unreachable_from(ctx, args["origins"], args["limit"], args["after"], check)
    count_read(ctx, False)  # an audit that finds no orphans succeeded: never an empty read
    return result


ROUTES: list[Route] = [
    Route("POST", "/contexts/{name}/explore", explore, "read"),
    Route("POST", "/contexts/{name}/paths", paths, "read"),
    Route("POST", "/contexts/{name}/unreachable_from", unreachable_from, "read"),
]
