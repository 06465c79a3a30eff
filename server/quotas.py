"""Per-context storage quotas (`TAGURU_CONTEXT_QUOTAS`) and the disk sizes they and
`taguru_context_disk_bytes` share.

A context's *used bytes* is one number: its rows in the store summed by part (graph rows and meta,
passage rows, vector rows plus its persisted BM25 index file; `store/persist/rows.py: disk_bytes`),
read on a connection of its own in a worker thread, never on the event loop and never at scrape
time. Before a growth write to a context with a `storage_bytes` ceiling the size is measured anew
(after the context's commits in flight have settled), so a burst of writes cannot outrun it; a
context at or over its ceiling refuses the write with 507 `storage_full` and nothing is applied.
Retractions, deletes, compaction and every other shrinking or neutral write are never gated.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from aiohttp import web

from taguru_server.server.cache_config import Quota
from taguru_server.server.call import Call
from taguru_server.server.config import Settings
from taguru_server.server.retrieval_cache import incarnation
from taguru_server.server.state import METRICS_KEY
from taguru_server.server.variables import current
from taguru_server.store.errors import ApiError, Code
from taguru_server.store.model.context import Context
from taguru_server.store.persist.registry import Registry

log = structlog.get_logger("taguru.quotas")

EMPTY = {"image": 0, "passages": 0, "sidecars": 0, "wal": 0, "passages_wal": 0}


class DiskSizes:
    """The last measured size of each context by part (context name → part → bytes)."""

    def __init__(self) -> None:
        self.by_name: dict[str, dict[str, int]] = {}
        self.seen: dict[str, tuple[Any, ...]] = {}  # name → what the context was when last measured

    def used(self, name: str) -> int:
        return sum(self.by_name.get(name, EMPTY).values())

    async def measure(self, registry: Registry, ctx: Context) -> int:
        """Measure one context now (off the event loop) and keep the parts; its used bytes."""
        parts = await asyncio.to_thread(measure_parts, registry, ctx.cid)
        self.by_name[ctx.name] = parts
        return sum(parts.values())

    async def refresh(self, registry: Registry) -> None:
        """Measure every context that changed since it was last measured (the flush ticker's and `POST
        /flush`'s refresh): its id, revisions or in-memory object (a compaction's rebuild) moved."""
        states = {name: _state(registry, name) for name in registry.names()}
        todo = {name: s[0] for name, s in states.items() if self.seen.get(name) != s and s[0] is not None}
        persistence: Any = registry.persistence
        measured = await asyncio.to_thread(persistence.disk_sizes, list(todo.values())) if todo else {}
        kept = {name: self.by_name[name] for name in states if name not in todo and name in self.by_name}
        for name, cid in todo.items():
            kept[name] = {**EMPTY, **measured[cid]}
        self.by_name = kept
        self.seen = {name: states[name] for name in kept}


def _state(registry: Registry, name: str) -> tuple[Any, ...]:
    """What a context's size depends on: its id, revisions, and the in-memory object when loaded."""
    meta = registry.known_meta(name)
    loaded = registry.get(name) if registry.is_loaded(name) else None
    revisions = () if meta is None else (meta.rev_graph, meta.rev_passages, meta.rev_config)
    return (registry.cid_of(name), *revisions, 0 if loaded is None else incarnation(loaded))


def measure_parts(registry: Registry, cid: int) -> dict[str, int]:
    """A context's parts as the store reports them, with the two write-ahead parts at 0 (a commit is
    durable in place: there is no write-ahead log of a context's own)."""
    parts: dict[str, int] = registry.persistence.disk_bytes(cid)  # type: ignore[attr-defined]
    return {**EMPTY, **parts}


def wants_sizes(settings: Settings) -> bool:
    """Whether the kept sizes are read: a quota is declared, or per-context metric rows are on."""
    setting = (current("TAGURU_METRICS_PER_CONTEXT") or "").strip().lower()
    return bool(settings.quotas) or setting not in ("", "0", "00", "false", "off")


DISK_SIZES_KEY: web.AppKey[DiskSizes] = web.AppKey("disk_sizes", DiskSizes)


def storage_ceiling(call: Call, name: str) -> int | None:
    """The context's declared `storage_bytes`, or None."""
    quota: Quota | None = call.settings.quotas.get(name)
    return None if quota is None else quota.storage_bytes


def quota_message(name: str, used: int, ceiling: int) -> str:
    """The 507 note of a context at its storage quota."""
    return (
        f"context '{name}' is at its storage quota ({used} of {ceiling} bytes): retract or compact to shrink it, "
        "or raise its TAGURU_CONTEXT_QUOTAS entry"
    )


async def over_quota(call: Call, ctx: Context) -> tuple[int, int] | None:
    """(used, ceiling) when the context is at or over its storage ceiling, else None (no ceiling: None)."""
    ceiling = storage_ceiling(call, ctx.name)
    if ceiling is None:
        return None
    sizes = call.app_state.get(DISK_SIZES_KEY)
    if sizes is None:
        return None
    await call.registry.settled(ctx.name)  # the context's commits in flight count
    used = await sizes.measure(call.registry, ctx)
    return (used, ceiling) if used >= ceiling else None


def refused(call: Call) -> None:
    """Count one quota refusal."""
    metrics = call.app_state.get(METRICS_KEY)
    if metrics is not None:
        metrics.storage_quota_refusals.inc()


async def check_growth(call: Call, ctx: Context) -> None:
    """Before a growth write: 507 `storage_full` when the context is at its storage quota."""
    over = await over_quota(call, ctx)
    if over is not None:
        refused(call)
        raise ApiError(Code.STORAGE_FULL, quota_message(ctx.name, *over))


class ImportQuota:
    """The import's per-batch quota check (`importer.QuotaGate`), run in the writer thread after the batches
    before it are durable: the context is measured on a connection of its own."""

    def __init__(self, call: Call) -> None:
        self.call = call

    def applies(self, context: str) -> bool:
        return storage_ceiling(self.call, context) is not None

    def refusal(self, ctx: Context) -> ApiError | None:
        ceiling = storage_ceiling(self.call, ctx.name)
        if ceiling is None:
            return None
        parts = measure_parts(self.call.registry, ctx.cid)
        sizes = self.call.app_state.get(DISK_SIZES_KEY)
        if sizes is not None:
            sizes.by_name[ctx.name] = parts
        used = sum(parts.values())
        if used < ceiling:
            return None
        refused(self.call)
        return ApiError(Code.STORAGE_FULL, quota_message(ctx.name, used, ceiling))


def import_quota(call: Call) -> ImportQuota | None:
    """The import's quota check, when any quota is declared."""
    return ImportQuota(call) if call.settings.quotas else None


def quota_rows(quotas: dict[str, Quota], contexts: list[str]) -> list[str]:
    """`taguru_context_quota_bytes{context, resource}`: one row per declared ceiling of a selected context."""
    if not quotas:
        return []
    lines = [
        "# HELP taguru_context_quota_bytes A context's declared ceiling (TAGURU_CONTEXT_QUOTAS)",
        "# TYPE taguru_context_quota_bytes gauge",
    ]
    for name in contexts:
        quota = quotas.get(name)
        if quota is None:
            continue
        label = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        for resource, value in (("cache", quota.cache_bytes), ("storage", quota.storage_bytes)):
            if value is not None:
                lines.append(f'taguru_context_quota_bytes{{context="{label}",resource="{resource}"}} {value}.0')
    return lines


def sizes_of(app: Any) -> dict[str, dict[str, int]]:
    """The kept sizes of the app (empty before the first measurement)."""
    sizes = app.get(DISK_SIZES_KEY)
    return {} if sizes is None else sizes.by_name
