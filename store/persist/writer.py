"""The writer thread and the writes in flight on it.

Every write transaction of a serving process runs in one thread (`WRITER`), on the store's write
connection, so no fsync ever stops the event loop and no two threads step one connection. A
write *in flight* is one submitted to that thread and not yet settled; reads of the contexts it
writes wait for it (`Flights.settled`), so no read sees a change that is not durable yet.

Two kinds of flight:

- a *prepared commit* (`exclusive=False`): its rows were taken from the contexts when it was
  submitted, so the event loop may go on changing them (the next write of the same context is
  prepared and queued behind it; the thread runs them in order);
- an *exclusive* write (a compaction's replace, an import, a delete, a rename, a group write, or
  any write in a store shared by several processes): it reads the contexts in the thread, or
  holds the store's lock, so the next write section waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from taguru_server.store.model.context import Dirty

T = TypeVar("T")

# the thread every write transaction of a serving process runs in (one: writes are serialized)
WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="taguru-commit")

# the interpreter's thread switch interval a serving process sets (the default is 5 ms): the writer thread
# gives the lock back around every SQLite step and, while the event loop is busy, waits this long to resume
# (measured with bench/load.py, 20 connections: commit transactions 10-14 ms at 5 ms, 4.5-4.9 ms at 0.2 ms)
WRITER_SWITCH_INTERVAL_SECS = 0.0002

COMMIT_ANSWER_MARGIN_SECS = 0.05  # a commit still running this long before its deadline is answered 408

OUTCOME_UNKNOWN = (
    "request exceeded its budget while its write was being made durable; the write may still be applied: "
    "read it back before retrying"
)


class _CollectorPause:
    """Counts the holders of `collector_paused`; the collector is switched back on when the last one leaves."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.was_enabled = False


_PAUSE = _CollectorPause()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while held (by any thread): for work that allocates hundreds of thousands
    of cycle-free objects (a load, an import, an audit's result, a rebuilt context), whose collections would
    hold the interpreter lock, and so the event loop, for hundreds of milliseconds. Holders may overlap: the
    collector comes back on when the last one leaves (a plain disable/enable pair would end another's pause)."""
    with _PAUSE.lock:
        if _PAUSE.holders == 0:
            _PAUSE.was_enabled = gc.isenabled()
            gc.disable()
        _PAUSE.holders += 1
    try:
        yield
    finally:
        with _PAUSE.lock:
            _PAUSE.holders -= 1
            if _PAUSE.holders == 0 and _PAUSE.was_enabled:
                gc.enable()


class Flights:
    """The writes in flight on the writer thread: the contexts each writes, and its outcome once settled."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._open: dict[int, tuple[frozenset[str], bool, asyncio.Future[BaseException | None]]] = {}

    def start(self, names: set[str], exclusive: bool) -> tuple[int, asyncio.Future[BaseException | None]]:
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        fid = next(self._ids)
        self._open[fid] = (frozenset(names), exclusive, done)
        return fid, done

    def finish(self, fid: int, exc: BaseException | None) -> None:
        entry = self._open.pop(fid, None)
        if entry is not None and not entry[2].done():
            entry[2].set_result(exc)

    def __bool__(self) -> bool:
        return bool(self._open)

    async def settled(self, name: str | None) -> None:
        """Wait for the flights open now that write `name` (every flight when None)."""
        for names, _exclusive, done in list(self._open.values()):
            if name is None or name in names:
                await asyncio.shield(done)

    async def exclusive_settled(self) -> None:
        """Wait for the exclusive flights open now (the next write section may not begin before them)."""
        for _names, exclusive, done in list(self._open.values()):
            if exclusive:
                await asyncio.shield(done)


def merged(a: Dirty, b: Dirty) -> Dirty:
    """Every record either dirty set names (what a refused commit and the writes behind it re-read)."""
    return Dirty(
        min(a.concepts_from, b.concepts_from),
        min(a.labels_from, b.labels_from),
        min(a.sources_from, b.sources_from),
        min(a.edges_from, b.edges_from),
        a.edges | b.edges,
        {**a.aliases, **b.aliases},
        a.passages | b.passages,
        a.meta or b.meta,
        a.vectors | b.vectors,
        a.events + b.events,
    )
