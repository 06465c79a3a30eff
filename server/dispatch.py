"""Running a routed call: the HTTP endpoint behind the middlewares, and the in-process calls MCP tools make."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from multidict import CIMultiDict

from taguru_server.server.auth import Principal
from taguru_server.server.call import Call, Route, parse_query_string
from taguru_server.server.errors import error_body, status_of
from taguru_server.server.mcp.tools import Request
from taguru_server.server.metrics import note_error
from taguru_server.server.oauth.routes import OAUTH_ROUTE_KEY
from taguru_server.server.reply import Raw, Reply, ok_body, render
from taguru_server.server.routing import MATCH_KEY, ROUTER, authorize, routed_method
from taguru_server.server.state import (
    BODY_KEY,
    DEADLINE_KEY,
    PRELOAD_KEY,
    PRINCIPAL_KEY,
    REGISTRY_KEY,
    SETTINGS_KEY,
    STARTED_KEY,
    AppState,
    Dispatch,
)
from taguru_server.server.store_health import write_refused
from taguru_server.store.errors import ApiError, Code, StorageFailed
from taguru_server.store.wire import dumps_bytes


async def endpoint(request: web.Request) -> web.StreamResponse:
    """The matched route's handler on the request the middlewares admitted, read and timed."""
    oauth_route = request.get(OAUTH_ROUTE_KEY)
    if oauth_route is not None:  # an OAuth route (server/oauth/routes.py) answers the request itself
        return await oauth_route.handler(request)
    match = request[MATCH_KEY]
    assert match.route is not None
    app = request.app
    preload = app.get(PRELOAD_KEY)
    if preload is not None:  # contexts are loaded off the request path; a call waits for that (within its deadline)
        await preload.before_call(match.name)
    call = Call(
        method=routed_method(request.method),
        path=request.raw_path.split("?", 1)[0],
        name=match.name,
        query=parse_query_string(request.query_string),
        headers=request.headers,
        body=request[BODY_KEY],
        registry=app[REGISTRY_KEY],
        settings=app[SETTINGS_KEY],
        principal=request[PRINCIPAL_KEY],
        deadline=request[DEADLINE_KEY],
        app_state=AppState(app),
    )
    return render(await run_routed(call, match.route), request[STARTED_KEY])


async def run_routed(call: Call, route: Route) -> Any:
    """Run a handler on a store that other worker processes may write to.

    A read first applies what other processes committed (so it sees every write acknowledged
    before it started); a write runs in a write section (the store's lock, caught up). With one
    process both are no-ops.
    """
    registry = call.registry
    role, handler = route.role, route.handler
    try:
        if role == "read" or route.own_write_section:
            # a write that waits on something slow (an embedding provider) takes the section itself,
            # only around its commit, so other processes' writes do not wait for it
            await registry.before_read()
            if role == "read":
                await registry.settled(call.name)  # a commit in flight on the writer thread: read what it made durable
            return await handler(call)
        async with registry.write_section(call.deadline):
            result = await handler(call)
        await call.settle_commits()  # outside the section: the next write is prepared while this one syncs
        return result
    except StorageFailed as exc:
        if role != "read":
            write_refused(exc)
            note_error("wal_refused")
        raise ApiError(Code.UNHEALTHY, f"the store could not be read: {exc.args[-1]}") from None


async def streamed_body(response: web.StreamResponse, limit: int | None) -> bytes:
    """The body a handler's own response would send: a plain response's bytes, or what a streamed
    one renders (`collect`), read up to a little past `limit` bytes."""
    collect = getattr(response, "collect", None)
    if collect is not None:
        body: bytes = await collect(limit)
        return body
    if isinstance(response, web.Response) and isinstance(response.body, bytes):
        return response.body
    raise ApiError(Code.INTERNAL, "this route's streamed answer cannot be read in process")


def in_process(app: web.Application) -> Dispatch:
    """Calls through the same router, role and grant checks and envelopes as HTTP, without a request."""

    async def dispatch(
        principal: Principal, deadline: float, routed: Request, limit: int | None = None
    ) -> tuple[int, bytes]:
        started = time.perf_counter()
        method, path, body = routed.method, routed.path, routed.body
        try:
            match = ROUTER.resolve(method, path)
            route = authorize(principal, method, match, path)
            content_type = routed.content_type or "application/json"
            call = Call(
                method=method,
                path=path,
                name=match.name,
                query=parse_query_string(urlencode(routed.query)),
                headers=CIMultiDict({"Content-Type": content_type}) if body is not None else CIMultiDict(),
                body=body or b"",
                registry=app[REGISTRY_KEY],
                settings=app[SETTINGS_KEY],
                principal=principal,
                deadline=deadline,
                app_state=AppState(app),
            )
            result = await run_routed(call, route)
            if isinstance(result, Raw):  # a body that is not enveloped (a group's export line, the manual)
                return result.status, result.body
            if isinstance(result, web.StreamResponse):  # a streamed body (a context's export), read in full
                return result.status, await streamed_body(result, limit)
            extra = None
            if isinstance(result, Reply):
                result, extra = result.result, result.extra
            return 200, dumps_bytes(ok_body(result, time.perf_counter() - started, extra))
        except ApiError as err:
            return status_of(err), dumps_bytes(error_body(err, time.perf_counter() - started))

    return dispatch
