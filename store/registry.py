"""The set of contexts: lazy loading from persistence, creation, deletion, commits."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from taguru_server.store.context import Context, Meta


class Persistence(Protocol):
    """What a durable backend provides; SQLite is the embedded default."""

    def list_contexts(self) -> list[tuple[int, str, Meta]]: ...
    def next_id(self) -> int: ...
    def load(self, cid: int, name: str, meta: Meta) -> Context: ...
    def commit(self, contexts: Iterable[Context]) -> None: ...
    def delete(self, cid: int) -> None: ...
    def close(self) -> None: ...


class CommitFailed(Exception):
    """The backend refused a commit; the touched contexts were reloaded from durable state."""


class Registry:
    """Every context by name; reads are served from the loaded in-memory state."""

    def __init__(self, persistence: Persistence) -> None:
        self.persistence = persistence
        self._known: dict[str, tuple[int, Meta]] = {
            name: (cid, meta) for cid, name, meta in persistence.list_contexts()
        }
        self._loaded: dict[str, Context] = {}
        self._next_id = persistence.next_id()

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
        ctx = self.persistence.load(known[0], name, known[1])
        self._loaded[name] = ctx
        return ctx

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
            self.persistence.delete(ctx.cid)
        self._loaded.pop(name, None)
        self._known.pop(name, None)
        return True

    def commit(self, contexts: Iterable[Context]) -> None:
        """Make the contexts' pending changes durable, or roll memory back to the store."""
        todo = list(dict.fromkeys(contexts))
        try:
            self.persistence.commit(todo)
        except Exception as exc:
            self.rollback(todo)
            raise CommitFailed(str(exc)) from exc
        for ctx in todo:
            self._known[ctx.name] = (ctx.cid, ctx.meta)

    def rollback(self, contexts: Iterable[Context]) -> None:
        """Forget uncommitted changes by reloading from durable state."""
        for ctx in contexts:
            self._loaded.pop(ctx.name, None)
        self._known = {name: (cid, meta) for cid, name, meta in self.persistence.list_contexts()}

    def close(self) -> None:
        self.persistence.close()
