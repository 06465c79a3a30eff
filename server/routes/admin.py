"""The admin and discovery routes: POST /import, GET /protocol, and the probes answered without auth."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from taguru_server.server.call import Call, Probe, Route, not_durable, note_write
from taguru_server.server.errors import HttpError
from taguru_server.server.mcp.protocol import protocol_text
from taguru_server.server.metrics import context_rows, disk_rows, render_metrics
from taguru_server.server.metrics_shared import scrape_registry, shared_violations
from taguru_server.server.offload import decode_body
from taguru_server.server.openapi import openapi_document
from taguru_server.server.quotas import import_quota, quota_rows, sizes_of
from taguru_server.server.reply import Raw, Reply, json_response
from taguru_server.server.schema_gate import schema_counter
from taguru_server.server.state import METRICS_KEY, PRELOAD_KEY, REGISTRY_KEY, SETTINGS_KEY
from taguru_server.server.store_health import probe_for
from taguru_server.server.tenancy import check_group_records, seen_groups
from taguru_server.server.variables import current
from taguru_server.server.version import VERSION, version_body
from taguru_server.server.wire.render.imports import batches_out, groups_out, schemas_out, warned_extra
from taguru_server.store.errors import ApiError, Code
from taguru_server.store.persist.registry import CommitFailed
from taguru_server.store.persist.writer import COMMIT_ANSWER_MARGIN_SECS
from taguru_server.store.transfer.group_import import restore_groups
from taguru_server.store.transfer.importer import ParseError, parse_stream, run_import
from taguru_server.store.transfer.schema_records import install_records


async def import_stream(call: Call) -> Any:
    dry_run = call.query.get("dry_run") == "true"
    try:
        batches = await decode_body(call.body, lambda: parse_stream(call.body))
    except (ParseError, UnicodeDecodeError) as exc:
        raise HttpError(
            Code.MALFORMED_REQUEST, str(exc), status=400, integrity="nothing_written", retryable=True
        ) from None
    except (ArithmeticError, ValueError, RecursionError):
        # a stream the parser could not classify (e.g. a number past the f64 range): still a parse
        # refusal, never a 500; the text names no request content
        raise HttpError(
            Code.MALFORMED_REQUEST,
            "the stream could not be parsed: a line holds a value outside the JSON the "
            "importer accepts (for example a number past the f64 range)",
            status=400,
            integrity="nothing_written",
            retryable=True,
        ) from None
    for batch in batches:
        if not call.principal.may_access(batch.context):
            raise ApiError(
                Code.FORBIDDEN,
                f"key '{call.principal.key}' has no grant on context '{batch.context}' (batch source "
                f"'{batch.source}'); nothing was applied",
                integrity="nothing_written",
            )
    for record in batches.schemas:
        if not call.principal.may_access(record.context):
            raise ApiError(
                Code.FORBIDDEN,
                f"key '{call.principal.key}' has no grant on context '{record.context}' (a schema record); "
                "nothing was applied",
                integrity="nothing_written",
            )
    check_group_records(call, batches.groups)
    metrics = call.app_state.get(METRICS_KEY)
    try:
        # applied in the writer thread, so a large import does not stop the event loop; it ends a little before
        # the request's deadline, so its own refusal (naming the durable prefix) is the answer
        outcomes = await call.registry.apply_off_loop(
            {batch.context for batch in batches},
            lambda: run_import(
                call.registry,
                batches,
                dry_run=dry_run,
                deadline=call.deadline - COMMIT_ANSWER_MARGIN_SECS,
                timeout_secs=call.settings.request_timeout_secs,
                on_commit=lambda _landed: note_write(),
                # several workers: one commit per write section (ids are assigned in memory under its lock)
                commit_every=len(batches) + 1 if call.registry.shared else 512,
                count_schema=None if metrics is None else schema_counter(metrics),
                quota=import_quota(call),
            ),
        )
        result: dict[str, Any] = {"batches": batches_out(outcomes)}
        extra = warned_extra(outcomes)
        if dry_run:
            return _with(result, extra)
        if batches.schemas:
            installed = await call.registry.apply_off_loop(
                {record.context for record in batches.schemas},
                lambda: install_records(
                    call.registry, batches.schemas, len(outcomes), call.deadline - COMMIT_ANSWER_MARGIN_SECS, note_write
                ),
            )
            result["schemas"] = schemas_out(installed)
        if batches.groups:
            seen = seen_groups(call)
            groups = await call.registry.apply_off_loop(
                set(),
                lambda: restore_groups(call.registry, batches.groups, len(outcomes), call.deadline, note_write, seen),
            )
            result["groups"] = groups_out(groups)
    except CommitFailed as exc:
        raise not_durable(exc, "the import could not be made durable; the landed prefix is intact") from None
    return _with(result, extra)


def _with(result: dict[str, Any], extra: dict[str, Any] | None) -> Any:
    return result if extra is None else Reply(result, extra=extra)


async def protocol(call: Call) -> Raw:
    """GET /protocol (read role): the same text `initialize` sends as its instructions."""
    return Raw(200, protocol_text().encode("utf-8"), "text/markdown; charset=utf-8")


IMPORT_ROUTES: list[Route] = [
    Route("POST", "/import", import_stream, "admin", request="jsonl", response="warned:ImportResult")
]
PROTOCOL_ROUTES: list[Route] = [Route("GET", "/protocol", protocol, "read", response="markdown")]


# ----- probes: GET (and HEAD) only, exempt from auth, no body and no deadline ----------------


async def health(request: web.Request) -> web.StreamResponse:
    """200 while the store can take writes; 503 `unhealthy` after a failed write (until one succeeds) or a
    failed load, and while a probe of the backend finds it unable to take writes (`server/store_health.py`)."""
    registry = request.app.get(REGISTRY_KEY)
    if registry is not None:
        problem = registry.problem()
        if problem is None:
            cannot = await probe_for(registry).problem()
            problem = None if cannot is None else f"the store cannot take writes: {cannot}"
        if problem is not None:
            raise ApiError(Code.UNHEALTHY, problem)
    return json_response({"status": "ok", "version": VERSION})


async def live(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def ready(request: web.Request) -> web.StreamResponse:
    """200 when this process can serve: the contexts to preload (TAGURU_PRELOAD) are in memory, its store
    answers and it has applied every committed change (a replica or worker that just started has caught
    up), and no context failed to load; 503 `unhealthy` otherwise. A store that refuses writes (read-only
    disk) leaves it 200: reads are served."""
    registry = request.app.get(REGISTRY_KEY)
    if registry is None:
        raise ApiError(Code.UNHEALTHY, "the store is not open yet")
    preload = request.app.get(PRELOAD_KEY)
    if preload is not None and not preload.done.is_set():
        raise ApiError(
            Code.UNHEALTHY,
            f"loading contexts into memory: {len(registry.loaded_names())} loaded, {preload.expected} to preload",
            headers={"Retry-After": "1"},
        )
    try:
        registry.catch_up()
    except Exception:
        raise ApiError(Code.UNHEALTHY, "the store cannot be read; the server log has details") from None
    if registry.load_failed:  # a store refusing writes still serves reads: that is `/health`'s to say, not this
        raise ApiError(Code.UNHEALTHY, registry.problem() or "a context could not be read from the store")
    return json_response({"status": "ready", "version": VERSION})


async def version(request: web.Request) -> web.StreamResponse:
    return json_response(version_body())


METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The reference's type of the text format (prometheus-client's own names its newer version)."""


async def metrics(request: web.Request) -> web.StreamResponse:
    collected = request.app[METRICS_KEY]
    if collected.shared_dir is None:
        body = render_metrics(collected.registry)
    else:  # `serve --workers N`: every worker's values (server/metrics_shared.py)
        collected.refresh()
        body = render_metrics(scrape_registry(collected.shared_dir))
    registry = request.app.get(REGISTRY_KEY)
    selected = per_context_rows(current("TAGURU_METRICS_PER_CONTEXT"), registry)
    if selected is not None:
        shared = None if collected.shared_dir is None else shared_violations(collected.shared_dir)
        body += context_rows(collected, selected, shared)
        sizes = sizes_of(request.app)
        extra = disk_rows({name: sizes.get(name, {}) for name in selected})
        extra += quota_rows(request.app[SETTINGS_KEY].quotas, selected)
        body += ("\n".join(extra) + "\n").encode("utf-8")
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


def per_context_rows(setting: str | None, registry: Any) -> list[str] | None:
    """The contexts that get per-context rows: `1`/`all` every one, `N` the N largest; None when off."""
    value = (setting or "").strip().lower()
    if not value or value in ("0", "false", "off") or registry is None:
        return None
    names = sorted(registry.names())
    if value in ("1", "all", "true"):
        return names
    try:
        n = int(value)
    except ValueError:
        return None
    sized = sorted(names, key=lambda name: (-_footprint(registry, name), name))
    return sorted(sized[: max(n, 0)])


def _footprint(registry: Any, name: str) -> int:
    ctx = registry.get(name) if registry.is_loaded(name) else None
    return int(ctx.footprint_bytes()) if ctx is not None else 0


def probes(routes: list[Route]) -> list[Probe]:
    """The probes, in the order `/openapi.json` lists them after `routes`, which it describes."""

    async def openapi(request: web.Request) -> web.StreamResponse:
        return json_response(openapi_document(routes, VERSION, table))

    table = [
        Probe("/version", version, "bare:Version", refuses=False),
        Probe("/health", health, "bare:Health"),
        Probe("/ready", ready, "bare:Ready"),
        Probe("/live", live, "text", refuses=False),
        Probe("/metrics", metrics, "metrics", refuses=False),
        Probe("/openapi.json", openapi, "openapi", refuses=False),
    ]
    return table
