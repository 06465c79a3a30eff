"""The set of contexts: lazy loading from persistence, creation, deletion, commits."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from taguru_server.store.context import Context, Dirty, Meta
from taguru_server.store.errors import StorageFailed
from taguru_server.store.feed import FeedPage
from taguru_server.store.sync import DurableRows, apply_rows


class Persistence(Protocol):
    """What a durable backend provides; SQLite is the embedded default."""

    def list_contexts(self) -> list[tuple[int, str, Meta]]: ...
    def next_id(self) -> int: ...
    def load(self, cid: int, name: str, meta: Meta) -> Context: ...
    def commit(self, contexts: Iterable[Context]) -> None: ...
    def delete(self, cid: int) -> None: ...
    def durable_rows(self, cid: int, wanted: Dirty) -> DurableRows: ...
    def feed_page(self, cid: int, after: int, limit: int) -> FeedPage: ...
    def close(self) -> None: ...


class CommitFailed(Exception):
    """The backend refused a commit; the touched contexts were brought back to their durable state."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind  # `storage_full` or `unavailable`


class Registry:
    """Every context by name; reads are served from the loaded in-memory state."""

    def __init__(self, persistence: Persistence) -> None:
        self.persistence = persistence
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
                self.persistence.delete(ctx.cid)
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
            self.persistence.commit(todo)
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
                apply_rows(ctx, self.persistence.durable_rows(ctx.cid, ctx.dirty))
            except Exception:
                self._loaded.pop(ctx.name, None)
        try:
            self._known = {name: (cid, meta) for cid, name, meta in self.persistence.list_contexts()}
        except Exception:
            # the directory could not be re-read: keep the last durable one (uncommitted names were never in it)
            self.load_failed = True

    def close(self) -> None:
        self.persistence.close()


def _kind(exc: Exception) -> str:
    return exc.kind if isinstance(exc, StorageFailed) else "unavailable"
