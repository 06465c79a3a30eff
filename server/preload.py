"""Contexts loaded off the request path: all of them at start-up (before `/ready` says 200), and later the
ones other processes create (a worker or replica learns of them from the change log).

Loading runs in a thread, one context at a time, so the event loop keeps answering `/live` and
`/ready` meanwhile. Calls other than the probes wait until the start-up load is done (within their
deadline), and a call naming a context that is being loaded waits for that load, so no request
reads a whole context itself. TAGURU_PRELOAD picks the contexts: `all` (default), `pinned`, `none`
(the first request that names a context loads it, as before), or a comma-separated list of names.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from taguru_server.store.persist.registry import Registry

log = structlog.get_logger("taguru.preload")

FOLLOW_SECS = 1.0
RETRY_FIRST_SECS = 1.0  # a context whose background load failed is tried again after this, then twice as long
RETRY_MAX_SECS = 30.0

T = TypeVar("T")


def log_loaded(logger: Any, ctx: Any, started: float) -> None:
    """The `context.loaded` line: name, duration, counts, and what the load took from the persisted index."""
    logger.info(
        "context.loaded",
        context=ctx.name,
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
        concepts=len(ctx.concepts),
        associations=len(ctx.edges.subject),
        **index_fields(ctx.index_restored),
        **image_fields("edges", ctx.edges_restored),
        **image_fields("lexicons", ctx.lexicons_restored),
        **image_fields("activation", ctx.activation_restored),
    )


def index_fields(restored: Any) -> dict[str, Any]:
    """What the load took from the persisted BM25 index (none when indexes are not kept)."""
    if restored is None:
        return {}
    fields = {
        "index": restored.outcome,
        "index_reused_docs": restored.reused_docs,
        "index_tokenized_docs": restored.tokenized_docs,
    }
    return fields | ({"index_reason": restored.reason} if restored.reason else {})


def image_fields(part: str, restored: tuple[str, str | None] | None) -> dict[str, Any]:
    """Where the load took a part (edges, lexicons, activation graph) from: its image file or the rows (built),
    and why not the file."""
    if restored is None:
        return {}
    source, reason = restored
    return {part: source} | ({f"{part}_reason": reason} if reason else {})


def _in_daemon_thread(work: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """`work(*args)` in a daemon thread, its outcome delivered to the loop.

    Not the loop's default executor: the process does not wait for a load to finish before it
    exits (a stop or a failed start during a long load is immediate).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(ok: bool, value: Any) -> None:
        if not future.done():
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def run() -> None:
        value: Any
        try:
            ok, value = True, work(*args)
        except Exception as exc:  # delivered to the awaiting task
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(deliver, ok, value)
        except RuntimeError:  # the loop is closed: the server stopped during the load
            pass

    threading.Thread(target=run, name="taguru-preload", daemon=True).start()
    return future


def wanted_names(registry: Registry, policy: str | tuple[str, ...], names: list[str]) -> list[str]:
    """Those of `names` that the preload policy (TAGURU_PRELOAD) loads."""
    if policy == "none":
        return []
    if policy == "all":
        return names
    if policy == "pinned":
        return [n for n in names if (meta := registry.known_meta(n)) is not None and meta.pinned]
    return [n for n in names if n in policy]


class Preloader:
    """Loads the chosen contexts in the background and tells whether the start-up load is done."""

    def __init__(self, registry: Registry, policy: str | tuple[str, ...]) -> None:
        self.registry = registry
        self.policy = policy
        self.done = asyncio.Event()
        self.loading: dict[str, asyncio.Future[None]] = {}
        self.expected = 0  # contexts the start-up load reads
        self._one_at_a_time = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._retrying: set[str] = set()  # contexts a `_retry` task is loading again

    def wanted(self, names: list[str]) -> list[str]:
        """The given unloaded contexts that the policy preloads."""
        return wanted_names(self.registry, self.policy, names)

    def start(self) -> None:
        """Begin the start-up load; later catch-ups that find new contexts load them too."""
        self.registry.on_directory = self._directory_changed
        names = self._claim(self.wanted(self.registry.unloaded_names()))
        self.expected = len(names)
        self._spawn(self._startup(names))
        if self.registry.shared:
            self._spawn(self._poll())

    async def _poll(self) -> None:
        """Several processes over one store: look for contexts the others created every FOLLOW_SECS.

        One indexed read when nothing changed; a catch-up that finds a new context loads it in the
        background (`_directory_changed`), so the first request that names it does not wait.
        """
        await self.done.wait()
        while True:
            await asyncio.sleep(FOLLOW_SECS)
            try:
                self.registry.catch_up()
            except Exception:  # noqa: S110 - the next read catches up itself and reports an unreadable store
                pass

    async def stop(self) -> None:
        self.registry.on_directory = None
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    async def before_call(self, name: str | None) -> None:
        """Wait for the start-up load, and for a load of the named context under way (a request never loads it)."""
        if not self.done.is_set():
            await self.done.wait()
        if self.registry.shared and name is not None and not self.registry.is_loaded(name):
            # a context this process does not hold: maybe another process created it; catching up finds
            # it and starts its load here, before the handler would read it whole itself
            try:
                self.registry.catch_up()  # also with eventual reads: a name this process does not hold
            except Exception:  # noqa: S110 - the call's own catch-up reports an unreadable store
                pass
        pending = self.loading.get(name) if name is not None else None
        if pending is not None:
            await asyncio.shield(pending)

    def _directory_changed(self) -> None:
        names = self._claim(self.wanted(self.registry.unloaded_names()))
        if names:
            self._spawn(self._load_all(names))

    def _claim(self, names: list[str]) -> list[str]:
        """Register a pending load for each name not being loaded yet; returns those names."""
        loop = asyncio.get_running_loop()
        fresh = [n for n in names if n not in self.loading]
        for name in fresh:
            self.loading[name] = loop.create_future()
        return fresh

    def _spawn(self, work: object) -> None:
        # a fresh context: a load a request's catch-up started is not logged as part of that request
        loop = asyncio.get_running_loop()
        task: asyncio.Task[None] = loop.create_task(work, context=contextvars.Context())  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _startup(self, names: list[str]) -> None:
        started = time.perf_counter()
        policy = self.policy if isinstance(self.policy, str) else "list"
        log.info("contexts.loading", contexts=len(names), preload=policy)
        try:
            loaded = await self._load_all(names)
        finally:
            self.done.set()
        log.info(
            "contexts.ready",
            contexts=loaded,
            in_memory=len(self.registry.loaded_names()),
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
        )

    async def _load_all(self, names: list[str]) -> int:
        loaded = 0
        try:
            for name in names:
                loaded += await self._load_one(name)
        finally:
            for name in names:  # also those a cancellation left unloaded: their waiters go on
                pending = self.loading.pop(name, None)
                if pending is not None and not pending.done():
                    pending.set_result(None)
        return loaded

    async def _retry(self, name: str) -> None:
        """Load a context whose load failed again, after a growing pause, until it is held or gone."""
        self._retrying.add(name)
        try:
            pause = RETRY_FIRST_SECS
            while name in self.registry.unloaded_names():
                await asyncio.sleep(pause)
                if name in self.loading:
                    continue  # another load of it is under way
                if self._claim([name]) and await self._load_all([name]):
                    return
                pause = min(pause * 2, RETRY_MAX_SECS)
        finally:
            self._retrying.discard(name)

    async def _load_one(self, name: str) -> int:
        async with self._one_at_a_time:
            if self.registry.is_loaded(name):
                return 0
            started = time.perf_counter()
            try:
                read = await _in_daemon_thread(self.registry.read_context, name)
            except Exception as exc:  # reported unhealthy until a later load succeeds (a request's, or the retry's)
                log.error("context.load_failed", context=name, error_type=type(exc).__name__)
                if name not in self._retrying:
                    self._spawn(self._retry(name))
                return 0
            if read is None or not self.registry.adopt(*read):
                return 0
            log_loaded(log, read[0], started)
            pending = self.loading.pop(name, None)
            if pending is not None and not pending.done():
                pending.set_result(None)
            return 1
