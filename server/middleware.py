"""The request pipeline as aiohttp middlewares, outermost first, one job each."""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from taguru_server.server import compat
from taguru_server.server.auth import Principal, authenticate
from taguru_server.server.call import track_writes
from taguru_server.server.errors import at_ceiling, error_response
from taguru_server.server.logging import start_request_notes
from taguru_server.server.metrics import error_kind, start_error_note
from taguru_server.server.oauth.gate import MCP_PATH, OAuth
from taguru_server.server.oauth.routes import OAUTH_ROUTE_KEY, oauth_route
from taguru_server.server.routes.common import permit
from taguru_server.server.routing import (
    MATCH_KEY,
    PROBES,
    ROUTER,
    UNMATCHED,
    allow_header,
    authorize,
    routed_method,
)
from taguru_server.server.state import (
    AUTH_LIMITER_KEY,
    BODY_KEY,
    DEADLINE_KEY,
    INFLIGHT_KEY,
    KEY_LIMITER_KEY,
    KEYS_KEY,
    METRICS_KEY,
    OAUTH_KEY,
    PRINCIPAL_KEY,
    ROUTE_KEY,
    SETTINGS_KEY,
    STARTED_KEY,
    TRACE_IDS_KEY,
    AppState,
)
from taguru_server.store.errors import ApiError, Code, timed_out

if TYPE_CHECKING:
    from taguru_server.server.otel import Tracing

log = structlog.get_logger("taguru.http")

NextHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _request_id(given: str | None) -> str:
    if given and len(given) <= 64 and all(c.isalnum() or c in "-_." for c in given):
        return given
    return uuid.uuid4().hex


@web.middleware
async def request_id(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Echo a well-formed X-Request-Id (else make one) and bind it to every log line of the request.

    With tracing on, the lines also carry the SERVER span's `trace_id` and `span_id` (the span is
    started by the tracing middleware, installed before this one).
    """
    request[STARTED_KEY] = time.perf_counter()
    rid = _request_id(request.headers.get("X-Request-Id"))
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=rid, **request.get(TRACE_IDS_KEY, {}))
    try:
        response = await handler(request)
        response.headers["X-Request-Id"] = rid
        return response
    finally:
        structlog.contextvars.clear_contextvars()


@web.middleware
async def metrics(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Count the request and time it under its route template, and log its end (one INFO line per request).

    A response that carries `Server-Timing` (evidence: one entry per stage) gains `total`, the time
    since the request arrived.
    """
    notes = start_request_notes()
    failure = start_error_note()
    response = await handler(request)
    metrics = request.app[METRICS_KEY]
    method, status = request.method, response.status
    elapsed = time.perf_counter() - request[STARTED_KEY]
    route = request.get(ROUTE_KEY, UNMATCHED)
    metrics.requests.labels(method, route, str(status)).inc()
    metrics.duration.labels(method, route).observe(elapsed)
    kind = error_kind(status, failure)
    if kind is not None:
        metrics.failed(kind)
    timing = response.headers.get("Server-Timing")
    if timing and not response.prepared:
        response.headers["Server-Timing"] = f"{timing}, total;dur={elapsed * 1000:.3f}"
    log.info(
        "request.finished", method=method, route=route, status=status, duration_ms=round(elapsed * 1000, 3), **notes
    )
    return response


@web.middleware
async def errors(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Refusals become the error envelope; anything else is a 500 logged by type and frames only."""
    try:
        return await handler(request)
    except ApiError as err:
        return error_response(err, request[STARTED_KEY])
    except web.HTTPException:
        raise
    except Exception as exc:  # a bug: logged by type and frames only (never messages or data)
        frames = [
            f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}:{f.name}" for f in traceback.extract_tb(exc.__traceback__)
        ]
        log.error(
            "request.failed",
            route=request.get(ROUTE_KEY, UNMATCHED),
            error_type=type(exc).__name__,
            frames=frames[-8:],
        )
        return error_response(
            ApiError(Code.INTERNAL, "internal error; the server log has details"), request[STARTED_KEY]
        )


def _refuse_overload(request: web.Request, ceiling: int) -> ApiError:
    """503 `overloaded`: the in-flight ceiling is reached (counted in `taguru_requests_shed_total`)."""
    request.app[METRICS_KEY].shed.inc()
    return at_ceiling("in-flight", f"{ceiling} requests", "TAGURU_MAX_CONCURRENT_REQUESTS")


async def _holding_slot(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Run the handler holding one in-flight slot, refusing with 503 when none is free."""
    ceiling = request.app[SETTINGS_KEY].max_concurrent_requests
    running = request.app[INFLIGHT_KEY]
    if ceiling and running.count >= ceiling:
        raise _refuse_overload(request, ceiling)
    running.count += 1
    try:
        return await handler(request)
    finally:
        running.count -= 1


@web.middleware
async def inflight(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Past TAGURU_MAX_CONCURRENT_REQUESTS requests in flight, answer 503 (probes are answered before this).

    A request with a body takes its slot only once the whole body is in (see `body_cap`), so
    clients that send their bodies slowly cannot hold the slots that complete requests need.
    """
    if request.body_exists:
        ceiling = request.app[SETTINGS_KEY].max_concurrent_requests
        if ceiling and request.app[INFLIGHT_KEY].count >= ceiling:
            raise _refuse_overload(request, ceiling)
        return await handler(request)
    return await _holding_slot(request, handler)


@web.middleware
async def probes(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Answer the GET-only probes (and HEAD, as GET without the body) before the in-flight ceiling and
    auth; any other method on them is a 405."""
    path = request.raw_path.split("?", 1)[0]
    probe = PROBES.get(path)
    if probe is None:
        return await handler(request)
    request[ROUTE_KEY] = path
    if routed_method(request.method) != "GET":
        raise ApiError(
            Code.METHOD_NOT_ALLOWED,
            f"{request.method} is not supported on {request.raw_path}; GET /protocol lists the API",
            headers=allow_header(("GET",)),
        )
    return await probe(request)


async def _oauth_exempt(request: web.Request, handler: NextHandler, method: str, uri: str) -> web.StreamResponse | None:
    """While OAuth is mounted, its six exact paths are answered without a token (billed to the caller's address)."""
    try:
        route = oauth_route(method, uri)
    except ApiError:
        request[ROUTE_KEY] = uri.split("?", 1)[0]
        raise
    if route is None:
        return None
    request[ROUTE_KEY] = route.template
    structlog.contextvars.bind_contextvars(route=route.template)
    request.app[KEY_LIMITER_KEY].admit(f"peer:{request.remote or '-'}")
    request[OAUTH_ROUTE_KEY] = route
    return await handler(request)


async def _authenticated(request: web.Request, oauth: OAuth | None) -> Principal:
    """The caller's principal: a configured key, or on `POST /mcp` with OAuth mounted an access token's delegation.

    The armed key table is read once: the key, a delegation's key and the grant are all judged against it."""
    keys = request.app[KEYS_KEY].current
    headers = request.headers.getall("Authorization", [])
    if oauth is None:
        return authenticate(keys, headers)
    if request.raw_path.split("?", 1)[0] != MCP_PATH:
        return authenticate(keys, headers, None, oauth.challenge)
    try:
        return authenticate(keys, headers, None, oauth.challenge)
    except ApiError as err:
        if err.code is not Code.UNAUTHORIZED or len(headers) != 1:
            raise
    await oauth.refreshed()
    return authenticate(keys, headers, lambda token: oauth.delegated(token, keys), oauth.challenge)


@web.middleware
async def auth(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Authenticate (failed attempts and per-key requests are rate limited), then check role and grant for the route.

    With OAuth mounted (TAGURU_PUBLIC_URL) its routes need no token, an access token opens `POST /mcp`
    as its delegating key, and every 401 names the protected resource's metadata.
    """
    app = request.app
    method, uri = routed_method(request.method), request.raw_path  # HEAD: routed, checked and run as GET
    oauth = app.get(OAUTH_KEY)
    if oauth is not None:
        exempt_answer = await _oauth_exempt(request, handler, method, uri)
        if exempt_answer is not None:
            return exempt_answer
    if uri.startswith(compat.EXEMPT_PREFIXES):  # the reference serves these without a token
        exempt = compat.unsupported(method, uri)
        if exempt is not None and exempt[1] == "exempt":
            request[ROUTE_KEY] = exempt[0]
            raise ApiError(Code.UNKNOWN_PATH, compat.unsupported_text(method, exempt[0]))
    try:
        principal = await _authenticated(request, oauth)
    except ApiError as err:
        if err.code is Code.UNAUTHORIZED:
            address = request.remote or "-"
            app[AUTH_LIMITER_KEY].check(address)
            app[AUTH_LIMITER_KEY].failed(address)
        raise
    app[KEY_LIMITER_KEY].admit(principal.budget_key)
    if principal.key is not None and "@" in principal.key:  # an OAuth delegation: the log names `key@client`
        structlog.contextvars.bind_contextvars(key=principal.key)
    match = ROUTER.resolve(method, uri)
    request[ROUTE_KEY] = match.template
    structlog.contextvars.bind_contextvars(route=match.template)
    authorize(principal, method, match, uri)
    request[PRINCIPAL_KEY] = principal
    request[MATCH_KEY] = match
    return await handler(request)


def _remaining(request: web.Request) -> float:
    """Seconds left of the request's TAGURU_REQUEST_TIMEOUT_SECS budget, counted from its arrival."""
    timeout = request.app[SETTINGS_KEY].request_timeout_secs
    return timeout - (time.perf_counter() - request[STARTED_KEY])


def _timed_out(request: web.Request) -> ApiError:
    return timed_out(request.app[SETTINGS_KEY].request_timeout_secs)


BODY_GRACE_SECS = 5.0
"""The minimum transfer rate applies from this long after the body's first awaited byte."""


def _too_slow(rate: int) -> ApiError:
    return ApiError(
        Code.TIMEOUT,
        f"the request body arrived slower than {rate} bytes/s; the connection is closed "
        "(TAGURU_MIN_BODY_RATE tunes this)",
    )


async def _read_body(request: web.Request, cap: int, too_large: str, rate: int) -> bytes:
    """The whole body, within the request's deadline and, after a grace period, at `rate` bytes/s or faster.

    One timer per chunk, for whichever bound comes first (a `wait_for` nested in another can lose
    the outer cancellation when a byte arrives just as it fires).
    """
    chunks: list[bytes] = []
    size = 0
    started = time.monotonic()
    deadline = started + _remaining(request)
    while True:
        # the next byte is due when the average rate would otherwise fall below `rate`
        rate_due = started + max(BODY_GRACE_SECS, (size + 1) / rate) if rate > 0 else float("inf")
        due = min(rate_due, deadline)
        try:
            chunk = await asyncio.wait_for(request.content.readany(), max(due - time.monotonic(), 0.001))
        except TimeoutError:
            raise (_timed_out(request) if due == deadline else _too_slow(rate)) from None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > cap:
            raise ApiError(Code.PAYLOAD_TOO_LARGE, too_large)
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise _timed_out(request)


@web.middleware
async def body_cap(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Read the whole body within the request's deadline, refusing it past TAGURU_MAX_BODY_BYTES; then take a slot."""
    cap = request.app[SETTINGS_KEY].max_body_bytes
    too_large = f"the request body exceeds the {cap}-byte limit (TAGURU_MAX_BODY_BYTES)"
    length = request.content_length
    if length is not None and length > cap:
        raise ApiError(Code.PAYLOAD_TOO_LARGE, too_large)
    if not request.body_exists:
        request[BODY_KEY] = b""
        return await handler(request)
    request[BODY_KEY] = await _read_body(request, cap, too_large, request.app[SETTINGS_KEY].min_body_rate)
    return await _holding_slot(request, handler)


@web.middleware
async def deadline(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """Give the handler what is left of TAGURU_REQUEST_TIMEOUT_SECS (the body read counts), else answer 408."""
    remaining = _remaining(request)
    request[DEADLINE_KEY] = time.monotonic() + remaining
    if remaining <= 0:
        raise _timed_out(request)
    writes = track_writes()
    try:
        response = await asyncio.wait_for(handler(request), remaining)
    except TimeoutError:
        raise _timed_out(request) from None
    # work that never yielded finished past the budget: refused, unless it wrote (writes check the
    # deadline before they commit, and a durable write is never answered as refused)
    if time.monotonic() > request[DEADLINE_KEY] and not writes:
        raise _timed_out(request)
    return response


@web.middleware
async def heavy_before_body(request: web.Request, handler: NextHandler) -> web.StreamResponse:
    """The routes that hold a heavy-operation permit from before their body is read (`Route.heavy_before_body`)."""
    match = request.get(MATCH_KEY)
    if match is None or match.route is None or not match.route.heavy_before_body:
        return await handler(request)
    with permit(AppState(request.app)):
        return await handler(request)


MIDDLEWARES = (request_id, metrics, errors, probes, inflight, auth, heavy_before_body, body_cap, deadline)


def server_span(tracing: Tracing) -> Middleware:
    """Installed first when tracing (server/tracing.py): the SERVER span `<METHOD> <route template>`
    around the whole request, parented by the caller's trace context."""

    @web.middleware
    async def traced(request: web.Request, handler: NextHandler) -> web.StreamResponse:
        method = request.method
        with tracing.server_span(method, request.headers) as span:
            request[TRACE_IDS_KEY] = tracing.log_ids(span)
            status = 500
            try:
                with tracing.lanes():
                    response = await handler(request)
                status = response.status
                return response
            except web.HTTPException as exc:
                status = exc.status
                raise
            finally:
                route = request.get(ROUTE_KEY)
                tracing.finish_server_span(span, method, None if route == UNMATCHED else route, status)

    return traced
