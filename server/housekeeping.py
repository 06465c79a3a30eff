"""The flush ticker (every `TAGURU_FLUSH_SECS`): refresh the kept disk sizes, then auto-compact one context.

Auto-compaction (`TAGURU_AUTO_COMPACT`, `TAGURU_AUTO_COMPACT_RATIO`): each tick, unless a
`POST /maintenance/compact` sweep holds the server, the context with the worst dead ratio (dead
edges ÷ all edges) strictly above the trigger and not set aside is compacted, under a heavy-operation
permit taken without waiting (none free: next tick) and a 60 s budget, inside a write section (so
with several processes the ratio is judged again once caught up, and a context another process has
just compacted is left alone). A compaction past its budget sets the context aside until restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import structlog
from aiohttp import web

from taguru_server.server.config import Settings
from taguru_server.server.quotas import DISK_SIZES_KEY, wants_sizes
from taguru_server.server.routes.common import release, try_permit
from taguru_server.server.routes.maintenance import compact_context, dead_ratio, sweeping
from taguru_server.server.state import METRICS_KEY, REGISTRY_KEY, AppState
from taguru_server.store.errors import ApiError, Code
from taguru_server.store.persist.registry import Registry

log = structlog.get_logger("taguru.housekeeping")
audit = structlog.get_logger("taguru.audit")

BUDGET_SECS = 60.0


class AutoCompact:
    """The auto-compaction policy of one process: its trigger and the contexts set aside."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self.set_aside: set[str] = set()

    def pick(self, registry: Registry) -> tuple[str, float] | None:
        """The loaded context with the worst dead ratio strictly above the trigger (ties by name), or None."""
        worst: tuple[float, str] | None = None
        for name in registry.loaded_names():
            if name in self.set_aside:
                continue
            ctx = registry.get(name)
            if ctx is None:
                continue
            ratio = dead_ratio(ctx)
            if ratio > self.ratio and (worst is None or (-ratio, name) < (-worst[0], worst[1])):
                worst = (ratio, name)
        return None if worst is None else (worst[1], worst[0])

    async def tick(self, app: web.Application) -> None:
        """At most one compaction: the worst context past the trigger, if a permit is free."""
        registry = app[REGISTRY_KEY]
        if sweeping(registry):
            return
        picked = self.pick(registry)
        if picked is None:
            return
        state = AppState(app)
        if not try_permit(state):
            return
        try:
            await self._compact(app, registry, *picked)
        finally:
            release(state)

    async def _compact(self, app: web.Application, registry: Registry, name: str, ratio: float) -> None:
        metrics = app.get(METRICS_KEY)
        deadline = time.monotonic() + BUDGET_SECS
        try:
            async with registry.write_section(deadline):
                ctx = registry.get(name)
                ratio = 0.0 if ctx is None else dead_ratio(ctx)
                if ctx is None or ratio <= self.ratio:  # deleted, or compacted by another process meanwhile
                    return
                outcome = await compact_context(registry, ctx, deadline)
        except ApiError as err:
            if metrics is not None:
                metrics.auto_compactions.labels("failed").inc()
            if err.code is Code.TIMEOUT:
                self.set_aside.add(name)
                log.warning(
                    "auto-compaction exceeded the tick budget; leaving this context to POST /maintenance/compact "
                    "or offline `taguru compact`",
                    context=name,
                    budget_secs=int(BUDGET_SECS),
                )
            else:
                log.warning("auto-compaction failed; retrying while the dead ratio holds", context=name)
            return
        audit.info(
            "context compacted",
            trigger="auto",
            context=name,
            dead_ratio=ratio,
            bytes_before=outcome["bytes_before"],
            bytes_after=outcome["bytes_after"],
            dead_edges=outcome["dead_edges"],
            aliases_dropped=outcome["aliases_dropped"],
            image_persisted=outcome["image_persisted"],
        )
        if metrics is not None:
            metrics.auto_compactions.labels("ok").inc()
            metrics.auto_compact_reclaimed.inc(max(outcome["bytes_before"] - outcome["bytes_after"], 0))
            metrics.auto_compact_last_success.set(time.time())


async def run(app: web.Application, settings: Settings) -> None:
    """The ticker: every TAGURU_FLUSH_SECS, the sizes (when read), then one auto-compaction (when on)."""
    auto = AutoCompact(settings.auto_compact_ratio) if settings.auto_compact else None
    while True:
        await asyncio.sleep(settings.flush_secs)
        try:
            await tick(app, settings, auto)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next tick tries again; the type only, never content
            log.warning("housekeeping.tick_failed", error_type=type(exc).__name__)


async def tick(app: web.Application, settings: Settings, auto: AutoCompact | None) -> None:
    """One tick of the ticker."""
    registry = app.get(REGISTRY_KEY)
    if registry is None:
        return
    sizes = app.get(DISK_SIZES_KEY)
    if sizes is not None and wants_sizes(settings):
        await sizes.refresh(registry)
    if auto is not None:
        await auto.tick(app)


def start(app: web.Application, settings: Settings) -> asyncio.Task[None] | None:
    """The ticker's task, when it has anything to do."""
    if not settings.auto_compact and not wants_sizes(settings):
        return None
    return asyncio.get_running_loop().create_task(run(app, settings))


async def stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel the ticker and wait for it."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
