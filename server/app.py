"""The aiohttp application: routing on the raw path, auth, body cap, deadline, envelopes."""

from __future__ import annotations

import asyncio
import re
import time
import traceback
import uuid
from typing import Any
from urllib.parse import unquote

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from taguru_server.server import communities as cm
from taguru_server.server import evidence as ev
from taguru_server.server import handlers as h
from taguru_server.server import mcp
from taguru_server.server.auth import EXEMPT_PATHS, FailedAuthLimiter, KeyRateLimiter, authenticate
from taguru_server.server.config import Settings
from taguru_server.server.handlers import Call, Handler
from taguru_server.server.providers.reranker import Breaker, HttpReranker, RerankMetrics, RerankSettings
from taguru_server.server.reply import Raw, Reply
from taguru_server.server.schemas import openapi_document
from taguru_server.store.errors import ApiError
from taguru_server.store.registry import Registry
from taguru_server.store.sqlite import SqlitePersistence
from taguru_server.store.wire import dumps_bytes

log = structlog.get_logger("taguru.http")

REGISTRY_KEY: web.AppKey[Registry] = web.AppKey("registry", Registry)
SETTINGS_KEY: web.AppKey[Settings] = web.AppKey("settings", Settings)

Route = tuple[str, tuple[str, ...], Handler, str]  # method, template segments, handler, role

ROUTES: list[tuple[str, str, Handler, str]] = [
    ("GET", "/contexts", h.list_contexts, "read"),
    ("PUT", "/contexts/{name}", h.put_context, "write"),
    ("PATCH", "/contexts/{name}", h.patch_context, "write"),
    ("GET", "/contexts/{name}", h.get_context, "read"),
    ("DELETE", "/contexts/{name}", h.delete_context, "admin"),
    ("POST", "/contexts/{name}/associations", h.post_associations, "write"),
    ("POST", "/contexts/{name}/associations/retract", h.retract_association, "write"),
    ("POST", "/contexts/{name}/aliases", h.post_aliases, "write"),
    ("DELETE", "/contexts/{name}/aliases", h.delete_aliases, "write"),
    ("GET", "/contexts/{name}/aliases", h.list_aliases, "read"),
    ("GET", "/contexts/{name}/labels", h.list_labels, "read"),
    ("POST", "/contexts/{name}/sources", h.post_sources, "write"),
    ("GET", "/contexts/{name}/sources", h.list_sources, "read"),
    ("POST", "/contexts/{name}/sources/lookup", h.lookup_sources, "read"),
    ("POST", "/contexts/{name}/sources/search", h.search_sources, "read"),
    ("POST", "/contexts/{name}/sources/retract", h.retract_source, "write"),
    ("POST", "/contexts/{name}/citations", h.citations, "read"),
    ("POST", "/contexts/{name}/resolve", h._resolve(0), "read"),
    ("POST", "/contexts/{name}/resolve_label", h._resolve(1), "read"),
    ("POST", "/contexts/{name}/describe", h.describe, "read"),
    ("POST", "/contexts/{name}/query", h.query, "read"),
    ("POST", "/contexts/{name}/recall", h.recall, "read"),
    ("POST", "/contexts/{name}/activate", h.activate, "read"),
    ("POST", "/contexts/{name}/evidence", ev.evidence, "read"),
    ("POST", "/contexts/{name}/communities/search", cm.search_communities, "read"),
    ("GET", "/contexts/{name}/communities", cm.stream_communities, "read"),
    ("POST", "/import", h.import_stream, "admin"),
    ("POST", "/mcp", mcp.mcp_endpoint, "read"),
    ("GET", "/protocol", mcp.protocol, "read"),
]


class Router:
    """Matches decoded path segments against templates; `{name}` is one percent-decoded segment."""

    def __init__(self, routes: list[tuple[str, str, Handler, str]]) -> None:
        self.routes: list[tuple[str, str, tuple[str, ...], Handler, str]] = [
            (method, template, tuple(template.strip("/").split("/")), handler, role)
            for method, template, handler, role in routes
        ]

    def match(self, method: str, segments: list[str]) -> tuple[str, str, Handler | None, str | None, bool]:
        """Return (template, role, handler, name, path_matched)."""
        path_matched = None
        for r_method, template, parts, handler, role in self.routes:
            if len(parts) != len(segments):
                continue
            name = None
            ok = True
            for part, seg in zip(parts, segments, strict=False):
                if part == "{name}":
                    name = seg
                elif part != seg:
                    ok = False
                    break
            if not ok:
                continue
            if r_method == method:
                return template, role, handler, name, True
            path_matched = (template, name)
        if path_matched is not None:
            return path_matched[0], "admin", None, path_matched[1], True
        return "<unmatched>", "admin", None, None, False


ROUTER = Router(ROUTES)


def _segments(raw_path: str) -> list[str]:
    path = raw_path.split("?", 1)[0]
    parts = path.strip("/").split("/") if path.strip("/") else []
    if path.endswith("/") and len(path) > 1:
        parts.append("")
    return [unquote(p, errors="strict") for p in parts]


class Metrics:
    """Per-app Prometheus collectors."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "taguru_http_requests", "HTTP requests served", ["method", "route", "status"], registry=self.registry
        )
        self.duration = Histogram(
            "taguru_http_request_duration_seconds",
            "HTTP request duration",
            ["method", "route"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
            registry=self.registry,
        )
        self.stage_duration = Histogram(
            "taguru_evidence_stage_duration_seconds",
            "Evidence stage duration",
            ["stage"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
            registry=self.registry,
        )
        self.stage_outcomes = Counter(
            "taguru_evidence_stage_outcomes",
            "Evidence stage outcomes",
            ["stage", "status", "reason"],
            registry=self.registry,
        )

    def stage_finished(self, stage: str, status: str, reason: str | None, seconds: float) -> None:
        self.stage_duration.labels(stage).observe(seconds)
        self.stage_outcomes.labels(stage, status, reason or "").inc()


_INTEGRAL_LE = re.compile(rb'le="(\d+)\.0"')


def render_metrics(registry: CollectorRegistry) -> bytes:
    """Prometheus text with integral bucket bounds written as the reference writes them (`1`, not `1.0`)."""
    return _INTEGRAL_LE.sub(rb'le="\1"', generate_latest(registry))


METRICS_KEY: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
STATE_KEY: web.AppKey[dict[str, Any]] = web.AppKey("state", dict)
ROUTE_KEY: web.RequestKey[str] = web.RequestKey("route", str)


def _json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=dumps_bytes(body), status=status, content_type="application/json", charset="utf-8", headers=headers
    )


def error_response(err: ApiError, started: float) -> web.Response:
    return _json_response(err.body(time.perf_counter() - started), err.status, err.headers or None)


async def _read_body(request: web.Request, cap: int) -> bytes:
    length = request.content_length
    if length is not None and length > cap:
        raise ApiError("payload_too_large", f"the request body exceeds the {cap}-byte limit (TAGURU_MAX_BODY_BYTES)")
    chunks = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > cap:
            raise ApiError(
                "payload_too_large", f"the request body exceeds the {cap}-byte limit (TAGURU_MAX_BODY_BYTES)"
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def dispatch(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    settings = request.app[SETTINGS_KEY]
    metrics = request.app[METRICS_KEY]
    method = request.method
    status = 500
    request_id = _request_id(request.headers.get("X-Request-Id"))
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=request_id)
    state = request.app[STATE_KEY]
    response: web.StreamResponse
    try:
        ceiling = settings.max_concurrent_requests
        if ceiling and state["inflight"] >= ceiling:
            raise ApiError(
                "overloaded",
                f"server is at its in-flight ceiling ({ceiling} requests) — retry shortly "
                "(TAGURU_MAX_CONCURRENT_REQUESTS tunes this)",
                headers={"Retry-After": "1"},
            )
        state["inflight"] += 1
        try:
            response, template = await _handle(request, settings, started)
        finally:
            state["inflight"] -= 1
        request.setdefault(ROUTE_KEY, template)
    except ApiError as err:
        response = error_response(err, started)
    except Exception as exc:  # a bug: logged by type and frames only (never messages or data)
        frames = [
            f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}:{f.name}" for f in traceback.extract_tb(exc.__traceback__)
        ]
        log.error(
            "request.failed",
            route=request.get(ROUTE_KEY, "<unmatched>"),
            error_type=type(exc).__name__,
            frames=frames[-8:],
        )
        response = error_response(ApiError("internal", "internal error; the server log has details"), started)
    status = response.status
    response.headers["X-Request-Id"] = request_id
    elapsed = time.perf_counter() - started
    route = request.get(ROUTE_KEY, "<unmatched>")
    metrics.requests.labels(method, route, str(status)).inc()
    metrics.duration.labels(method, route).observe(elapsed)
    log.info("request.finished", method=method, route=route, status=status, duration_ms=round(elapsed * 1000, 3))
    structlog.contextvars.clear_contextvars()
    return response


def _request_id(given: str | None) -> str:
    if given and len(given) <= 64 and all(c.isalnum() or c in "-_." for c in given):
        return given
    return uuid.uuid4().hex


async def _handle(request: web.Request, settings: Settings, started: float) -> tuple[web.StreamResponse, str]:
    method = request.method
    raw_path = request.raw_path.split("?", 1)[0]
    if raw_path == "/health" and method == "GET":
        return _json_response({"status": "ok", "version": h.VERSION}), "/health"
    if raw_path == "/live" and method == "GET":
        return web.Response(text="ok"), "/live"
    if raw_path == "/version" and method == "GET":
        return _json_response(h.version_body()), "/version"
    if raw_path == "/openapi.json" and method == "GET":
        return _json_response(openapi_document(ROUTES, h.VERSION)), "/openapi.json"
    if raw_path == "/metrics" and method == "GET":
        body = render_metrics(request.app[METRICS_KEY].registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST}), "/metrics"
    uri = request.raw_path
    if raw_path in EXEMPT_PATHS:
        # the probes are GET-only (and exempt from auth): any other method is a 405, never a 500
        request[ROUTE_KEY] = raw_path
        raise ApiError("method_not_allowed", f"{method} is not supported on {uri}; GET /protocol lists the API")
    limiter = request.app[STATE_KEY]["auth_limiter"]
    address = request.remote or "-"
    try:
        principal = authenticate(settings, request.headers.getall("Authorization", []))
    except ApiError as err:
        if err.code == "unauthorized":
            limiter.check(address)
            limiter.failed(address)
        raise
    request.app[STATE_KEY]["key_limiter"].admit(principal.key)
    try:
        segments = _segments(raw_path)
    except UnicodeDecodeError:
        raise ApiError("unknown_path", f"no route for {method} {uri}; GET /protocol lists the API") from None
    template, role, handler, name, path_matched = ROUTER.match(method, segments)
    request[ROUTE_KEY] = template
    structlog.contextvars.bind_contextvars(route=template)
    assert principal is not None
    principal.require_role(method, template, role)
    if handler is None:
        if path_matched:
            raise ApiError("method_not_allowed", f"{method} is not supported on {uri}; GET /protocol lists the API")
        raise ApiError("unknown_path", f"no route for {method} {uri}; GET /protocol lists the API")
    if name is not None:
        principal.require_grant(name)
    body = await _read_body(request, settings.max_body_bytes)
    timeout = settings.request_timeout_secs
    call = Call(
        method=method,
        path=raw_path,
        name=name,
        query=h.parse_query_string(request.query_string),
        headers=request.headers,
        body=body,
        registry=request.app[REGISTRY_KEY],
        settings=settings,
        principal=principal,
        deadline=time.monotonic() + timeout,
        app_state=request.app[STATE_KEY],
    )
    try:
        result = await asyncio.wait_for(handler(call), timeout)
    except TimeoutError:
        raise ApiError(
            "timeout",
            f"request exceeded the {timeout}s budget; narrow the query (TAGURU_REQUEST_TIMEOUT_SECS tunes this)",
        ) from None
    if isinstance(result, Raw):
        raw = web.Response(body=result.body, status=result.status)
        if result.content_type:
            raw.content_type = result.content_type
        return raw, template
    headers = None
    if isinstance(result, Reply):
        headers, result = result.headers, result.result
    envelope = {"result": result, "status": "ok", "time": time.perf_counter() - started}
    return _json_response(envelope, headers=headers), template


def build_app(
    settings: Settings,
    registry: Registry | None = None,
    rerank: RerankSettings | None = None,
    clock: Any = time.monotonic,
) -> web.Application:
    """An application over the settings' data dir (or a given registry), with an optional reranker."""
    app = web.Application(client_max_size=max(settings.max_body_bytes, 1024) + 1024 * 1024)
    app[SETTINGS_KEY] = settings
    metrics = Metrics()
    app[METRICS_KEY] = metrics
    rerank_metrics = RerankMetrics(metrics.registry, configured=rerank is not None)
    state: dict[str, Any] = {
        "metrics": metrics,
        "observe_rerank": rerank_metrics.observe,
        "inflight": 0,
        "auth_limiter": FailedAuthLimiter(settings.auth_fail_limit_per_min, clock),
        "key_limiter": KeyRateLimiter(settings.rate_limit_per_min, clock),
    }
    app[STATE_KEY] = state

    async def reranker_ctx(app: web.Application) -> Any:
        if rerank is None:
            yield
            return
        session = aiohttp.ClientSession()
        state["reranker"] = HttpReranker(rerank, session, Breaker(clock, rerank_metrics))
        yield
        await session.close()

    app.cleanup_ctx.append(reranker_ctx)

    async def store_ctx(app: web.Application) -> Any:
        reg = registry or Registry(SqlitePersistence(settings.data_dir))
        app[REGISTRY_KEY] = reg
        yield
        if registry is None:
            reg.close()

    app.cleanup_ctx.append(store_ctx)
    app.router.add_route("*", "/{tail:.*}", dispatch)
    return app
