"""The rows of a store, whatever the database: what a commit writes, what a load and a catch-up read.

`RowStore` holds every statement both backends share (SQLite, the embedded default, and
PostgreSQL); a backend supplies the connection (`Sql`: `execute`, `executemany`, statements
written with `?` placeholders), its transactions, its write lock and how its errors map onto
`StorageFailed`. The statements use only SQL both dialects read alike (`ON CONFLICT … DO
UPDATE`, `RETURNING`, no collations: every ordering is by integer id).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from taguru_server.store.errors import StorageFailed
from taguru_server.store.index.bm25_snapshot import bm25_path, seal_with_file, trusted_counts, write_rebuilt
from taguru_server.store.index.index_file import drop_context_files, prefetch
from taguru_server.store.index.lexicon_image import index_lexicons, lexicon_image_path, save_lexicons
from taguru_server.store.index.vectors import (
    ContextVectors,
)
from taguru_server.store.model.context import Context, Dirty, Meta
from taguru_server.store.model.passage import Passage
from taguru_server.store.model.sync import DurableRows
from taguru_server.store.persist.edge_image import edges_from_rows, image_path, restore_edges, write_image
from taguru_server.store.persist.feed import FeedPage
from taguru_server.store.persist.groups import GroupRecord, without_context
from taguru_server.store.persist.passage_rows import load_passages, passage_of
from taguru_server.store.persist.row_writes import (
    EVICTED,
    RELOAD,
    attrs_json,
    evict_feed,
    forget_changes,
    log_groups,
    meta_json,
    new_epoch,
    prepared_write,
    put_groups,
    read_groups,
    rename_in_groups,
)
from taguru_server.store.persist.sql import Sql
from taguru_server.store.persist.vector_rows import (
    GLOSS_STORE,
    PASSAGE_STORE,
    VECTOR_TABLES,
    gloss_store_of,
    passage_store_of,
    stored_text,
    write_vectors,
)
from taguru_server.store.persist.writer import collector_paused


class RowStore:
    """The statements every backend shares; subclasses open the connection and own transactions and locks."""

    db: Sql
    ERRORS: tuple[type[BaseException], ...] = ()
    store_id: str = ""
    # where derived indexes are kept (`store.bm25_snapshot`); None: rebuilt from the rows at every load
    index_dir: Path | None = None

    def _tx(self) -> AbstractContextManager[Sql]:
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[Sql]:
        raise NotImplementedError

    def _failed(self, exc: BaseException) -> StorageFailed:
        raise NotImplementedError

    def list_contexts(self) -> list[tuple[int, str, Meta]]:
        rows = self.db.execute("SELECT id, name, meta FROM contexts ORDER BY id").fetchall()
        return [(cid, name, meta_of(meta)) for cid, name, meta in rows]

    def next_id(self) -> int:
        # past every id the change log still names too, so a deleted context's id is not handed out again
        top = self.db.execute("SELECT COALESCE(MAX(id), 0) FROM contexts").fetchone()[0]
        named = self.db.execute("SELECT COALESCE(MAX(ctx), 0) FROM changes").fetchone()[0]
        return int(max(top, named)) + 1

    def delete(self, cid: int) -> int:
        """Drop a context and all its rows; returns the change-log seq of the deletion."""
        try:
            with self._tx() as db:
                for table in ("concepts", "labels", "sources", "aliases", "edges", "passages", "feed", *VECTOR_TABLES):
                    db.execute(f"DELETE FROM {table} WHERE ctx = ?", (cid,))
                db.execute("DELETE FROM feed_epochs WHERE ctx = ?", (cid,))
                row = db.execute("SELECT name FROM contexts WHERE id = ?", (cid,)).fetchone()
                db.execute("DELETE FROM contexts WHERE id = ?", (cid,))
                # no group ever names a missing member: the deletion sweeps it out in the same transaction
                swept = put_groups(db, without_context(read_groups(db), row[0])) if row is not None else False
                touched = '{"deleted":true,"groups":true}' if swept else '{"deleted":true}'
                seq = db.execute(
                    "INSERT INTO changes(ctx, touched) VALUES(?, ?) RETURNING seq", (cid, touched)
                ).fetchone()[0]
                # its earlier change-log rows name its aliases: only the deletion row stays
                forget_changes(db, cid, int(seq), touched)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc
        if self.index_dir is not None:
            try:
                drop_context_files(self.index_dir, cid)
            except OSError:
                pass  # its header names the context: a later context (never this id) would not trust it anyway
        self.purge_freed()  # the deleted rows' old page images leave the write-ahead log too (SQLite)
        return int(seq)

    # ----- groups (one row each; the change log names them with context id 0) ---------------

    def list_groups(self) -> dict[str, GroupRecord]:
        """Every stored group by name."""
        try:
            with self._snapshot() as db:
                return read_groups(db)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc

    def write_groups(self, upserts: dict[str, GroupRecord], deletes: Iterable[str] = ()) -> int:
        """Replace and delete groups in one transaction; returns its change-log seq."""
        try:
            with self._tx() as db:
                for name in deletes:
                    db.execute("DELETE FROM context_groups WHERE name = ?", (name,))
                put_groups(db, upserts)
                return log_groups(db)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc

    def rename_context_in_groups(self, old: str, new: str) -> int | None:
        """Rewrite every group naming context `old` to name `new` (its own transaction); the seq, or None."""
        try:
            with self._tx() as db:
                return rename_in_groups(db, old, new)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc

    def remove_context_from_groups(self, name: str) -> int | None:
        """Sweep context `name` out of every group (its own transaction); the seq, or None when none named it."""
        try:
            with self._tx() as db:
                if not put_groups(db, without_context(read_groups(db), name)):
                    return None
                return log_groups(db)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc

    def rename(self, cid: int, old: str, new: str) -> int:
        """Re-key a context under `new` in one transaction: its feed starts over under a new epoch (old
        cursors answer 410), group membership follows (`rename_in_groups`); returns the change-log seq."""
        try:
            with self._tx() as db:
                db.execute("UPDATE contexts SET name = ? WHERE id = ?", (new, cid))
                db.execute("DELETE FROM feed WHERE ctx = ?", (cid,))
                db.execute(
                    "INSERT INTO feed_epochs VALUES(?, ?) ON CONFLICT(ctx) DO UPDATE SET epoch = excluded.epoch",
                    (cid, new_epoch()),
                )
                rename_in_groups(db, old, new)
                seq = db.execute(
                    "INSERT INTO changes(ctx, touched) VALUES(?, ?) RETURNING seq", (cid, '{"renamed":true}')
                ).fetchone()[0]
        except self.ERRORS as exc:
            raise self._failed(exc) from exc
        return int(seq)

    def replace(self, ctx: Context) -> int:
        """Rewrite every row of a rebuilt (compacted) context in one transaction; no feed event.

        Its ids were reassigned, so other processes reload it whole: its earlier change-log rows
        (which name its aliases) are replaced by one `"reload"` row. A compaction is also how
        retracted content is erased, so the change-feed events held (which name sources and
        concepts) are evicted (`evict_feed`), and its index file (the terms of every paragraph it
        held) is rewritten from the rebuilt context (`write_rebuilt`).
        """
        cid = ctx.cid
        try:
            with self._tx() as db:
                seq = int(
                    db.execute(
                        "INSERT INTO changes(ctx, touched) VALUES(?, ?) RETURNING seq", (cid, RELOAD)
                    ).fetchone()[0]
                )
                forget_changes(db, cid, seq, RELOAD)
                evict_feed(db, cid)
                for table in ("concepts", "labels", "sources", "aliases", "edges", "passages"):
                    db.execute(f"DELETE FROM {table} WHERE ctx = ?", (cid,))
                db.execute("UPDATE contexts SET meta = ? WHERE id = ?", (meta_json(ctx.meta), cid))
                for table, names in (("concepts", ctx.concepts), ("labels", ctx.labels), ("sources", ctx.sources)):
                    if names:
                        db.executemany(
                            f"INSERT INTO {table} VALUES(?, ?, ?)", [(cid, i, n) for i, n in enumerate(names)]
                        )
                if ctx.edges.subject:
                    db.executemany(
                        "INSERT INTO edges VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                        [
                            (
                                cid,
                                e,
                                ctx.edges.subject[e],
                                ctx.edges.label[e],
                                ctx.edges.object[e],
                                ctx.edges.weight[e],
                                ctx.edges.count[e],
                                attrs_json(r) if r else "",
                            )
                            for e, r in enumerate(ctx.edges.attributions)
                        ],
                    )
                order = itertools.count((seq << 32) + 1)
                aliases = [(cid, kind, a, t, next(order)) for kind in (0, 1) for a, t in ctx.aliases[kind].items()]
                if aliases:
                    db.executemany("INSERT INTO aliases VALUES(?, ?, ?, ?, ?)", aliases)
                passages = [
                    (cid, sid, p.text, json.dumps(p.meta_json(), ensure_ascii=False))
                    for sid, p in sorted(ctx.passages.items())
                ]
                if passages:
                    db.executemany("INSERT INTO passages VALUES(?, ?, ?, ?)", passages)
                if ctx.dirty.vectors:
                    write_vectors(db, cid, ctx.vectors, ctx.dirty.vectors)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc
        ctx.mark_clean()
        if self.index_dir is not None:
            identity = {"store": self.store_id, "context": cid, "seq": seq}
            try:
                write_rebuilt(ctx, self.index_dir, identity)
                write_image(ctx, self.index_dir, identity)
            except (OSError, ValueError):
                pass  # an index dir that refuses even the removal: the next load that can write rewrites it
            # the old file names every spelling the context held, erased ones too: rewritten, or removed
            try:
                save_lexicons(ctx.fresh_lexicons(), self.index_dir, cid)
            except (OSError, ValueError):
                lexicon_image_path(self.index_dir, cid).unlink(missing_ok=True)
        return seq

    def purge_freed(self) -> bool:
        """Make deleted content unrecoverable from the store's files; True when that is done (a backend that
        cannot promise it answers False)."""
        return False

    def commit(self, contexts: Iterable[Context]) -> int | None:
        """Write what each context's dirty set names, all in one transaction; returns its last change-log seq."""
        todo = [c for c in contexts if c.dirty.any() or c.created]
        if not todo:
            return None
        writes = [prepared_write(ctx) for ctx in todo]
        seq = self._run_prepared(writes)
        for ctx in todo:
            ctx.mark_clean()
        return seq

    def prepare_commit(self, contexts: Iterable[Context]) -> list[Callable[[Sql], int]]:
        """Take what each context's dirty set names now (and mark the contexts clean): calls that write it over a
        connection, on any thread, reading nothing of the contexts (`run_prepared`); empty when nothing is dirty.

        So commits can run in the writer thread, several in one transaction, while the event loop goes on
        changing the contexts.
        """
        todo = [c for c in contexts if c.dirty.any() or c.created]
        writes = [prepared_write(ctx) for ctx in todo]
        for ctx in todo:
            ctx.mark_clean()
        return writes

    def run_prepared(self, writes: list[Callable[[Sql], int]]) -> int:
        """Run prepared writes in one transaction; returns its last change-log seq."""
        return self._run_prepared(writes)

    def _run_prepared(self, writes: list[Callable[[Sql], int]]) -> int:
        try:
            with self._tx() as db:
                return max(write(db) for write in writes)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc

    # a context's rows by the part of its on-disk family they are: (table, its variable-length columns,
    # its integer and real columns, each counted as 8 bytes where a backend cannot measure a row itself)
    DISK_PARTS: tuple[tuple[str, str, tuple[str, ...], int], ...] = (
        ("image", "concepts", ("name",), 2),
        ("image", "labels", ("name",), 2),
        ("image", "sources", ("name",), 2),
        ("image", "aliases", ("alias",), 4),
        ("image", "edges", ("attrs",), 7),
        ("passages", "passages", ("text", "meta"), 2),
        ("sidecars", "vector_stores", ("model",), 3),
        ("sidecars", "gloss_vectors", ("name", "vec"), 4),
        ("sidecars", "passage_vectors", ("source", "vec"), 5),
    )

    def _row_bytes(self, table: str, columns: tuple[str, ...], numbers: int) -> str:
        """The SQL of a table's row sizes summed over one context (`?`: the context id)."""
        lengths = " + ".join(f"coalesce(length(CAST({c} AS BLOB)), 0)" for c in columns)
        return f"SELECT coalesce(sum({lengths} + {8 * numbers}), 0) FROM {table} WHERE ctx = ?"

    def disk_bytes(self, cid: int) -> dict[str, int]:
        """A context's bytes in the store by part (`image`: its graph rows and meta, `passages`: its passage
        rows, `sidecars`: its vector rows and persisted BM25 index file; no write-ahead parts: a commit is
        durable in place), read on a connection of its own (any thread) in one snapshot."""
        return self.disk_sizes([cid])[cid]

    def disk_sizes(self, cids: Iterable[int]) -> dict[int, dict[str, int]]:
        """`disk_bytes` of several contexts, on one connection of its own in one snapshot."""
        out: dict[int, dict[str, int]] = {}
        try:
            with self._reader() as db:
                for cid in cids:
                    parts = {"image": 0, "passages": 0, "sidecars": 0}
                    for part, table, columns, numbers in self.DISK_PARTS:
                        (size,) = db.execute(self._row_bytes(table, columns, numbers), (cid,)).fetchone()
                        parts[part] += int(size)
                    sql = self._row_bytes("contexts", ("name", "meta"), 1).replace("ctx", "id")
                    parts["image"] += int(db.execute(sql, (cid,)).fetchone()[0])
                    out[cid] = parts
        except self.ERRORS as exc:
            raise self._failed(exc) from exc
        if self.index_dir is not None:
            for cid, parts in out.items():
                with contextlib.suppress(OSError):
                    parts["sidecars"] += (self.index_dir / f"ctx-{cid}.bm25").stat().st_size
        return out

    def load_vectors(self, cid: int) -> ContextVectors:
        """The stored vectors of a context (a catch-up after another process's refresh reads them here)."""
        try:
            with self._snapshot() as db:
                return self._read_vectors(db, cid)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc

    def _blob_rows(self, db: Sql, sql: str, params: Any) -> list[Any]:
        """Rows that carry a vector column (a backend whose driver decodes binary columns overrides this)."""
        return db.execute(sql, params).fetchall()

    def _read_vectors(self, db: Sql, cid: int) -> ContextVectors:
        """Read a context's vector stores; a store whose rows do not decode is treated as empty (a re-embed)."""
        heads = {
            int(store): (stored_text(model), int(width))
            for store, model, width in db.execute(
                "SELECT store, model, width FROM vector_stores WHERE ctx = ?", (cid,)
            ).fetchall()
        }
        out = ContextVectors()
        head = heads.get(GLOSS_STORE)
        if head is not None:
            rows = self._blob_rows(
                db, "SELECT kind, name, hash, vec FROM gloss_vectors WHERE ctx = ? ORDER BY kind, seq", (cid,)
            )
            out.glosses = gloss_store_of(head[0], head[1], rows)
        head = heads.get(PASSAGE_STORE)
        if head is not None:
            rows = self._blob_rows(
                db,
                "SELECT source, paragraph, para_hash, question_hash, vec FROM passage_vectors "
                "WHERE ctx = ? ORDER BY ord",
                (cid,),
            )
            out.passages = passage_store_of(head[0], head[1], rows)
        return out

    def feed_page(self, cid: int, after: int, limit: int) -> FeedPage:
        """The context's change-feed position and the first `limit` events after seq `after`, in one snapshot."""
        try:
            with self._snapshot() as db:
                row = db.execute("SELECT epoch FROM feed_epochs WHERE ctx = ?", (cid,)).fetchone()
                front, latest = db.execute(
                    "SELECT MIN(CASE WHEN kind <> ? THEN seq END), MAX(seq) FROM feed WHERE ctx = ?", (EVICTED, cid)
                ).fetchone()
                events = db.execute(
                    "SELECT seq, kind, fields FROM feed WHERE ctx = ? AND seq > ? AND kind <> ? ORDER BY seq LIMIT ?",
                    (cid, after, EVICTED, limit),
                ).fetchall()
        except self.ERRORS as exc:
            raise self._failed(exc) from exc
        if front is None and latest:  # every held event was evicted: the next one to hold comes after `latest`
            front = int(latest) + 1
        return FeedPage(
            epoch=int(row[0]) if row else 0,
            front=front,
            latest=latest or 0,
            events=[(seq, kind, json.loads(fields)) for seq, kind, fields in events],
        )

    def durable_rows(self, cid: int, wanted: Dirty) -> DurableRows:
        """The stored state of exactly the records `wanted` names (see `store.model.sync`), in one read transaction."""
        try:
            with self._snapshot() as db:
                return self._rows(db, cid, wanted)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc

    # ----- several processes over one store (`taguru serve --workers N`) -----------------------

    def latest_change(self) -> int:
        """The change log's last sequence number: one cheap read (the table's rightmost key)."""
        return _latest(self.db)

    def changes_after(self, seq: int) -> tuple[int, list[tuple[int, int, dict[str, Any]]]]:
        """(oldest seq still held, the change-log rows after `seq` as (seq, context id, touched))."""
        try:
            with self._snapshot() as db:
                oldest = db.execute("SELECT seq FROM changes ORDER BY seq LIMIT 1").fetchone()
                rows = db.execute("SELECT seq, ctx, touched FROM changes WHERE seq > ? ORDER BY seq", (seq,)).fetchall()
        except self.ERRORS as exc:
            raise self._failed(exc) from exc
        return (int(oldest[0]) if oldest else 0), [(q, c, json.loads(t)) for q, c, t in rows]

    def contexts_changed_after(self, seq: int) -> tuple[int, set[int]]:
        """(the change log's last seq, the ids of the contexts with a change-log row after `seq`)."""
        try:
            with self._snapshot() as db:
                rows = db.execute("SELECT DISTINCT ctx FROM changes WHERE seq > ?", (seq,)).fetchall()
                latest = _latest(db)
        except self.ERRORS as exc:
            raise self._failed(exc) from exc
        return latest, {int(c) for (c,) in rows if int(c) != 0}

    def _rows(self, db: Sql, cid: int, wanted: Dirty) -> DurableRows:
        row = db.execute("SELECT meta FROM contexts WHERE id = ?", (cid,)).fetchone()
        if row is None:
            raise StorageFailed("unavailable", "the context is not in the store")

        def names(table: str, start: int) -> list[str]:
            sql = f"SELECT name FROM {table} WHERE ctx = ? AND id >= ? ORDER BY id"
            return [name for (name,) in db.execute(sql, (cid, start))]

        def edge(total: float, count: int, attrs: str) -> tuple[float, int, list[list[Any]]]:
            return float(total), count, json.loads(attrs) if attrs else []

        touched: dict[int, tuple[float, int, list[list[Any]]] | None] = {}
        for e in sorted(x for x in wanted.edges if x < wanted.edges_from):
            got = db.execute("SELECT sum, count, attrs FROM edges WHERE ctx = ? AND id = ?", (cid, e)).fetchone()
            touched[e] = None if got is None else edge(*got)
        new_edges = [
            (s, lab, o, edge(total, count, attrs))
            for s, lab, o, total, count, attrs in db.execute(
                "SELECT s, l, o, sum, count, attrs FROM edges WHERE ctx = ? AND id >= ? ORDER BY id",
                (cid, wanted.edges_from),
            )
        ]
        aliases: dict[tuple[int, str], int | None] = {}
        for kind, alias in wanted.aliases:
            got = db.execute(
                "SELECT target FROM aliases WHERE ctx = ? AND kind = ? AND alias = ?", (cid, kind, alias)
            ).fetchone()
            aliases[(kind, alias)] = None if got is None else int(got[0])
        passages: dict[int, Passage | None] = {}
        for sid in sorted(wanted.passages):
            got = db.execute("SELECT text, meta FROM passages WHERE ctx = ? AND source = ?", (cid, sid)).fetchone()
            passages[sid] = None if got is None else passage_of(*got)
        return DurableRows(
            meta=meta_of(row[0]),
            concepts_from=wanted.concepts_from,
            concepts=names("concepts", wanted.concepts_from),
            labels_from=wanted.labels_from,
            labels=names("labels", wanted.labels_from),
            sources_from=wanted.sources_from,
            sources=names("sources", wanted.sources_from),
            edges_from=wanted.edges_from,
            new_edges=new_edges,
            edges=touched,
            aliases=aliases,
            passages=passages,
        )

    def _reader(self) -> AbstractContextManager[Sql]:
        """A connection of the caller's own inside one read-only snapshot, closed after (safe in any thread)."""
        raise NotImplementedError

    def load(self, cid: int, name: str, meta: Meta | None) -> tuple[Context, int]:
        """Rebuild a context and all its indexes from its rows, and the change-log position they are at.

        Every row is read in one snapshot on a connection of its own (never the one the event loop
        steps), so a load in a thread can run beside commits: it sees the store as of one moment,
        and the position is that moment's (`Registry.adopt` applies what came after). `meta` None:
        the context's metadata is read in that snapshot too (where other processes write, a copy
        held from before could be older than the rows, e.g. lack a schema installed since).
        """
        # millions of new long-lived objects and no cycles: skip the collector's re-scans, and leave them out of
        # every later one (frozen before the collector comes back: its first young collection would otherwise
        # scan all of them, ~0.7 s at 300k paragraphs; `Registry.get` froze them after the load anyway)
        with collector_paused():
            with self._reader() as db:
                seq = _latest(db)
                if meta is None:
                    row = db.execute("SELECT meta FROM contexts WHERE id = ?", (cid,)).fetchone()
                    meta = meta_of(row[0]) if row is not None else Meta()
                ctx = self._load(db, cid, name, meta)
            gc.freeze()
        return ctx, seq

    def position(self) -> int:
        """The change log's last sequence number read on a connection of its own (safe in any thread)."""
        with self._reader() as db:
            return _latest(db)

    def _load(self, db: Sql, cid: int, name: str, meta: Meta) -> Context:
        ctx = Context(cid, name, meta)
        if self.index_dir is not None:  # read and check the files while the rows are parsed, in the order used
            prefetch([f(self.index_dir, cid) for f in (lexicon_image_path, image_path, bm25_path)])
        ctx.intern_loaded(
            *(
                [n for (n,) in db.execute(f"SELECT name FROM {table} WHERE ctx = ? ORDER BY id", (cid,))]
                for table in ("concepts", "labels", "sources")
            )
        )
        for kind, alias, target in db.execute(
            "SELECT kind, alias, target FROM aliases WHERE ctx = ? ORDER BY seq", (cid,)
        ):
            ctx.aliases[kind][alias] = target
            ctx.lexicons[kind].add(alias, target)
        identity = None
        if self.index_dir is not None:
            identity = {"store": self.store_id, "context": cid, "seq": self._index_seq(db, cid)}
            ctx.lexicons_restored = index_lexicons(ctx.lexicons, self.index_dir, cid)
        self._edges(db, ctx, identity)
        counts = None
        if self.index_dir is not None and identity is not None:
            counts = trusted_counts(self.index_dir, cid, identity)
        load_passages(db, ctx, counts)
        ctx.vectors = self._read_vectors(db, cid)
        ctx.mark_clean()
        if self.index_dir is not None and identity is not None:
            ctx.index_restored = seal_with_file(ctx, self.index_dir, identity)
        return ctx

    def _edges(self, db: Sql, ctx: Context, identity: dict[str, Any] | None) -> None:
        """The edge table and adjacency: from the context's edge image where it holds, else from the rows
        (and then the image is written for the next load). `ctx.edges_restored` says which and why."""
        if self.index_dir is None or identity is None:
            edges_from_rows(db, ctx)
            return
        n_edges = int(db.execute("SELECT COUNT(*) FROM edges WHERE ctx = ?", (ctx.cid,)).fetchone()[0])
        reason = restore_edges(ctx, self.index_dir, identity, n_edges)
        if reason is None:
            ctx.edges_restored = ("image", None)
            return
        edges_from_rows(db, ctx)
        ctx.edges_restored = ("rows", reason)
        try:
            write_image(ctx, self.index_dir, identity)
        except (OSError, ValueError) as exc:
            ctx.edges_restored = ("rows", f"{reason}; not saved ({type(exc).__name__})")

    def _index_seq(self, db: Sql, cid: int) -> int:
        """The context's last change-log position: what its persisted BM25 file must name to be reused."""
        return int(db.execute("SELECT COALESCE(MAX(seq), 0) FROM changes WHERE ctx = ?", (cid,)).fetchone()[0])

    def index_seq(self, cid: int) -> int:
        """`_index_seq` on a connection of its own (a load's check, made without loading)."""
        with self._reader() as db:
            return self._index_seq(db, cid)


def meta_of(stored: str) -> Meta:
    """A context's metadata from its stored JSON (`row_writes.meta_json`)."""
    return Meta(**json.loads(stored))


def _latest(db: Sql) -> int:
    row = db.execute("SELECT seq FROM changes ORDER BY seq DESC LIMIT 1").fetchone()
    return int(row[0]) if row else 0
