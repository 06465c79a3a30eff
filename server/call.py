"""One request as the handlers see it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qsl

import attrs
from aiohttp import web

from taguru_server.server.auth import Principal
from taguru_server.server.config import Settings
from taguru_server.server.decode import Spec, require_json
from taguru_server.server.metrics import note_error
from taguru_server.server.offload import decode_body
from taguru_server.server.state import AppState
from taguru_server.server.store_health import commit_refused, write_landed
from taguru_server.store.errors import ApiError, Code, no_context, timed_out
from taguru_server.store.model.context import Context
from taguru_server.store.persist.registry import CommitFailed, Registry

_WRITES: ContextVar[list[int] | None] = ContextVar("taguru_writes", default=None)


def track_writes() -> list[int]:
    """Start noting the current request's durable writes: the list grows by one per commit."""
    box: list[int] = []
    _WRITES.set(box)
    return box


def note_write() -> None:
    """A commit of the current request landed (its answer must then say so, deadline or not)."""
    write_landed()
    box = _WRITES.get()
    if box is not None:
        box.append(1)


@attrs.define
class Call:
    """One request as the handlers see it."""

    method: str
    path: str
    name: str | None
    query: dict[str, str]
    headers: Any
    body: bytes
    registry: Registry
    settings: Settings
    principal: Principal
    deadline: float
    app_state: AppState = attrs.field(factory=AppState)
    pending: list[Any] = attrs.field(factory=list)  # commits queued on the writer thread (`settle_commits`)

    async def json(self) -> Any:
        """An any-JSON body (a large one is parsed off the event loop)."""
        content_type = self.headers.get("Content-Type")
        return await decode_body(self.body, lambda: require_json(content_type, self.body))

    async def decode(self, spec: Spec) -> dict[str, Any]:
        """Decode the typed body with the same spec `/openapi.json` publishes (a large one off the event loop)."""
        content_type = self.headers.get("Content-Type")
        return await decode_body(self.body, lambda: spec.read(content_type, self.body))

    def context(self) -> Context:
        assert self.name is not None
        try:
            ctx = self.registry.get(self.name)
        except Exception:
            note_error("load")
            raise
        if ctx is None:
            raise no_context(self.name)
        return ctx

    async def commit(self, *contexts: Context) -> None:
        """Make the handler's changes durable (in the writer thread); past the deadline they are refused (408).

        With one process the commit is queued and its outcome awaited once the handler is done
        (`settle_commits`, after the write section), so the next write need not wait for this one's
        fsync; with several processes it is awaited here, inside the store's lock.
        """
        if time.monotonic() > self.deadline:
            self.registry.rollback(contexts)
            raise timed_out(self.settings.request_timeout_secs)
        try:
            if self.registry.shared:
                await self.registry.commit_off_loop(contexts, self.deadline)
            else:
                done = self.registry.submit_commit(contexts)
                if done is not None:
                    self.pending.append(done)
                return
        except CommitFailed as exc:
            raise not_durable(exc, "the write could not be made durable; nothing was applied") from None
        note_write()

    async def settle_commits(self) -> None:
        """Wait for the commits this call queued: 503/507 if refused, 408 if still running at the deadline."""
        while self.pending:
            done = self.pending.pop(0)
            try:
                await self.registry.outcome(done, self.deadline)
            except CommitFailed as exc:
                raise not_durable(exc, "the write could not be made durable; nothing was applied") from None
            note_write()


def not_durable(exc: CommitFailed, message: str) -> ApiError:
    """A refused commit: 507 `storage_full` when the disk is full, else 503 `unhealthy` (read-only or failing).

    Logged as `store.write_refused` (its cause's kind and reason phrase, rate-limited per cause)."""
    commit_refused(exc)
    if exc.kind != "storage_full":
        note_error("wal_refused")
    return ApiError(Code.STORAGE_FULL if exc.kind == "storage_full" else Code.UNHEALTHY, message)


Handler = Callable[[Call], Awaitable[Any]]


@attrs.frozen
class Route:
    """One route, declared once in its resource module's table: everything the server reads about it.

    `request` is the body: the `Spec` the handler decodes with (published under its component name),
    the component name of a body the handler validates itself, `"jsonl"` for the import stream, or
    None for no body. `response` is the shape of a success (`wire.schemas.result_schema`, or a media
    type). The flags say what the middlewares and the dispatch do for it: `optional_body` (an empty
    body means every default), `query` (the published query parameters), `heavy_before_body` (a
    heavy-operation permit is held from before the body is read), `own_write_section` (a write that
    waits on something slow takes the write section itself, around its commit only) and `group_name`
    (`{name}` names a group, so the path grant is not checked).
    """

    method: str
    template: str
    handler: Handler
    role: str
    request: Spec | str | None = attrs.field(default=None, kw_only=True)
    response: str = attrs.field(kw_only=True)
    optional_body: bool = attrs.field(default=False, kw_only=True)
    query: tuple[dict[str, Any], ...] = attrs.field(default=(), kw_only=True)
    heavy_before_body: bool = attrs.field(default=False, kw_only=True)
    own_write_section: bool = attrs.field(default=False, kw_only=True)
    group_name: bool = attrs.field(default=False, kw_only=True)

    @property
    def spec(self) -> Spec | None:
        """The typed body the handler decodes with, if it has one."""
        return self.request if isinstance(self.request, Spec) else None

    @property
    def request_component(self) -> str | None:
        """The component `/openapi.json` publishes the body under (None without a JSON body)."""
        if isinstance(self.request, Spec):
            return self.request.component_name
        return self.request


ProbeHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@attrs.frozen
class Probe:
    """One probe (GET and HEAD, answered before auth and the in-flight ceiling): its exact path, its
    aiohttp handler, the shape of its answer (as `Route.response`) and whether it can answer the
    error envelope instead. The OAuth routes (`server/oauth/routes.py`) are records of the same kind
    with their `method`: exact paths answered without a token, but after the in-flight ceiling."""

    template: str
    handler: ProbeHandler
    response: str
    refuses: bool = True
    method: str = attrs.field(default="GET", kw_only=True)


def parse_query_string(raw: str) -> dict[str, str]:
    """The query string as a dict (the last value of a repeated key wins)."""
    return dict(parse_qsl(raw, keep_blank_values=True))
