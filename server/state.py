"""Typed application and request keys, and the typed view of the app that handlers get."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import attrs
from aiohttp import web

from taguru_server.server.auth import FailedAuthLimiter, KeyRateLimiter, Principal
from taguru_server.server.config import Settings
from taguru_server.server.keyring import Keys
from taguru_server.server.metrics import Metrics
from taguru_server.server.oauth.gate import OAuth
from taguru_server.server.preload import Preloader
from taguru_server.server.providers.embedder import Embedder
from taguru_server.server.providers.reranker import HttpReranker
from taguru_server.store.persist.registry import Registry

if TYPE_CHECKING:
    from taguru_server.server.mcp.tools import Request

T = TypeVar("T")


@attrs.define
class Running:
    """How many operations of one kind are running now (the in-flight and heavy-operation ceilings)."""

    count: int = 0


class Dispatch(Protocol):
    """Runs one API call (`routed`; a body of no stated type is JSON) in process under a caller's key and
    deadline; returns (status, envelope bytes).

    `limit` bounds how much of a streamed body (an export) is read: past it the call stops reading, so
    the caller sees more than `limit` bytes and no more."""

    async def __call__(
        self, principal: Principal, deadline: float, routed: Request, limit: int | None = None
    ) -> tuple[int, bytes]: ...


# per application
REGISTRY_KEY: web.AppKey[Registry] = web.AppKey("registry", Registry)
SETTINGS_KEY: web.AppKey[Settings] = web.AppKey("settings", Settings)
KEYS_KEY: web.AppKey[Keys] = web.AppKey("keys", Keys)  # the armed key table (a reload swaps it: server/reload.py)
METRICS_KEY: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
RERANKER_KEY: web.AppKey[HttpReranker] = web.AppKey("reranker", HttpReranker)
EMBEDDER_KEY: web.AppKey[Embedder | None] = web.AppKey("embedder")  # None: no embedding provider
RERANK_OBSERVER_KEY: web.AppKey[Callable[[str, float], None]] = web.AppKey("observe_rerank")
INFLIGHT_KEY: web.AppKey[Running] = web.AppKey("inflight", Running)
HEAVY_OPS_KEY: web.AppKey[Running] = web.AppKey("communities_heavy_ops", Running)
AUTH_LIMITER_KEY: web.AppKey[FailedAuthLimiter] = web.AppKey("auth_limiter", FailedAuthLimiter)
KEY_LIMITER_KEY: web.AppKey[KeyRateLimiter] = web.AppKey("key_limiter", KeyRateLimiter)
DISPATCH_KEY: web.AppKey[Dispatch] = web.AppKey("dispatch")
PRELOAD_KEY: web.AppKey[Preloader] = web.AppKey("preload", Preloader)
OAUTH_KEY: web.AppKey[OAuth] = web.AppKey("oauth", OAuth)  # set only while TAGURU_PUBLIC_URL mounts OAuth

# per request, set by the middlewares
STARTED_KEY: web.RequestKey[float] = web.RequestKey("started", float)
ROUTE_KEY: web.RequestKey[str] = web.RequestKey("route", str)
PRINCIPAL_KEY: web.RequestKey[Principal] = web.RequestKey("principal", Principal)
BODY_KEY: web.RequestKey[bytes] = web.RequestKey("body", bytes)
DEADLINE_KEY: web.RequestKey[float] = web.RequestKey("deadline", float)
# with tracing on: the SERVER span's `trace_id` and `span_id` (hex), bound to the request's log lines
TRACE_IDS_KEY: web.RequestKey[dict[str, str]] = web.RequestKey("trace_ids", dict)


# the names handlers used before the keys were typed (evidence.py still reads these)
class AppState:
    """Typed read access to the per-app services a handler may use (`call.app_state[HEAVY_OPS_KEY]`)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[Any, Any] | None = None) -> None:
        self._items: Mapping[Any, Any] = {} if items is None else items

    def __getitem__(self, key: web.AppKey[T]) -> T:
        value: T = self._items[key]
        return value

    def get(self, key: web.AppKey[T], default: T | None = None) -> T | None:
        """The service under `key`, else `default`."""
        value: T | None = self._items.get(key, default)
        return value


class _Services(Protocol):
    def get(self, key: web.AppKey[Any], default: Any = None) -> Any: ...


# The derived switches of the embedding provider (docs/embeddings.md, "Configuration"), over the
# app (or a handler's AppState).
def provider_configured(services: _Services) -> bool:
    """An embedding provider was selected at boot (and, for `local`, could load)."""
    return services.get(EMBEDDER_KEY) is not None


def passage_lane_enabled(services: _Services) -> bool:
    """A provider is configured and TAGURU_EMBED_PASSAGES is true."""
    settings = services.get(SETTINGS_KEY)
    return provider_configured(services) and settings is not None and settings.embed_passages


def auto_embed_enabled(services: _Services) -> bool:
    """A provider is configured and TAGURU_EMBED_AUTO is true."""
    settings = services.get(SETTINGS_KEY)
    return provider_configured(services) and settings is not None and settings.embed_auto
