"""The aiohttp application factory: typed app state, the middlewares, the store, reranker and embedder lifecycles."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from taguru_server.server import housekeeping
from taguru_server.server.auth import FailedAuthLimiter, KeyRateLimiter
from taguru_server.server.config import Settings, index_dir_for
from taguru_server.server.dispatch import endpoint, in_process
from taguru_server.server.keyring import Keys, keyring_of
from taguru_server.server.metrics import ContextSums, Metrics
from taguru_server.server.metrics_shared import VARIABLE as SHARED_METRICS_VARIABLE
from taguru_server.server.metrics_shared import join_shared_files
from taguru_server.server.middleware import MIDDLEWARES, server_span
from taguru_server.server.oauth.gate import OAuth, enabled_note
from taguru_server.server.oauth.persist import OAuthState, RowBacking
from taguru_server.server.preload import Preloader
from taguru_server.server.providers.embedder import (
    ChunkedEmbedder,
    Embedder,
    EmbedMetrics,
    boot_notes,
    http_embedder,
    local_embedder,
    provider_kind,
)
from taguru_server.server.providers.reranker import HttpReranker, RerankMetrics, RerankSettings
from taguru_server.server.providers.retry import Breaker
from taguru_server.server.quotas import DISK_SIZES_KEY, DiskSizes
from taguru_server.server.retrieval_cache import RETRIEVAL_CACHE_KEY, RetrievalCache
from taguru_server.server.semantic_cache import SEMANTIC_CACHE_KEY, SemanticCache
from taguru_server.server.state import (
    AUTH_LIMITER_KEY,
    DISPATCH_KEY,
    EMBEDDER_KEY,
    HEAVY_OPS_KEY,
    INFLIGHT_KEY,
    KEY_LIMITER_KEY,
    KEYS_KEY,
    METRICS_KEY,
    OAUTH_KEY,
    PRELOAD_KEY,
    REGISTRY_KEY,
    RERANK_OBSERVER_KEY,
    RERANKER_KEY,
    SETTINGS_KEY,
    Running,
)
from taguru_server.server.tracing import TRACING_KEY, tracing_for
from taguru_server.store.persist.backend import is_shared, open_store
from taguru_server.store.persist.registry import Registry
from taguru_server.store.persist.writer import WRITER_SWITCH_INTERVAL_SECS
from taguru_server.store.read.cache import warm

log = structlog.get_logger("taguru.app")

PUBLISH_SECS = 1.0
"""How often a worker of `serve --workers N` writes the gauges it reads from its own state."""


def _warm_paused(ctx: Any) -> None:
    """A loaded context's warm-up (lexicon views, activation graph) with the collector paused, as its row
    load is: the warm-up's allocations would otherwise set off full collections over the just-loaded
    objects, not yet frozen (at 300k paragraphs 2.3 s instead of 1.3 s)."""
    from taguru_server.store.persist.writer import collector_paused

    with collector_paused():
        warm(ctx)


def report_check(event: str, **fields: object) -> None:
    """The boot's store check, logged: before a full-file check starts (it reads every page), when it ends,
    or that it was skipped for a sealed store (store/persist/seal.py)."""
    log.info(event, **fields)


def open_registry(settings: Settings, checked: bool = False, report: Callable[..., None] | None = None) -> Registry:
    """The settings' store (SQLite in the data dir, or PostgreSQL), shared when other processes write it too;
    `checked`: a worker's (or the fork loader's) open, after the supervisor's own checked one; `report`:
    told of the boot's store check (the server logs it, `report_check`; the CLI's other commands keep
    their output to themselves)."""
    store = open_store(settings.data_dir, settings.database_url, report, checked)
    store.index_dir = index_dir_for(settings)
    registry = Registry(store, shared=is_shared(settings.database_url, settings.workers), warm=_warm_paused)
    registry.eventual = settings.read_consistency == "eventual"
    return registry


def _follow(registry: Registry) -> asyncio.Task[None] | None:
    """On PostgreSQL, catch up as soon as any replica commits (LISTEN/NOTIFY), not only before a read."""
    url = getattr(registry.persistence, "url", None)
    if not isinstance(url, str):
        return None
    from taguru_server.store.persist.postgres import follow_notifications

    def on_change() -> None:
        try:
            registry.catch_up()
        except Exception as exc:  # the next read retries (and answers 503 if the store stays unreadable)
            log.warning("replica.catch_up_failed", error_type=type(exc).__name__)

    return asyncio.get_running_loop().create_task(follow_notifications(url, on_change))


def _auto_embed(registry: Registry, embedder: Embedder | None, settings: Settings) -> asyncio.Task[None] | None:
    """TAGURU_EMBED_AUTO with a provider: refresh stale vectors every TAGURU_FLUSH_SECS (server/auto_embed.py)."""
    if embedder is None or not settings.embed_auto:
        return None
    from taguru_server.server.auto_embed import AutoEmbed

    auto = AutoEmbed(registry, embedder, settings.embed_passages, settings.passage_vector_limit)
    return asyncio.get_running_loop().create_task(auto.run(settings.flush_secs))


def store_sums(sums: ContextSums) -> dict[str, Callable[[], float]]:
    """The readers of the gauges summed over the contexts in memory (server/metrics.py: ContextSums)."""
    fields = {
        "resident_bytes": "footprint_bytes",
        "dead_edges": "dead_edges",
        "dead_attributions": "dead_attributions",
        "unsourced_edges": "unsourced_edges",
        "unsourced_weight": "unsourced_weight",
    }
    return {gauge: (lambda field=field: sums.total(field)) for gauge, field in fields.items()}  # type: ignore[misc]


def _publish(metrics: Metrics) -> asyncio.Task[None] | None:
    """With the workers' shared metric files: write this worker's state-read gauges every second."""
    if metrics.shared_dir is None:
        return None

    async def publish() -> None:
        while True:
            metrics.refresh()
            await asyncio.sleep(PUBLISH_SECS)

    return asyncio.get_running_loop().create_task(publish())


def mount_oauth(settings: Settings) -> OAuth:
    """The OAuth server of TAGURU_PUBLIC_URL, its grant store loaded from the data dir (SQLite) or the database."""
    assert settings.public_url is not None
    if settings.database_url:  # replicas share no disk: the grants are rows of the store
        state = OAuthState(RowBacking(settings.database_url))
    else:
        state = OAuthState.in_data_dir(settings.data_dir, shared=settings.workers > 1)
    state.boot()
    enabled_note(settings.public_url)
    return OAuth(settings.public_url, state)


def build_app(
    settings: Settings,
    registry: Registry | None = None,
    rerank: RerankSettings | None = None,
    clock: Callable[[], float] = time.monotonic,
    embedder: Embedder | None = None,
    tracer_provider: Any = None,
    environ: Mapping[str, str] | None = None,
) -> web.Application:
    """An application over the settings' data dir (or a given registry), with an optional reranker.

    The embedding provider comes from the settings (TAGURU_EMBED_*), unless one is given. Spans
    go to the given OpenTelemetry tracer provider, else to OTLP when the OTEL_* variables of
    `environ` (the process environment the command read; none given: none) ask (server/tracing.py).
    """
    # the writer thread (store/persist/writer.py) gives the interpreter lock back around every SQLite step; with the
    # default 5 ms hand-over a busy event loop would make each step of a commit wait that long
    sys.setswitchinterval(WRITER_SWITCH_INTERVAL_SECS)
    tracing = tracing_for({} if environ is None else environ, tracer_provider)
    traced = [server_span(tracing)] if tracing is not None else []
    app = web.Application(
        client_max_size=max(settings.max_body_bytes, 1024) + 1024 * 1024, middlewares=[*traced, *MIDDLEWARES]
    )
    if tracing is not None:
        app[TRACING_KEY] = tracing
        app.on_cleanup.append(lambda _app: asyncio.to_thread(tracing.shutdown))
    app[SETTINGS_KEY] = settings
    app[KEYS_KEY] = Keys(keyring_of(settings))
    # one of `serve --workers N`: the values go to the workers' shared files (server/metrics_shared.py)
    shared = (environ or {}).get(SHARED_METRICS_VARIABLE) if settings.workers > 1 else None
    if shared:
        join_shared_files(shared)
    metrics = Metrics(shared_dir=shared or None)
    app[METRICS_KEY] = metrics
    rerank_metrics = RerankMetrics(metrics.registry, configured=rerank is not None)
    app[RERANK_OBSERVER_KEY] = rerank_metrics.observe
    app[INFLIGHT_KEY] = Running()
    app[HEAVY_OPS_KEY] = Running()
    app[AUTH_LIMITER_KEY] = FailedAuthLimiter(settings.auth_fail_limit_per_min, clock)
    app[KEY_LIMITER_KEY] = KeyRateLimiter(settings.rate_limit_per_min, clock)
    app[DISPATCH_KEY] = in_process(app)
    app[DISK_SIZES_KEY] = DiskSizes()
    cache = RetrievalCache(settings.retrieval_cache_bytes)
    app[RETRIEVAL_CACHE_KEY] = cache
    metrics.watch(retrieval_cache_entries=lambda: len(cache.entries), retrieval_cache_bytes=lambda: cache.bytes)
    if settings.semantic_cache_threshold is not None:
        tier = SemanticCache(settings.semantic_cache_threshold)
        app[SEMANTIC_CACHE_KEY] = tier
        metrics.watch(semantic_cache_entries=lambda: len(tier))
    if settings.public_url is not None:
        oauth = mount_oauth(settings)
        app[OAUTH_KEY] = oauth
        app.on_cleanup.append(lambda _app: asyncio.to_thread(oauth.state.backing.close))

    async def reranker_ctx(app: web.Application) -> AsyncIterator[None]:
        if rerank is None:
            yield
            return
        session = aiohttp.ClientSession()
        app[RERANKER_KEY] = HttpReranker(rerank, session, Breaker(clock, rerank_metrics))
        yield
        await session.close()

    app.cleanup_ctx.append(reranker_ctx)

    kind = "given" if embedder is not None else provider_kind(settings)
    embed_metrics = EmbedMetrics(metrics.registry, configured=kind == "http")
    boot_notes(settings, kind)

    async def embedder_ctx(app: web.Application) -> AsyncIterator[None]:
        session: aiohttp.ClientSession | None = None
        provider: Embedder | None = embedder
        if kind == "http":
            session = aiohttp.ClientSession()
            provider = http_embedder(settings, session, embed_metrics, clock)
        elif kind == "local":
            provider = await asyncio.to_thread(local_embedder, settings, embed_metrics)
        if tracing is not None and isinstance(provider, ChunkedEmbedder):
            provider.tracing = tracing
        app[EMBEDDER_KEY] = provider
        yield
        if isinstance(provider, ChunkedEmbedder):
            provider.close()
        if session is not None:
            await session.close()

    app.cleanup_ctx.append(embedder_ctx)

    async def store_ctx(app: web.Application) -> AsyncIterator[None]:
        reg = registry or open_registry(settings)
        app[REGISTRY_KEY] = reg
        preload = Preloader(reg, settings.preload)
        app[PRELOAD_KEY] = preload
        sums = ContextSums(lambda: [reg.get(name) for name in reg.loaded_names()])
        metrics.watch(
            inflight=lambda: app[INFLIGHT_KEY].count,
            contexts_loaded=lambda: len(reg.loaded_names()),
            ready=lambda: 1 if preload.done.is_set() else 0,
            contexts_registered=lambda: len(reg.names()),
            groups_registered=lambda: len(reg.groups),
            contexts_resident=lambda: len(reg.loaded_names()),
            **store_sums(sums),
        )
        preload.start()  # in the background: /live and /ready answer meanwhile
        follower = _follow(reg)
        ticker = _auto_embed(reg, app.get(EMBEDDER_KEY), settings)
        publisher = _publish(metrics)
        summing = asyncio.get_running_loop().create_task(sums.run())
        chores = housekeeping.start(app, settings)
        yield
        await housekeeping.stop(chores)
        await preload.stop()
        for task in (follower, ticker, publisher, summing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if registry is None:
            reg.close()

    app.cleanup_ctx.append(store_ctx)
    # `[\s\S]` and not `.`: a context name may hold a newline (`%0A`), which `.` would leave to aiohttp's plain 404.
    app.router.add_route("*", "/{tail:[\\s\\S]*}", endpoint)
    return app
