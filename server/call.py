"""One request as the handlers see it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

import attrs

from taguru_server.server.auth import Principal
from taguru_server.server.config import Settings
from taguru_server.server.decode import Spec, require_json
from taguru_server.server.state import AppState
from taguru_server.store.context import Context
from taguru_server.store.errors import ApiError, no_context
from taguru_server.store.registry import CommitFailed, Registry


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

    def json(self) -> Any:
        return require_json(self.headers.get("Content-Type"), self.body)

    def decode(self, spec: Spec) -> dict[str, Any]:
        """Decode the typed body with the same spec `/openapi.json` publishes."""
        return spec.read(self.headers.get("Content-Type"), self.body)

    def context(self) -> Context:
        assert self.name is not None
        ctx = self.registry.get(self.name)
        if ctx is None:
            raise no_context(self.name)
        return ctx

    def commit(self, *contexts: Context) -> None:
        try:
            self.registry.commit(contexts)
        except CommitFailed as exc:
            raise not_durable(exc, "the write could not be made durable; nothing was applied") from None


def not_durable(exc: CommitFailed, message: str) -> ApiError:
    """A refused commit: 507 `storage_full` when the disk is full, else 503 `unhealthy` (read-only or failing)."""
    return ApiError("storage_full" if exc.kind == "storage_full" else "unhealthy", message)


Handler = Callable[[Call], Awaitable[Any]]


class Route(NamedTuple):
    """One route-table entry: method, path template (`{name}` is one segment), handler, role needed."""

    method: str
    template: str
    handler: Handler
    role: str


def parse_query_string(raw: str) -> dict[str, str]:
    """The query string as a dict (the last value of a repeated key wins)."""
    return dict(parse_qsl(raw, keep_blank_values=True))
