"""The operator verbs: POST /flush, POST …/compact, POST …/rename and POST /maintenance/compact.

Every commit here is durable before the answer, so `flush` has nothing to flush (it answers `[]`:
a listed name would claim this call made it durable), and `compact` reports `image_persisted`
true. Compaction rebuilds the context from its live content (`store.maintenance`) and makes
the rebuilt context durable whole in one transaction; a refused commit changes nothing.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

from taguru_server.server.call import Call, Route, not_durable, note_write
from taguru_server.server.quotas import DISK_SIZES_KEY, wants_sizes
from taguru_server.server.routes.common import MAX_CONTEXT_NAME_BYTES, heavy_op
from taguru_server.server.wire import specs
from taguru_server.stages.model import gate
from taguru_server.store.derive.maintenance import budget_spent, dead_edges, rebuild
from taguru_server.store.errors import ApiError, Code, no_context
from taguru_server.store.model.context import Context
from taguru_server.store.persist.registry import CommitFailed, Registry
from taguru_server.store.persist.writer import WRITER, collector_paused
from taguru_server.store.text import utf8_len

# registries with a maintenance sweep running now (one per process; see `maintenance_compact`)
_SWEEPING: weakref.WeakSet[Registry] = weakref.WeakSet()


def _server_wide(call: Call, message: str) -> None:
    """A key with a context list (even an admin one) cannot call a server-wide verb."""
    if call.principal.contexts is not None:
        raise ApiError(Code.FORBIDDEN, message)


def _remaining(call: Call) -> float:
    return call.deadline - _now()


_now = time.monotonic  # the clock of the entry gates (a test moves it)


async def flush(call: Call) -> Any:
    """POST /flush: the contexts written since this process's previous flush (every write is durable at its
    commit already, so nothing else happens)."""
    _server_wide(call, "flush is server-wide (it names every flushed context); a context-scoped key cannot call it")
    gate(_remaining(call))
    sizes = call.app_state.get(DISK_SIZES_KEY)
    if sizes is not None and wants_sizes(call.settings):  # the kept disk sizes refresh at a flush
        await sizes.refresh(call.registry)
    return call.registry.flushed()


async def _compact_one(call: Call, ctx: Context) -> dict[str, Any]:
    """Rebuild and commit one context for a request (`compact_context` under the call's deadline)."""
    return await compact_context(call.registry, ctx, call.deadline)


async def compact_context(registry: Registry, ctx: Context, deadline: float) -> dict[str, Any]:
    """Rebuild and commit one context; its outcome in the reference's key order.

    The rebuild runs in a worker thread (it only reads the old context, and writes wait for this
    one's write section) and the commit in the writer thread, so `/live` and every read keep
    answering meanwhile; reads see the old context until the new one is durable.
    """

    def rebuilt() -> Any:
        with collector_paused():  # a rebuild is millions of new cycle-free objects
            return rebuild(ctx, deadline)

    done = await asyncio.to_thread(rebuilt)
    if time.monotonic() > deadline:
        raise budget_spent()
    try:
        await registry.replace_off_loop(done.context, deadline)
    except CommitFailed as exc:
        raise not_durable(exc, "the compaction could not be made durable; nothing was applied") from None
    note_write()
    purged = await asyncio.get_running_loop().run_in_executor(WRITER, registry.persistence.purge_freed)
    return {
        "bytes_before": done.bytes_before,
        "bytes_after": done.bytes_after,
        "dead_edges": done.dead_edges,
        "aliases_dropped": done.aliases_dropped,
        "passages_compacted": purged and ctx.meta.rev_passages > 0,
        "image_persisted": True,
    }


def sweeping(registry: Registry) -> bool:
    """A `POST /maintenance/compact` sweep holds this process's registry now."""
    return registry in _SWEEPING


def dead_ratio(ctx: Context) -> float:
    """Dead edges ÷ all edges (0 without edges)."""
    total = len(ctx.edges.subject)
    return dead_edges(ctx) / total if total else 0.0


async def compact(call: Call) -> Any:
    """POST /contexts/{name}/compact (admin, heavy): role, permit, budget, context, then the rebuild."""
    with heavy_op(call):
        gate(_remaining(call))
        return await _compact_one(call, call.context())


async def rename(call: Call) -> Any:
    """POST /contexts/{name}/rename {"to"}: checks in the reference's order, then one re-keying transaction."""
    assert call.name is not None
    name = call.name
    args = await call.decode(specs.RENAME)
    to: str = args["to"]
    size = utf8_len(to)
    if size > MAX_CONTEXT_NAME_BYTES:
        raise ApiError(
            Code.INVALID_ARGUMENT, f"the destination name is {size} bytes, over the 64-byte cap; nothing was applied"
        )
    if not call.principal.may_access(to):
        raise ApiError(
            Code.FORBIDDEN, f"key '{call.principal.key}' has no grant on context '{to}'; nothing was applied"
        )
    gate(_remaining(call))
    if not to:
        raise ApiError(Code.INVALID_ARGUMENT, "the destination name must not be empty")
    if not call.registry.exists(name):
        raise no_context(name)
    if to == name:
        return True
    if call.registry.exists(to):
        raise ApiError(Code.ALREADY_EXISTS, f"context '{to}' already exists")
    try:
        await call.registry.apply_off_loop({name, to}, lambda: call.registry.rename(name, to))
    except CommitFailed as exc:
        raise not_durable(exc, "the rename could not be made durable; nothing was applied") from None
    note_write()
    return True


def _min_dead_ratio(call: Call) -> float:
    raw = call.query.get("min_dead_ratio")
    if raw is None:
        return 0.0
    try:
        if raw != raw.strip() or "_" in raw:  # Python's float() takes these, the reference's parser does not
            raise ValueError(raw)
        value = float(raw)
    except ValueError:
        raise ApiError(
            Code.MALFORMED_REQUEST, "Failed to deserialize query string: min_dead_ratio: invalid float literal"
        ) from None
    return value if value != value else min(max(value, 0.0), 1.0)  # NaN stays NaN: nothing is above it


def _selection(registry: Registry, floor: float) -> list[tuple[float, str]]:
    """Contexts whose dead/associations ratio is strictly above `floor`: worst first, ties by name."""
    chosen: list[tuple[float, str]] = []
    for name in registry.names():
        ctx = registry.get(name)
        if ctx is None:
            continue
        ratio = dead_ratio(ctx)
        if ratio > floor:
            chosen.append((-ratio, name))
    chosen.sort()
    return chosen


async def maintenance_compact(call: Call) -> Any:
    """POST /maintenance/compact?min_dead_ratio=: compact every context past the ratio, until the budget runs out.

    The sweep does not pause other traffic (the reference's maintenance pause is optional): each
    context is rebuilt and committed like a single `…/compact`, between which other requests run.
    """
    floor = _min_dead_ratio(call)  # the query string is parsed before the handler runs, as in the reference
    _server_wide(call, "maintenance is server-wide (it may compact any context); a context-scoped key cannot call it")
    gate(_remaining(call))
    registry = call.registry
    if registry in _SWEEPING:
        raise ApiError(Code.CONFLICT, "a maintenance compaction sweep is already running")
    _SWEEPING.add(registry)
    try:
        return await _sweep(call, floor)
    finally:
        _SWEEPING.discard(registry)


async def _sweep(call: Call, floor: float) -> dict[str, Any]:
    compacted: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    exceeded = False
    for _ratio, name in _selection(call.registry, floor):
        if time.monotonic() > call.deadline:
            exceeded = True
            break
        try:
            # one write section per context: in it this process has applied every other process's change
            async with call.registry.write_section(call.deadline):
                ctx = call.registry.get(name)
                if ctx is None:
                    continue
                outcome = await _compact_one(call, ctx)
        except ApiError as err:
            if err.code is Code.TIMEOUT:
                exceeded = True
                break
            skipped.append({"name": name, "error": err.message})
            continue
        compacted.append({"name": name, **outcome})
        await asyncio.sleep(0)  # let other requests run between contexts
    return {"contexts": compacted, "deadline_exceeded": exceeded, "skipped": skipped}


ROUTES: list[Route] = [
    Route("POST", "/flush", flush, "admin", response="names"),
    Route(
        "POST",
        "/maintenance/compact",
        maintenance_compact,
        "admin",
        response="MaintenanceSweep",
        own_write_section=True,  # compacts one context at a time, each under its own write section
    ),
    Route("POST", "/contexts/{name}/rename", rename, "admin", request=specs.RENAME, response="bool"),
    Route("POST", "/contexts/{name}/compact", compact, "admin", response="CompactOutcome"),
]
