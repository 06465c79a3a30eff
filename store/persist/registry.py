"""The set of contexts: lazy loading from persistence, creation, deletion, commits."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import attrs

from taguru_server.store.errors import ApiError, Code, StorageFailed
from taguru_server.store.model.context import Context, Dirty, Meta
from taguru_server.store.model.sync import apply_rows
from taguru_server.store.persist.catch_up import CatchUp
from taguru_server.store.persist.groups import GroupRecord, context_renamed, without_context
from taguru_server.store.persist.persistence import Persistence
from taguru_server.store.persist.writer import COMMIT_ANSWER_MARGIN_SECS, OUTCOME_UNKNOWN, WRITER, Flights, T, merged

# pauses between attempts of a background load that met a concurrent commit (seconds; about 8 s in all)
LOAD_PAUSES = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)


class CommitFailed(Exception):
    """The backend refused a commit; the touched contexts were brought back to their durable state."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind  # `storage_full` or `unavailable`


class Registry(CatchUp):
    """Every context by name; reads are served from the loaded in-memory state."""

    def __init__(
        self, persistence: Persistence, shared: bool = False, warm: Callable[[Context], None] = Context.seal_indexes
    ) -> None:
        self.persistence = persistence
        # what builds a loaded context's read-side indexes up front, rather than in its first request
        # (the server hands in the read lanes' `warm`; by default only the context's own indexes)
        self.warm = warm
        # several processes serve this store: each read first applies what the others committed
        # (`catch_up`), and each write runs in a write section holding the store's lock
        self.shared = shared
        self.eventual = False  # TAGURU_READ_CONSISTENCY=eventual: reads skip the check (NOTIFY keeps them close)
        self._applied = persistence.latest_change() if shared else 0
        self._flushed = persistence.latest_change()  # `flushed`: the change-log position of the last flush
        self._section = asyncio.Lock()
        self._known: dict[str, tuple[int, Meta]] = {
            name: (cid, meta) for cid, name, meta in persistence.list_contexts()
        }
        self._loaded: dict[str, Context] = {}
        self._next_id = persistence.next_id()
        # every group by name, as stored (a write replaces entries only once it is durable)
        self.groups: dict[str, GroupRecord] = persistence.list_groups()
        self.write_failing = False  # the last commit failed; cleared by the next one that succeeds
        # contexts whose last load failed on a quiet store (no commit during the attempt), by name;
        # a later load that succeeds clears its entry
        self.unreadable: set[str] = set()
        self.directory_unreadable = False  # the list of contexts could not be re-read; cleared by the next read
        # the writes submitted to the writer thread and not yet settled (`store.persist.writer`)
        self.flights = Flights()
        self._refusals = 0  # commit groups refused so far: a commit queued behind a refusal is refused too
        self._queued: list[_Queued] = []  # prepared commits waiting for the next group
        self._draining = False  # a group is being committed on the writer thread
        # `quiesced` holders (a thread reads loaded contexts): catch-ups wait; `_still` is set when there are none
        self._quiesced = 0
        # this process holds the store's write lock (caught up when it took it): no other process can
        # commit until it is released, so any change-log row newer than `_applied` is one of our own
        # writes still running in the writer thread, which updates memory itself; catch-ups wait
        self._holding_lock = False
        self._still = asyncio.Event()
        self._still.set()
        # called after a catch-up changed the directory (another process created or dropped a context),
        # so contexts can be loaded in the background rather than by the first request that names them
        self.on_directory: Callable[[], None] | None = None

    def flushed(self) -> list[str]:
        """The contexts written (by any process) since this process's previous flush, in name order; every
        one of those writes was already durable at its commit, so a flush only moves the mark."""
        latest, ids = self.persistence.contexts_changed_after(self._flushed)
        self._flushed = latest
        names = {cid: name for name, (cid, _meta) in self._known.items()}
        names.update({ctx.cid: name for name, ctx in self._loaded.items()})
        return sorted(names[cid] for cid in ids if cid in names)

    def problem(self) -> str | None:
        """Why the store is not healthy, in words that name nothing stored, or None."""
        if self.load_failed:
            return "a context could not be read from the store (damaged?); the server log has details"
        if self.write_failing:
            return "the store is refusing writes (read-only, failing or full disk?); reads keep working"
        return None

    @property
    def load_failed(self) -> bool:
        """A context (or the directory of contexts) could not be read back from a quiet store."""
        return bool(self.unreadable) or self.directory_unreadable

    def names(self) -> list[str]:
        return sorted(set(self._known) | set(self._loaded))

    def loaded_names(self) -> list[str]:
        """The contexts held in memory now, by name."""
        return sorted(self._loaded)

    def is_loaded(self, name: str) -> bool:
        return name in self._loaded

    def unloaded_names(self) -> list[str]:
        """The durable contexts not held in memory now, by name."""
        return sorted(name for name in self._known if name not in self._loaded)

    def read_context(self, name: str) -> tuple[Context, int] | None:
        """A context read whole from the store without holding it (safe off the event loop), or None if unknown.

        Also returns the change-log position of the snapshot it was read in, for `adopt`. The load
        runs on a connection of its own; an attempt that fails while other processes commit is
        retried after a pause (LOAD_PAUSES). The context is reported unreadable only when an
        attempt fails on a quiet store (the change log did not move during it) twice, or every
        attempt failed; a later load that succeeds clears that.
        """
        quiet_failures = 0
        for pause in (*LOAD_PAUSES, None):
            known = self._known.get(name)
            if known is None:
                return None
            before: int | None = None
            try:
                before = self.persistence.position()
                ctx, seq = self.persistence.load(known[0], name, self._meta_to_load(known[1]))
                self.warm(ctx)
            except Exception:
                quiet_failures += self._quiet_since(before)
                if pause is None or quiet_failures >= 2:
                    self.unreadable.add(name)
                    raise
                time.sleep(pause)
                continue
            self.unreadable.discard(name)
            return ctx, seq
        raise AssertionError("unreachable")  # pragma: no cover - the last pause is None

    def _quiet_since(self, before: int | None) -> int:
        """1 if the change log is still at `before` (nothing committed during a failed attempt), else 0."""
        if before is None:
            return 1  # the store could not even be asked for its position
        try:
            return int(self.persistence.position() == before)
        except Exception:
            return 1

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
            ctx, _seq = self.persistence.load(known[0], name, self._meta_to_load(known[1]))
            self.warm(ctx)
        except Exception:
            self.unreadable.add(name)
            raise
        self.unreadable.discard(name)
        self._loaded[name] = ctx
        # A loaded context is millions of long-lived objects without reference cycles (dropped, it
        # is freed by reference counting): kept out of the collector's full passes, which would
        # otherwise stop a request for hundreds of milliseconds to re-scan them.
        gc.freeze()
        return ctx

    def _meta_to_load(self, known: Meta) -> Meta | None:
        """The metadata a load starts from: ours, or (other processes write too) the snapshot's own."""
        return None if self.shared else known

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
        self.unreadable.discard(name)
        self.groups.update(without_context(self.groups, name))  # the store swept it in the same transaction
        return True

    def write_groups(self, upserts: dict[str, GroupRecord], deletes: Iterable[str] = ()) -> None:
        """Make a group change durable (one transaction), then hold it in memory; CommitFailed otherwise."""
        gone = list(deletes)
        self._group_write(lambda: self.persistence.write_groups(upserts, gone))
        for name in gone:
            self.groups.pop(name, None)
        self.groups.update(upserts)

    def rename_context_in_groups(self, old: str, new: str) -> None:
        """A renamed context: every group naming `old` names `new` (durable, then in memory).

        A context rename that commits in its own transaction should instead call
        `rows.rename_in_groups` inside it and then `note_groups_changed`.
        """
        self._group_write(lambda: self.persistence.rename_context_in_groups(old, new))
        self.groups.update(context_renamed(self.groups, old, new))

    def _group_write(self, write: Callable[[], int | None]) -> None:
        """Run one durable group write and note its change-log row; CommitFailed (`write_failing`) if refused."""
        try:
            self._note_own(write())
        except Exception as exc:
            self.write_failing = True
            raise CommitFailed(str(exc), _kind(exc)) from exc
        self.write_failing = False

    def note_groups_changed(self) -> None:
        """Re-read the groups from the store (after a transaction that rewrote them elsewhere)."""
        self.groups = self.persistence.list_groups()

    def rename(self, name: str, to: str) -> bool:
        """Move a durable context to a free name in one transaction; False when `name` is unknown.

        The in-memory context moves with it (its read caches dropped); the change feed starts a new
        epoch under `to`; a derived artifact (`{name}::communities`) keeps its own name.
        """
        ctx = self._loaded.get(name)
        cid = ctx.cid if ctx is not None else self.cid_of(name)
        if cid is None:
            return False
        try:
            self._note_own(self.persistence.rename(cid, name, to))
        except Exception as exc:
            self.write_failing = True
            raise CommitFailed(str(exc), _kind(exc)) from exc
        self.write_failing = False
        self.groups.update(context_renamed(self.groups, name, to))  # the store rewrote them in the same transaction
        known = self._known.pop(name, None)
        if ctx is not None:
            self._loaded.pop(name, None)
            ctx.name = to
            ctx.read_cache.clear()
            self._loaded[to] = ctx
            self._known[to] = (cid, ctx.meta)
        elif known is not None:
            self._known[to] = known
        return True

    def replace(self, ctx: Context) -> None:
        """Make a rebuilt context (same id and name) durable whole and serve it; on a refusal the old one stays."""
        try:
            self._note_own(self.persistence.replace(ctx))
        except Exception as exc:
            self.write_failing = True
            raise CommitFailed(str(exc), _kind(exc)) from exc
        self.write_failing = False
        self._loaded[ctx.name] = ctx
        self._known[ctx.name] = (ctx.cid, ctx.meta)

    def commit(self, contexts: Iterable[Context]) -> None:
        """Make the contexts' pending changes durable, or roll memory back to the store."""
        todo = self._held(contexts)
        try:
            seq = self.persistence.commit(todo)
        except Exception as exc:
            self._refused(todo)
            raise CommitFailed(str(exc), _kind(exc)) from exc
        self._committed(todo, seq)

    async def commit_off_loop(self, contexts: Iterable[Context], deadline: float) -> None:
        """`commit` in the writer thread, so a slow disk (fsync) never stalls the event loop.

        While it runs, reads of the contexts it writes wait for it (`settled`), so no read sees a
        change that is not durable yet; every other request goes on. Past `deadline` the running
        statement is interrupted and the write answered 408 with its outcome unknown (it is undone
        unless its commit had already reached the disk); never 200 after the deadline.
        """
        todo = self._held(contexts)
        await self._in_writer(
            {ctx.name for ctx in todo},
            lambda: self.persistence.commit(todo),
            lambda seq: self._committed(todo, seq),
            lambda: self._refused(todo),
            deadline,
        )

    async def replace_off_loop(self, ctx: Context, deadline: float) -> None:
        """`replace` in the writer thread (a compaction's whole-context transaction); as `commit_off_loop`."""

        def replaced(seq: int | None) -> None:
            self._note_own(seq)
            self.write_failing = False
            self._loaded[ctx.name] = ctx
            self._known[ctx.name] = (ctx.cid, ctx.meta)

        def refused() -> None:
            self.write_failing = True

        await self._in_writer({ctx.name}, lambda: self.persistence.replace(ctx), replaced, refused, deadline)

    def submit_commit(self, contexts: Iterable[Context]) -> asyncio.Future[BaseException | None] | None:
        """Take the contexts' pending changes now and queue their commit on the writer thread (one process only).

        Returns the commit's outcome (None once durable, else the refusal), or None when nothing was
        dirty. The event loop may change the contexts again at once: the next commit is prepared and
        queued behind this one, and the commits queued while one transaction syncs share the next
        (group commit). Reads of the contexts wait for theirs (`settled`). A refused commit, and every
        commit queued behind it (their rows hold its changes), is undone in memory as in the store.
        """
        todo = self._held(contexts)
        taken = [(ctx, ctx.dirty, ctx.created) for ctx in todo]
        writes = self.persistence.prepare_commit(todo)
        if not writes:
            self._committed(todo, None)
            return None
        fid, done = self.flights.start({ctx.name for ctx in todo}, exclusive=False)
        self._queued.append(_Queued(writes, todo, taken, fid, self._refusals))
        if not self._draining:
            self._drain()
        return done

    def _drain(self) -> None:
        """Commit every queued commit in one transaction on the writer thread; settle them on the loop after."""
        stale = [q for q in self._queued if q.refusals != self._refusals]  # behind a refusal: refused too
        group = [q for q in self._queued if q.refusals == self._refusals]
        self._queued = []
        for q in stale:
            self._settle_queued(q, CommitFailed("an earlier write was refused and this one holds its changes"))
        if not group:
            self._draining = False
            return
        self._draining = True
        writes = [w for q in group for w in q.writes]

        def settle(running: concurrent.futures.Future[int]) -> None:  # on the loop
            exc = running.exception()
            if exc is not None:
                self._refusals += 1
            for q in group:
                self._settle_queued(q, exc, None if exc is not None else running.result())
            self._drain()  # what was queued meanwhile

        # the writer thread hands the outcome straight to the loop (one pass of the loop, not a chain of futures)
        loop = asyncio.get_running_loop()
        running = WRITER.submit(self.persistence.run_prepared, writes)
        running.add_done_callback(lambda f: loop.call_soon_threadsafe(settle, f))

    def _settle_queued(self, q: _Queued, exc: BaseException | None, seq: int | None = None) -> None:
        if exc is None:
            self._committed(q.todo, seq)
        else:
            self.write_failing = True
            for ctx, dirty, created in q.taken:
                ctx.dirty = merged(dirty, ctx.dirty)
                ctx.created = ctx.created or created
            self.rollback(q.todo)
        self.flights.finish(q.fid, exc)

    async def outcome(self, done: asyncio.Future[BaseException | None], deadline: float) -> None:
        """Wait for a submitted commit until just before `deadline`: CommitFailed if refused, 408 if still running."""
        if not done.done():
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()

            def wake(*_: object) -> None:
                if not waiter.done():
                    waiter.set_result(None)

            timer = loop.call_at(deadline - COMMIT_ANSWER_MARGIN_SECS, wake)
            done.add_done_callback(wake)
            try:
                await waiter
            finally:
                timer.cancel()
                done.remove_done_callback(wake)
            if not done.done():
                raise ApiError(Code.TIMEOUT, OUTCOME_UNKNOWN)
        exc = done.result()
        if exc is not None:
            raise exc if isinstance(exc, CommitFailed) else CommitFailed(str(exc), _kind(exc)) from exc

    def _exclusive(
        self,
        names: set[str],
        work: Callable[[], T],
        settle: Callable[[BaseException | None, T | None], None] | None = None,
    ) -> tuple[asyncio.Future[T], asyncio.Future[BaseException | None]]:
        """Submit `work` to the writer thread as an exclusive flight over `names`, in a copy of the caller's context
        variables; `settle(exc, result)` runs on the loop when it ends, before the flight is finished."""
        loop = asyncio.get_running_loop()
        fid, done = self.flights.start(names, exclusive=True)

        def finish(running: asyncio.Future[T]) -> None:
            exc = None if running.cancelled() else running.exception()
            if settle is not None:
                settle(exc, None if exc is not None else running.result())
            self.flights.finish(fid, exc)

        running = loop.run_in_executor(WRITER, contextvars.copy_context().run, work)
        running.add_done_callback(finish)
        return running, done

    async def _in_writer(
        self,
        names: set[str],
        work: Callable[[], int | None],
        landed: Callable[[int | None], None],
        refused: Callable[[], None],
        deadline: float,
    ) -> None:
        """Run a write transaction in the writer thread (exclusive); `landed`/`refused` run on the loop once settled.

        Past its deadline (less the answer's margin) the running statement is interrupted and the write is
        answered 408 with its outcome unknown, as `outcome` words it.
        """
        await self.settled(None)  # queued commits first (their rollback, if refused, runs on the loop)

        def settle(exc: BaseException | None, seq: int | None) -> None:
            if exc is None:
                landed(seq)
            else:
                refused()

        _running, done = self._exclusive(names, work, settle)
        try:
            await self.outcome(done, deadline)
        except (ApiError, asyncio.CancelledError):
            interrupt = getattr(self.persistence, "interrupt", None)
            if interrupt is not None and not done.done():  # PostgreSQL's cancel is a round trip: not on the loop
                asyncio.get_running_loop().run_in_executor(None, interrupt)
            raise

    async def apply_off_loop(self, names: set[str], work: Callable[[], T]) -> T:
        """Run a whole write (an import's batches, with their commits) in the writer thread, inside the caller's
        write section (exclusive); reads of `names` (and reads naming no context) wait for it.

        If the caller is cancelled (its deadline), the work runs on to its own end, and the next write
        section waits for it.
        """
        await self.settled(None)  # queued commits first: a refused one's rollback must not meet this work
        running, _done = self._exclusive(names, work)
        return await asyncio.shield(running)

    def _unlock_in_writer(self) -> None:
        """Leave the write section in the writer thread, after what runs there (one thread per connection)."""

        def released(_exc: BaseException | None, _result: None) -> None:
            self._holding_lock = False

        self._exclusive(set(), self.persistence.unlock_writes, released)

    async def settled(self, name: str | None) -> None:
        """Wait for the writes in flight on `name` (on any context when None), so a read sees only durable state."""
        if self.flights:
            await self.flights.settled(name)

    def _held(self, contexts: Iterable[Context]) -> list[Context]:
        todo = list(dict.fromkeys(contexts))
        if any(self._loaded.get(ctx.name) is not ctx for ctx in todo):
            # taken before an await, and since rebuilt (compacted), reloaded or deleted: its rows are not the
            # store's any more, so writing them would undo that change
            raise CommitFailed("the context was rebuilt or removed while this write waited; nothing was applied")
        return todo

    def _committed(self, todo: list[Context], seq: int | None) -> None:
        self._note_own(seq)
        self.write_failing = False
        for ctx in todo:
            self._known[ctx.name] = (ctx.cid, ctx.meta)

    def _refused(self, todo: list[Context]) -> None:
        self.write_failing = True
        self.rollback(todo)

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
            self.directory_unreadable = False
        except Exception:
            # the directory could not be re-read: keep the last durable one (uncommitted names were never in it)
            self.directory_unreadable = True

    def close(self) -> None:
        self.persistence.close(intact=not self.load_failed)

    @contextlib.asynccontextmanager
    async def quiesced(self) -> AsyncIterator[None]:
        """No loaded context of this process changes while held: writes wait, catch-ups are put off.

        For work that reads a whole context in another thread (the audits), so the event loop keeps
        serving while it runs. Reads go on (reads that must apply another process's changes first
        wait, see `before_read`).
        """
        async with self._section:
            await self.settled(None)  # prepared commits do not touch the contexts, but their rollback would
            self._quiesced += 1
            self._still.clear()
            try:
                yield
            finally:
                self._quiesced -= 1
                if not self._quiesced:
                    self._still.set()

    @contextlib.asynccontextmanager
    async def write_section(self, deadline: float) -> AsyncIterator[None]:
        """Hold the store's write lock (every process) around one write, caught up first.

        Ids are positions assigned in memory, so a process may only mutate a context once it has
        applied every change before its own; the lock makes that the state until its commit. The
        lock is polled, so the event loop keeps serving reads while another process writes.
        """
        async with self._section:  # one write at a time in this process (its transaction runs off the loop)
            if not self.shared:
                await self.flights.exclusive_settled()  # e.g. an import that outlived its request's deadline
                yield
                return
            await self.settled(None)  # the loop steps the write connection for the lock: nothing else may
            while not self.persistence.try_lock_writes():
                if time.monotonic() > deadline:
                    raise timed_out_waiting()
                await asyncio.sleep(0.002)
            try:
                self.catch_up()
                self._holding_lock = True
                self._next_id = max(self._next_id, self.persistence.next_id())
                yield
            finally:
                if not self.flights:
                    self.persistence.unlock_writes()
                    self._holding_lock = False
                else:  # a write that outlived its deadline still holds the connection: unlock after it
                    self._unlock_in_writer()


@attrs.frozen
class _Queued:
    """A prepared commit waiting for its group: its writes, contexts, what it took from them, flight, refusal count."""

    writes: list[Callable[[Any], int]]
    todo: list[Context]
    taken: list[tuple[Context, Dirty, bool]]
    fid: int
    refusals: int


def timed_out_waiting() -> ApiError:
    return ApiError(Code.TIMEOUT, "request exceeded its budget waiting for another worker's write; retry shortly")


def _kind(exc: BaseException) -> str:
    return exc.kind if isinstance(exc, StorageFailed) else "unavailable"
