"""The set of contexts: lazy loading from persistence, creation, deletion, commits."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol

from taguru_server.store.context import Context, Dirty, Meta
from taguru_server.store.errors import ApiError, StorageFailed
from taguru_server.store.feed import FeedPage
from taguru_server.store.sync import DurableRows, apply_rows
from taguru_server.store.vectors import ContextVectors


class Persistence(Protocol):
    """What a durable backend provides; SQLite is the embedded default."""

    def list_contexts(self) -> list[tuple[int, str, Meta]]: ...
    def next_id(self) -> int: ...
    def load(self, cid: int, name: str, meta: Meta) -> Context: ...
    def commit(self, contexts: Iterable[Context]) -> int | None: ...
    def delete(self, cid: int) -> int: ...
    def durable_rows(self, cid: int, wanted: Dirty) -> DurableRows: ...
    def load_vectors(self, cid: int) -> ContextVectors: ...
    def feed_page(self, cid: int, after: int, limit: int) -> FeedPage: ...
    def latest_change(self) -> int: ...
    def changes_after(self, seq: int) -> tuple[int, list[tuple[int, int, dict[str, Any]]]]: ...
    def try_lock_writes(self) -> bool: ...
    def unlock_writes(self) -> None: ...
    def close(self) -> None: ...


class CommitFailed(Exception):
    """The backend refused a commit; the touched contexts were brought back to their durable state."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind  # `storage_full` or `unavailable`


class Registry:
    """Every context by name; reads are served from the loaded in-memory state."""

    def __init__(self, persistence: Persistence, shared: bool = False) -> None:
        self.persistence = persistence
        # several processes serve this store: each read first applies what the others committed
        # (`catch_up`), and each write runs in a write section holding the store's lock
        self.shared = shared
        self.eventual = False  # TAGURU_READ_CONSISTENCY=eventual: reads skip the check (NOTIFY keeps them close)
        self._applied = persistence.latest_change() if shared else 0
        self._section = asyncio.Lock()
        self._known: dict[str, tuple[int, Meta]] = {
            name: (cid, meta) for cid, name, meta in persistence.list_contexts()
        }
        self._loaded: dict[str, Context] = {}
        self._next_id = persistence.next_id()
        self.write_failing = False  # the last commit failed; cleared by the next one that succeeds
        self.load_failed = False  # a context could not be read back from the store since boot

    def problem(self) -> str | None:
        """Why the store is not healthy, in words that name nothing stored, or None."""
        if self.load_failed:
            return "a context could not be read from the store (damaged?); the server log has details"
        if self.write_failing:
            return "the store is refusing writes (read-only, failing or full disk?); reads keep working"
        return None

    def names(self) -> list[str]:
        return sorted(set(self._known) | set(self._loaded))

    def loaded_names(self) -> list[str]:
        """The contexts held in memory now, by name."""
        return sorted(self._loaded)

    def exists(self, name: str) -> bool:
        return name in self._loaded or name in self._known

    def get(self, name: str) -> Context | None:
        ctx = self._loaded.get(name)
        if ctx is not None:
            return ctx
        known = self._known.get(name)
        if known is None:
            return None
        try:
            ctx = self.persistence.load(known[0], name, known[1])
        except Exception:
            self.load_failed = True
            raise
        self._loaded[name] = ctx
        # A loaded context is millions of long-lived objects without reference cycles (dropped, it
        # is freed by reference counting): kept out of the collector's full passes, which would
        # otherwise stop a request for hundreds of milliseconds to re-scan them.
        gc.freeze()
        return ctx

    def cid_of(self, name: str) -> int | None:
        """The id of a durable context without loading it, or None."""
        known = self._known.get(name)
        return known[0] if known is not None else None

    def known_meta(self, name: str) -> Meta | None:
        """The metadata of a context, loaded or not (its usage counters included)."""
        ctx = self._loaded.get(name)
        if ctx is not None:
            return ctx.meta
        known = self._known.get(name)
        return known[1] if known is not None else None

    def create(self, name: str, meta: Meta) -> Context:
        """A new context in memory, written by the next commit that names it."""
        ctx = Context(self._next_id, name, meta)
        self._next_id += 1
        ctx.created = True
        self._loaded[name] = ctx
        return ctx

    def delete(self, name: str) -> bool:
        ctx = self.get(name)
        if ctx is None:
            return False
        if not ctx.created:
            try:
                self._note_own(self.persistence.delete(ctx.cid))
            except Exception as exc:
                self.write_failing = True
                raise CommitFailed(str(exc), _kind(exc)) from exc
            self.write_failing = False
        self._loaded.pop(name, None)
        self._known.pop(name, None)
        return True

    def commit(self, contexts: Iterable[Context]) -> None:
        """Make the contexts' pending changes durable, or roll memory back to the store."""
        todo = list(dict.fromkeys(contexts))
        try:
            self._note_own(self.persistence.commit(todo))
        except Exception as exc:
            self.write_failing = True
            self.rollback(todo)
            raise CommitFailed(str(exc), _kind(exc)) from exc
        self.write_failing = False
        for ctx in todo:
            self._known[ctx.name] = (ctx.cid, ctx.meta)

    def rollback(self, contexts: Iterable[Context]) -> None:
        """Forget uncommitted changes: re-read exactly the records each context's dirty set names.

        A context that was never committed is dropped; one whose rows cannot be read back is
        evicted (the next request loads it whole, or reports the store as damaged).
        """
        for ctx in dict.fromkeys(contexts):
            if ctx.created:
                self._loaded.pop(ctx.name, None)
                continue
            try:
                vectors = bool(ctx.dirty.vectors)
                apply_rows(ctx, self.persistence.durable_rows(ctx.cid, ctx.dirty))
                if vectors:  # a refresh whose commit failed: back to the stored vectors
                    ctx.vectors = self.persistence.load_vectors(ctx.cid)
            except Exception:
                self._loaded.pop(ctx.name, None)
        try:
            self._known = {name: (cid, meta) for cid, name, meta in self.persistence.list_contexts()}
        except Exception:
            # the directory could not be re-read: keep the last durable one (uncommitted names were never in it)
            self.load_failed = True

    def close(self) -> None:
        self.persistence.close()

    # ----- several processes over one store ----------------------------------------------------

    def _note_own(self, seq: int | None) -> None:
        """Our own commit is applied already: in a write section every seq before it was applied too."""
        if seq is not None and self.shared:
            self._applied = max(self._applied, seq)

    def catch_up_for_read(self) -> None:
        """Before a read: catch up, unless reads were configured to be eventually consistent."""
        if not self.eventual:
            self.catch_up()

    def catch_up(self) -> None:
        """Apply the changes other processes committed since the last call: their records, not whole contexts.

        Costs one indexed read when nothing changed. A context whose history was pruned from the
        change log before it was applied is evicted (the next request loads it whole).
        """
        if not self.shared or self.persistence.latest_change() == self._applied:
            return
        oldest, rows = self.persistence.changes_after(self._applied)
        if not rows:
            return
        gap = oldest > self._applied + 1
        directory = gap
        touched: dict[int, list[dict[str, Any]]] = {}
        for _seq, cid, what in rows:
            touched.setdefault(cid, []).append(what)
            directory = directory or bool(what.get("created") or what.get("deleted"))
        by_cid = {ctx.cid: ctx for ctx in self._loaded.values()}
        for cid, whats in touched.items():  # deleted (and maybe recreated under the same id): forget it
            if any(w.get("deleted") for w in whats) and cid in by_cid:
                self._loaded.pop(by_cid.pop(cid).name, None)
        directory = directory or any(cid not in by_cid for cid in touched)  # unloaded: refresh their metadata
        if directory:
            self._known = {name: (cid, meta) for cid, name, meta in self.persistence.list_contexts()}
            for name, loaded in list(self._loaded.items()):
                known = self._known.get(name)
                if known is None or known[0] != loaded.cid or gap:
                    del self._loaded[name]
                    by_cid.pop(loaded.cid, None)
        for cid, whats in touched.items():
            ctx = by_cid.get(cid)
            if ctx is None or any(w.get("deleted") for w in whats):
                continue
            self._apply(ctx, whats)
        self._applied = rows[-1][0]

    def _apply(self, ctx: Context, whats: list[dict[str, Any]]) -> None:
        """Apply another process's change-log rows to a loaded context (its vectors too, after a refresh)."""
        apply_rows(ctx, self.persistence.durable_rows(ctx.cid, _wanted(ctx, whats)))
        if any(w.get("vectors") for w in whats):
            ctx.vectors = self.persistence.load_vectors(ctx.cid)
        self._known[ctx.name] = (ctx.cid, ctx.meta)

    @contextlib.asynccontextmanager
    async def write_section(self, deadline: float) -> AsyncIterator[None]:
        """Hold the store's write lock (every process) around one write, caught up first.

        Ids are positions assigned in memory, so a process may only mutate a context once it has
        applied every change before its own; the lock makes that the state until its commit. The
        lock is polled, so the event loop keeps serving reads while another process writes.
        """
        if not self.shared:
            yield
            return
        async with self._section:
            while not self.persistence.try_lock_writes():
                if time.monotonic() > deadline:
                    raise timed_out_waiting()
                await asyncio.sleep(0.002)
            try:
                self.catch_up()
                self._next_id = max(self._next_id, self.persistence.next_id())
                yield
            finally:
                self.persistence.unlock_writes()


def _wanted(ctx: Context, whats: list[dict[str, Any]]) -> Dirty:
    """The records a context must re-read for the given change-log rows: theirs, plus whatever is new."""
    n_edges = len(ctx.e_s)
    wanted = Dirty(len(ctx.concepts), len(ctx.labels), len(ctx.sources), n_edges)
    for what in whats:
        wanted.edges.update(e for e in what.get("edges", ()) if e < n_edges)
        for kind, alias in what.get("aliases", ()):
            wanted.aliases[(kind, alias)] = None
        wanted.passages.update(what.get("passages", ()))
    return wanted


def timed_out_waiting() -> ApiError:
    return ApiError("timeout", "request exceeded its budget waiting for another worker's write; retry shortly")


def _kind(exc: Exception) -> str:
    return exc.kind if isinstance(exc, StorageFailed) else "unavailable"
