"""What `/health` knows about the store, and the log lines of refused writes.

`/health` answers whether this process's store can take writes: the registry's own state (the
last commit failed, a context could not be read back) and a probe of the backend
(`store/persist/write_probe.py`), so a PostgreSQL outage or a read-only disk shows before a client's
write meets it. The probe runs in a thread, at most once every PROBE_INTERVAL_SECS per store
(answers in between reuse its result, unless it found a problem and a write has landed since)
and one at a time; a probe that takes longer than PROBE_TIMEOUT_SECS answers as a store that does
not answer. `/live` never gets here.

A refused write (its commit failed, or the store could not be locked for it) logs
`store.write_refused` with the cause's kind and the backend's short reason phrase, at most once
per LOG_INTERVAL_SECS per cause, with the number of refusals of that cause left unlogged since
the previous line. Nothing of the request or of the store's content is in either.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import structlog

from taguru_server.store.errors import StorageFailed
from taguru_server.store.persist import write_probe as probes
from taguru_server.store.persist.registry import CommitFailed, Registry

log = structlog.get_logger("taguru.store")

PROBE_INTERVAL_SECS = 2.0
PROBE_TIMEOUT_SECS = 3.0
LOG_INTERVAL_SECS = 10.0


class RefusalLog:
    """One `store.write_refused` line per cause per LOG_INTERVAL_SECS, counting the ones left out."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}

    def note(self, kind: str, reason: str) -> None:
        cause = (kind, reason)
        now = self.clock()
        last = self._last.get(cause)
        if last is not None and now - last < LOG_INTERVAL_SECS:
            self._suppressed[cause] = self._suppressed.get(cause, 0) + 1
            return
        log.warning(
            "store.write_refused", kind=kind, reason=reason, suppressed_since_last=self._suppressed.pop(cause, 0)
        )
        self._last[cause] = now


REFUSALS = RefusalLog()
_LANDED = [0]  # commits that landed in this process (a probe's problem is stale once one lands after it)


def write_landed() -> None:
    """A commit landed: the store took a write, whatever the last probe found."""
    _LANDED[0] += 1


def storage_reason(exc: StorageFailed) -> str:
    """The backend's short phrase of a StorageFailed (its message is `kind: phrase`)."""
    return str(exc).removeprefix(f"{exc.kind}: ")


def commit_refused(exc: CommitFailed) -> None:
    """Log a refused commit (rate-limited): its kind and the phrase of the backend error behind it."""
    cause = exc.__cause__
    if isinstance(cause, StorageFailed):
        reason = storage_reason(cause)
    elif cause is not None:
        reason = type(cause).__name__  # never its message: it may quote what was written
    else:
        reason = "refused before the store was asked"
    REFUSALS.note(exc.kind, reason)


def write_refused(exc: StorageFailed) -> None:
    """Log a write the store could not even begin (its write lock or catch-up failed), rate-limited."""
    REFUSALS.note(exc.kind, storage_reason(exc))


class StoreProbe:
    """The backend's answer to `write_probe`, asked at most every PROBE_INTERVAL_SECS, one probe at a time."""

    def __init__(
        self,
        persistence: Any,
        probe: Callable[[Any], str | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.persistence = persistence
        self.probe = probe if probe is not None else probes.write_probe
        self.clock = clock
        self.checked_at = float("-inf")
        self.result: str | None = None
        self.landed = 0  # the commits that had landed when the last probe started
        self._running: asyncio.Future[str | None] | None = None

    async def problem(self) -> str | None:
        """Why the store cannot take writes, by the latest probe (starting one when the last is stale), or None."""
        fresh = self.clock() - self.checked_at < PROBE_INTERVAL_SECS
        if fresh and (self.result is None or self.landed == _LANDED[0]):
            return self.result
        if self._running is None:
            self.landed = _LANDED[0]
            self._running = _in_thread(self.probe, self.persistence)
            self._running.add_done_callback(self._record)
        try:
            return await asyncio.wait_for(asyncio.shield(self._running), PROBE_TIMEOUT_SECS)
        except TimeoutError:
            return f"the store did not answer a probe within {PROBE_TIMEOUT_SECS:g} s"
        except Exception as exc:
            return _probe_failed(exc)

    def _record(self, done: asyncio.Future[str | None]) -> None:
        self._running = None
        if done.cancelled():
            return
        exc = done.exception()
        result = _probe_failed(exc) if exc is not None else done.result()
        self.checked_at = self.clock()
        if result != self.result:
            if result is None:
                log.info("store.writable")
            else:
                log.warning("store.unwritable", reason=result)
        self.result = result


def _probe_failed(exc: BaseException) -> str:
    return f"the probe of the store failed ({type(exc).__name__})"


_PROBES: weakref.WeakKeyDictionary[Registry, StoreProbe] = weakref.WeakKeyDictionary()


def probe_for(registry: Registry) -> StoreProbe:
    """The one probe of this registry's store."""
    found = _PROBES.get(registry)
    if found is None or found.persistence is not registry.persistence:
        found = _PROBES[registry] = StoreProbe(registry.persistence)
    return found


def _in_thread(work: Callable[[Any], str | None], arg: Any) -> asyncio.Future[str | None]:
    """`work(arg)` in a daemon thread (a hung probe never holds up the process's exit), delivered to the loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str | None] = loop.create_future()

    def deliver(value: str | None, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)

    def run() -> None:
        value: str | None = None
        failure: BaseException | None = None
        try:
            value = work(arg)
        except Exception as exc:  # delivered to the awaiting probe
            failure = exc
        try:
            loop.call_soon_threadsafe(deliver, value, failure)
        except RuntimeError:  # the loop is closed: the server stopped meanwhile
            pass

    threading.Thread(target=run, name="taguru-store-probe", daemon=True).start()
    return future
