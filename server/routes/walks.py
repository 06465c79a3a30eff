"""The graph walks: explore, paths and unreachable_from (read role, no heavy-operation permit)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from taguru_server.server.call import Call, Handler, Route
from taguru_server.server.decode import Spec
from taguru_server.server.retrieval_cache import log_search
from taguru_server.server.routes.common import before_start, count_read, count_search
from taguru_server.server.routes.passages import read_window
from taguru_server.server.wire import walks as walk_specs
from taguru_server.server.wire.render import walks as walk_wire
from taguru_server.store.errors import budget_spent
from taguru_server.store.model.context import Context
from taguru_server.store.read.window import window_view


def _searched(call: Call, ctx: Context, op: str, hits: int) -> None:
    """A served walk: its usage and search counts, and its search log line (TAGURU_LOG_SEARCHES)."""
    count_search(call, ctx, op, hits == 0)
    if call.settings.log_searches:
        log_search(call, {"op": op, "context": ctx.name, "hits": hits}, False)


def _walker(spec: Spec, op: str, walk: Callable[[Context, dict[str, Any]], dict[str, Any]]) -> Handler:
    """A search walk's handler: decode, check the budget, walk the context, count the read (empty when
    nothing matched)."""

    async def handler(call: Call) -> Any:
        args = await call.decode(spec)
        before_start(call)
        ctx = call.context()
        result = walk(ctx, args)
        _searched(call, ctx, op, result["total"])
        return result

    return handler


async def explore(call: Call) -> Any:
    args = await call.decode(walk_specs.EXPLORE)
    before_start(call)
    window = read_window(call, args["since"], args["until"])
    ctx = call.context()
    view = None if window is None else window_view(ctx, window)
    result = walk_wire.explore(ctx, args["origins"], args["max_depth"], args["limit"], args["after"], view)
    _searched(call, ctx, "explore", result["total"])
    return result


paths = _walker(
    walk_specs.PATHS,
    "paths",
    lambda ctx, args: walk_wire.paths(ctx, args["origins"], args["targets"], args["max_depth"], args["limit"]),
)


async def unreachable_from(call: Call) -> Any:
    args = await call.decode(walk_specs.UNREACHABLE_FROM)
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
    Route("POST", "/contexts/{name}/explore", explore, "read", request=walk_specs.EXPLORE, response="ExplorePage"),
    Route("POST", "/contexts/{name}/paths", paths, "read", request=walk_specs.PATHS, response="PathsPage"),
    Route(
        "POST",
        "/contexts/{name}/unreachable_from",
        unreachable_from,
        "read",
        request=walk_specs.UNREACHABLE_FROM,
        response="Orphans",
    ),
]
