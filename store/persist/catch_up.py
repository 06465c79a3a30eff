"""Several processes over one store: the registry catching up with the change log others write."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

from taguru_server.store.model.context import Context, Dirty, Meta
from taguru_server.store.model.sync import apply_rows
from taguru_server.store.persist.groups import GroupRecord
from taguru_server.store.persist.persistence import Persistence


class CatchUp:
    """The registry's part in a store several processes serve: applying what the others committed.

    Each read first applies the change-log rows other processes wrote since the last one (their
    records, not whole contexts); a context whose history was pruned is evicted and loaded afresh.
    """

    persistence: Persistence
    shared: bool
    eventual: bool
    groups: dict[str, GroupRecord]
    unreadable: set[str]
    directory_unreadable: bool
    on_directory: Callable[[], None] | None
    _applied: int
    _quiesced: int
    _holding_lock: bool
    _still: asyncio.Event
    _known: dict[str, tuple[int, Meta]]
    _loaded: dict[str, Context]

    def adopt(self, ctx: Context, seq: int) -> bool:
        """Hold a context `read_context` returned, unless it was loaded, dropped or replaced meanwhile.

        In shared mode the changes applied while it was read are applied to it again (applying
        durable rows is idempotent); if the change log no longer reaches back that far it is not
        held (the next request loads it).
        """
        known = self._known.get(ctx.name)
        if ctx.name in self._loaded or known is None or known[0] != ctx.cid:
            return False
        if self.shared and self._applied > seq:
            oldest, rows = self.persistence.changes_after(seq)
            if rows and oldest > seq + 1:
                return False
            whats = [what for at, cid, what in rows if cid == ctx.cid and at <= self._applied]
            if any(w.get(k) for w in whats for k in ("deleted", "renamed", "reload")):
                return False  # dropped, renamed or rebuilt whole since it was read: load it afresh
            if whats:
                self._apply(ctx, whats)
        self._loaded[ctx.name] = ctx
        gc.freeze()  # as in `get`: a preloaded context must not be re-scanned by the first full collection
        return True

    def _note_own(self, seq: int | None) -> None:
        """Our own commit is applied already: in a write section every seq before it was applied too."""
        if seq is not None and self.shared:
            self._applied = max(self._applied, seq)

    def catch_up_for_read(self) -> None:
        """Before a read: catch up, unless reads were configured to be eventually consistent."""
        if not self.eventual:
            self.catch_up()

    async def before_read(self) -> None:
        """`catch_up_for_read`, first waiting out a quiesce if other processes committed meanwhile.

        So a read still sees every write acknowledged before it started, and waits only when there is
        something to apply that a thread reading the loaded contexts must not see change under it.
        """
        if self.eventual or not self.shared:
            return
        if self._quiesced and self.persistence.latest_change() != self._applied:
            await self._still.wait()
        self.catch_up()

    def catch_up(self) -> None:
        """Apply the changes other processes committed since the last call: their records, not whole contexts.

        Costs one indexed read when nothing changed. A context whose history was pruned from the
        change log before it was applied is evicted (the next request loads it whole, unless
        `on_directory` has it loaded in the background first).
        """
        if not self.shared or self._quiesced or self._holding_lock:
            return  # (while quiesced, the next catch-up after it applies everything)
        if self.persistence.latest_change() == self._applied:
            return
        if self._catch_up() and self.on_directory is not None:
            self.on_directory()

    def _catch_up(self) -> bool:
        """`catch_up`'s work; True when the directory of contexts was re-read."""
        oldest, rows = self.persistence.changes_after(self._applied)
        if not rows:
            return False
        gap = oldest > self._applied + 1
        touched, directory, groups = _by_context(rows)
        directory = directory or gap
        groups = groups or gap
        by_cid = {ctx.cid: ctx for ctx in self._loaded.values()}
        for cid, whats in touched.items():
            # deleted (maybe recreated under the same id), renamed, or rebuilt whole (compacted, its ids
            # reassigned): forget it; the next request loads it under its current name
            if cid in by_cid and any(w.get(k) for w in whats for k in ("deleted", "renamed", "reload")):
                self._loaded.pop(by_cid.pop(cid).name, None)
        directory = directory or any(cid not in by_cid for cid in touched)  # unloaded: refresh their metadata
        if directory:
            self._known = {name: (cid, meta) for cid, name, meta in self.persistence.list_contexts()}
            self.directory_unreadable = False
            self.unreadable &= set(self._known)  # a dropped context is no longer a failing one
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
        if groups:
            self.groups = self.persistence.list_groups()
        self._applied = rows[-1][0]
        return directory

    def _apply(self, ctx: Context, whats: list[dict[str, Any]]) -> None:
        """Apply another process's change-log rows to a loaded context (its vectors too, after a refresh)."""
        apply_rows(ctx, self.persistence.durable_rows(ctx.cid, _wanted(ctx, whats)))
        if any(w.get("vectors") for w in whats):
            ctx.vectors = self.persistence.load_vectors(ctx.cid)
        self._known[ctx.name] = (ctx.cid, ctx.meta)


def _by_context(
    rows: list[tuple[int, int, dict[str, Any]]],
) -> tuple[dict[int, list[dict[str, Any]]], bool, bool]:
    """Change-log rows by context id; whether a context was created or deleted; whether groups changed."""
    touched: dict[int, list[dict[str, Any]]] = {}
    directory = groups = False
    for _seq, cid, what in rows:
        groups = groups or bool(what.get("groups"))
        if cid == 0:  # a group write (no context has id 0)
            continue
        touched.setdefault(cid, []).append(what)
        directory = directory or any(what.get(k) for k in ("created", "deleted", "renamed", "reload"))
    return touched, directory, groups


def _wanted(ctx: Context, whats: list[dict[str, Any]]) -> Dirty:
    """The records a context must re-read for the given change-log rows: theirs, plus whatever is new."""
    n_edges = len(ctx.edges.subject)
    wanted = Dirty(len(ctx.concepts), len(ctx.labels), len(ctx.sources), n_edges)
    for what in whats:
        wanted.edges.update(e for e in what.get("edges", ()) if e < n_edges)
        for kind, alias in what.get("aliases", ()):
            wanted.aliases[(kind, alias)] = None
        wanted.passages.update(what.get("passages", ()))
    return wanted
