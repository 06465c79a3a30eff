"""The embedded default persistence: one SQLite database in WAL mode under the data dir."""

from __future__ import annotations

import gc
import itertools
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from taguru_server.store.context import CONCEPT, LABEL, Context, Dirty, Meta, Passage
from taguru_server.store.errors import StorageFailed, StoreRefused
from taguru_server.store.feed import FeedPage
from taguru_server.store.sync import DurableRows

DB_NAME = "taguru.sqlite3"
# `PRAGMA application_id` of every store this project writes ("TAGU"): a database without it is not ours
APPLICATION_ID = 0x54414755
# `PRAGMA user_version`: the store format; 0 is a store written before formats were recorded.
# 2 added the change log (`changes`), the change feed (`feed`) and its epochs (`feed_epochs`).
FORMAT_VERSION = 2
FEED_RETAINED = 1024  # change-feed events kept per context (the reference's ring size)
CHANGES_RETAINED = 100_000  # change-log rows kept for other processes to catch up from
BUSY_TIMEOUT_MS = 5000  # how long a statement waits for another process's write lock (several workers)
# the store's identity, also kept beside the database: a deleted or swapped database is noticed at boot
STORE_ID_FILE = "STORE_ID"
LEGACY_TABLES = {"contexts", "concepts", "labels", "sources", "aliases", "edges", "passages"}

SCHEMA = """
CREATE TABLE IF NOT EXISTS contexts(
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, meta TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS concepts(ctx INTEGER, id INTEGER, name TEXT, PRIMARY KEY(ctx, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS labels(ctx INTEGER, id INTEGER, name TEXT, PRIMARY KEY(ctx, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sources(ctx INTEGER, id INTEGER, name TEXT, PRIMARY KEY(ctx, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS aliases(
  ctx INTEGER, kind INTEGER, alias TEXT, target INTEGER, seq INTEGER, PRIMARY KEY(ctx, kind, alias)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS edges(
  ctx INTEGER, id INTEGER, s INTEGER, l INTEGER, o INTEGER, sum REAL, count INTEGER, attrs TEXT,
  PRIMARY KEY(ctx, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS passages(
  ctx INTEGER, source INTEGER, text TEXT, meta TEXT, PRIMARY KEY(ctx, source)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS store_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, ctx INTEGER NOT NULL, touched TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS feed(
  ctx INTEGER, seq INTEGER, kind TEXT NOT NULL, fields TEXT NOT NULL, PRIMARY KEY(ctx, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS feed_epochs(ctx INTEGER PRIMARY KEY, epoch INTEGER NOT NULL);
"""

_META_FIELDS = (
    "description",
    "pinned",
    "dice_floor",
    "semantic_floor",
    "rev_graph",
    "rev_passages",
    "rev_config",
    "reads",
    "empty_reads",
    "writes",
    "dead_attributions",
    "last_read_epoch",
    "last_write_epoch",
)


def _meta_json(meta: Meta) -> str:
    return json.dumps({f: getattr(meta, f) for f in _META_FIELDS}, ensure_ascii=False)


class SqlitePersistence:
    """Durable rows for every context; a commit is one transaction, synced before it returns."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir)
        self.file = self.path / DB_NAME
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            existed = self.file.exists()
        except OSError as exc:
            raise StoreRefused(f"the data dir {self.path} cannot be used: {exc.strerror or exc}") from None
        recorded = self._recorded_id(existed)
        self._write_section = False
        try:
            self.db = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False)
            self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        except sqlite3.Error as exc:
            raise StoreRefused(f"the store {self.file} cannot be opened: {_reason(exc)}") from None
        try:
            self.store_id = self._open(existed)
            self._record_id(recorded)
        except StoreRefused:
            self.db.close()
            raise
        except sqlite3.Error as exc:
            self.db.close()
            raise StoreRefused(f"the store {self.file} cannot be opened: {_reason(exc)}") from None

    def _recorded_id(self, existed: bool) -> str | None:
        """The identity the data dir recorded for its store; a missing database of a known store is refused."""
        id_file = self.path / STORE_ID_FILE
        try:
            recorded = id_file.read_text(encoding="ascii").strip() if id_file.exists() else None
        except (OSError, UnicodeDecodeError):
            raise StoreRefused(f"the store identity {id_file} cannot be read") from None
        if recorded and not existed:
            raise StoreRefused(
                f"the store {self.file} is missing, but the data dir held store {recorded}; restore the database "
                f"from a backup, or remove {id_file} to start an empty store"
            )
        return recorded

    def _record_id(self, recorded: str | None) -> None:
        id_file = self.path / STORE_ID_FILE
        if recorded == self.store_id:
            return
        if recorded:
            raise StoreRefused(
                f"the store {self.file} is store {self.store_id}, but the data dir held store {recorded} (replaced?); "
                f"restore the right database, or remove {id_file} to adopt this one"
            )
        try:
            staging = id_file.with_suffix(".tmp")
            staging.write_text(self.store_id + "\n", encoding="ascii")
            os.replace(staging, id_file)
        except OSError as exc:
            raise StoreRefused(f"the store identity {id_file} cannot be written: {exc.strerror or exc}") from None

    def _open(self, existed: bool) -> str:
        """Recognise the file (new, this project's, or an older build's), check it, and return its identity."""
        db = self.db
        app_id = int(db.execute("PRAGMA application_id").fetchone()[0])
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if app_id == APPLICATION_ID:
            if version > FORMAT_VERSION:
                raise StoreRefused(
                    f"the store {self.file} has format {version}, newer than this build reads "
                    f"(up to {FORMAT_VERSION}); run a newer build"
                )
        elif app_id != 0 or (tables and not LEGACY_TABLES <= tables):
            raise StoreRefused(f"the store {self.file} is not a taguru store; move it away or restore it from a backup")
        elif not tables and existed:
            raise StoreRefused(
                f"the store {self.file} is empty (truncated or replaced?); restore it from a backup, "
                "or move it away to start an empty store"
            )
        problem = db.execute("PRAGMA quick_check(1)").fetchone()[0]
        if problem != "ok":
            raise StoreRefused(f"the store {self.file} is damaged (integrity check failed); restore it from a backup")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=OFF")
        try:
            with self._tx():
                # a new store, or one an older build wrote (format 0): record the identity and format
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                if version < FORMAT_VERSION:
                    # format 1 -> 2: the new tables were created above; give existing contexts a feed epoch
                    for (cid,) in db.execute("SELECT id FROM contexts").fetchall():
                        db.execute("INSERT OR IGNORE INTO feed_epochs VALUES(?, ?)", (cid, new_epoch()))
                    db.execute(f"PRAGMA user_version={FORMAT_VERSION}")
                db.execute("INSERT OR IGNORE INTO store_meta VALUES('store_id', ?)", (uuid.uuid4().hex,))
                db.execute("INSERT OR REPLACE INTO store_meta VALUES('opened_at', ?)", (str(int(time.time())),))
        except sqlite3.Error as exc:
            raise StoreRefused(f"the store {self.file} cannot be written: {_reason(exc)}") from None
        return str(db.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()[0])

    def close(self) -> None:
        self.db.close()

    def list_contexts(self) -> list[tuple[int, str, Meta]]:
        rows = self.db.execute("SELECT id, name, meta FROM contexts ORDER BY id").fetchall()
        return [(cid, name, Meta(**json.loads(meta))) for cid, name, meta in rows]

    def next_id(self) -> int:
        # past every id the change log still names too, so a deleted context's id is not handed out again
        row = self.db.execute(
            "SELECT MAX(COALESCE((SELECT MAX(id) FROM contexts), 0), COALESCE((SELECT MAX(ctx) FROM changes), 0)) + 1"
        ).fetchone()
        return int(row[0])

    def delete(self, cid: int) -> int:
        """Drop a context and all its rows; returns the change-log seq of the deletion."""
        try:
            with self._tx() as db:
                for table in ("concepts", "labels", "sources", "aliases", "edges", "passages", "feed"):
                    db.execute(f"DELETE FROM {table} WHERE ctx = ?", (cid,))
                db.execute("DELETE FROM feed_epochs WHERE ctx = ?", (cid,))
                db.execute("DELETE FROM contexts WHERE id = ?", (cid,))
                cur = db.execute("INSERT INTO changes(ctx, touched) VALUES(?, ?)", (cid, '{"deleted":true}'))
        except sqlite3.Error as exc:
            raise _failed(exc) from exc
        return cur.lastrowid or 0

    def commit(self, contexts: Iterable[Context]) -> int | None:
        """Write what each context's dirty set names, all in one transaction; returns its last change-log seq."""
        todo = [c for c in contexts if c.dirty.any() or c.created]
        if not todo:
            return None
        try:
            with self._tx() as db:
                seq = max(self._write(db, ctx) for ctx in todo)
        except sqlite3.Error as exc:
            raise _failed(exc) from exc
        for ctx in todo:
            ctx.mark_clean()
        return seq

    def _tx(self) -> _Transaction | _InSection:
        return _InSection(self.db) if self._write_section else _Transaction(self.db)

    def _write(self, db: sqlite3.Connection, ctx: Context) -> int:
        d = ctx.dirty
        cid = ctx.cid
        seq = _log_change(db, ctx)
        if ctx.created:
            db.execute("INSERT INTO contexts(id, name, meta) VALUES(?, ?, ?)", (cid, ctx.name, _meta_json(ctx.meta)))
            db.execute("INSERT OR REPLACE INTO feed_epochs VALUES(?, ?)", (cid, new_epoch()))
        else:
            db.execute("UPDATE contexts SET meta = ? WHERE id = ?", (_meta_json(ctx.meta), cid))
        if len(ctx.concepts) > d.concepts_from:
            db.executemany(
                "INSERT INTO concepts VALUES(?, ?, ?)",
                ((cid, i, ctx.concepts[i]) for i in range(d.concepts_from, len(ctx.concepts))),
            )
        if len(ctx.labels) > d.labels_from:
            db.executemany(
                "INSERT INTO labels VALUES(?, ?, ?)",
                ((cid, i, ctx.labels[i]) for i in range(d.labels_from, len(ctx.labels))),
            )
        if len(ctx.sources) > d.sources_from:
            db.executemany(
                "INSERT INTO sources VALUES(?, ?, ?)",
                ((cid, i, ctx.sources[i]) for i in range(d.sources_from, len(ctx.sources))),
            )
        if d.edges:
            e_s, e_l, e_o, e_sum, e_cnt, e_attr = ctx.e_s, ctx.e_l, ctx.e_o, ctx.e_sum, ctx.e_cnt, ctx.e_attr
            db.executemany(
                "INSERT OR REPLACE INTO edges VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (cid, e, e_s[e], e_l[e], e_o[e], e_sum[e], e_cnt[e], _attrs_json(e_attr[e]) if e_attr[e] else "")
                    for e in sorted(d.edges)
                ],
            )
        gone: list[tuple[int, int, str]] = []
        added: list[tuple[int, int, str, int, int]] = []
        # an alias's seq orders registration (the load order): the commit's change-log seq (unique and
        # increasing across every process writing the store) in the high bits, its order in the commit below
        alias_seq = seq << 32
        for (kind, alias), target in d.aliases.items():
            if target is None:
                gone.append((cid, kind, alias))
            else:
                alias_seq += 1
                added.append((cid, kind, alias, target, alias_seq))
        if gone:
            db.executemany("DELETE FROM aliases WHERE ctx = ? AND kind = ? AND alias = ?", gone)
        if added:
            db.executemany("INSERT OR REPLACE INTO aliases VALUES(?, ?, ?, ?, ?)", added)
        dropped: list[tuple[int, int]] = []
        stored: list[tuple[int, int, str, str]] = []
        for sid in sorted(d.passages):
            passage = ctx.passages.get(sid)
            if passage is None:
                dropped.append((cid, sid))
            else:
                stored.append((cid, sid, passage.text, json.dumps(passage.meta_json(), ensure_ascii=False)))
        if dropped:
            db.executemany("DELETE FROM passages WHERE ctx = ? AND source = ?", dropped)
        if stored:
            db.executemany("INSERT OR REPLACE INTO passages VALUES(?, ?, ?, ?)", stored)
        return seq

    def feed_page(self, cid: int, after: int, limit: int) -> FeedPage:
        """The context's change-feed position and the first `limit` events after seq `after`, in one snapshot."""
        try:
            with self._snapshot() as db:
                row = db.execute("SELECT epoch FROM feed_epochs WHERE ctx = ?", (cid,)).fetchone()
                front, latest = db.execute("SELECT MIN(seq), MAX(seq) FROM feed WHERE ctx = ?", (cid,)).fetchone()
                events = db.execute(
                    "SELECT seq, kind, fields FROM feed WHERE ctx = ? AND seq > ? ORDER BY seq LIMIT ?",
                    (cid, after, limit),
                ).fetchall()
        except sqlite3.Error as exc:
            raise _failed(exc) from exc
        return FeedPage(
            epoch=int(row[0]) if row else 0,
            front=front,
            latest=latest or 0,
            events=[(seq, kind, json.loads(fields)) for seq, kind, fields in events],
        )

    def durable_rows(self, cid: int, wanted: Dirty) -> DurableRows:
        """The stored state of exactly the records `wanted` names (see `store.sync`), in one read transaction."""
        try:
            with self._snapshot() as db:
                return self._rows(db, cid, wanted)
        except sqlite3.Error as exc:
            raise _failed(exc) from exc

    # ----- several processes over one store (`taguru serve --workers N`) -----------------------

    def latest_change(self) -> int:
        """The change log's last sequence number: one cheap read (the table's rightmost key)."""
        row = self.db.execute("SELECT seq FROM changes ORDER BY seq DESC LIMIT 1").fetchone()
        return int(row[0]) if row else 0

    def changes_after(self, seq: int) -> tuple[int, list[tuple[int, int, dict[str, Any]]]]:
        """(oldest seq still held, the change-log rows after `seq` as (seq, context id, touched))."""
        try:
            with self._snapshot() as db:
                oldest = db.execute("SELECT seq FROM changes ORDER BY seq LIMIT 1").fetchone()
                rows = db.execute("SELECT seq, ctx, touched FROM changes WHERE seq > ? ORDER BY seq", (seq,)).fetchall()
        except sqlite3.Error as exc:
            raise _failed(exc) from exc
        return (int(oldest[0]) if oldest else 0), [(q, c, json.loads(t)) for q, c, t in rows]

    def try_lock_writes(self) -> bool:
        """Take the store's write lock (shared by every process) if it is free; False when another holds it."""
        db = self.db
        db.execute("PRAGMA busy_timeout=0")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):
                return False
            raise _failed(exc) from exc
        finally:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._write_section = True
        return True

    def unlock_writes(self) -> None:
        """Leave the write section (nothing is pending: every commit in it has committed)."""
        self._write_section = False
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(self.db)

    def _rows(self, db: sqlite3.Connection, cid: int, wanted: Dirty) -> DurableRows:
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
            passages[sid] = None if got is None else _passage(*got)
        return DurableRows(
            meta=Meta(**json.loads(row[0])),
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

    def load(self, cid: int, name: str, meta: Meta) -> Context:
        """Rebuild a context and all its indexes from its rows."""
        collecting = gc.isenabled()
        gc.disable()  # millions of new long-lived objects and no cycles: skip the collector's re-scans
        try:
            return self._load(cid, name, meta)
        finally:
            if collecting:
                gc.enable()

    def _load(self, cid: int, name: str, meta: Meta) -> Context:
        ctx = Context(cid, name, meta)
        db = self.db
        loads = json.loads
        for (cname,) in db.execute("SELECT name FROM concepts WHERE ctx = ? ORDER BY id", (cid,)):
            ctx.intern_concept(cname)
        for (lname,) in db.execute("SELECT name FROM labels WHERE ctx = ? ORDER BY id", (cid,)):
            ctx.intern_label(lname)
        for (sname,) in db.execute("SELECT name FROM sources WHERE ctx = ? ORDER BY id", (cid,)):
            ctx.intern_source(sname)
        for kind, alias, target in db.execute(
            "SELECT kind, alias, target FROM aliases WHERE ctx = ? ORDER BY seq", (cid,)
        ):
            ctx.aliases[kind][alias] = target
            ctx.lexicons[kind].add(alias, target)
        rows = db.execute(
            "SELECT id, s, l, o, sum, count, attrs FROM edges WHERE ctx = ? ORDER BY id", (cid,)
        ).fetchall()
        if rows:
            ids, col_s, col_l, col_o, col_sum, col_cnt, col_attrs = zip(*rows, strict=False)
            del rows
            ctx.e_s.extend(col_s)
            ctx.e_l.extend(col_l)
            ctx.e_o.extend(col_o)
            ctx.e_sum.extend(map(float, col_sum))
            ctx.e_cnt.extend(col_cnt)
            # every stored attrs value is a JSON array we wrote: parse them in one call
            ctx.e_attr.extend(loads("[" + ",".join([a or "[]" for a in col_attrs]) + "]"))
            del col_attrs
            ctx.edge_of.update(zip(zip(col_s, col_l, col_o, strict=False), ids, strict=False))
            out_edges, in_edges, label_edges = ctx.out_edges, ctx.in_edges, ctx.label_edges
            for e, s, lab, o in zip(ids, col_s, col_l, col_o, strict=False):
                out_edges[s].append(e)
                if o != s:
                    in_edges[o].append(e)
                label_edges[lab].append(e)
            source_edges = ctx.source_edges
            for e, records in enumerate(ctx.e_attr):
                for rec in records:
                    sid = rec[0]
                    got = source_edges.get(sid)
                    if got is None:
                        source_edges[sid] = {e}
                    else:
                        got.add(e)
        for sid, text, pmeta in db.execute(
            "SELECT source, text, meta FROM passages WHERE ctx = ? ORDER BY source", (cid,)
        ):
            passage = _passage(text, pmeta)
            ctx.passages[sid] = passage
            ctx._index_passage(sid, passage)
        ctx.mark_clean()
        from taguru_server.store.lanes import warm

        warm(ctx)  # build the read indexes now rather than in the first request
        return ctx


_epochs = itertools.count()


def new_epoch() -> int:
    """A change-feed epoch: the wall clock in nanoseconds plus a counter; never 0, unique per process and call."""
    return (time.time_ns() + next(_epochs)) & 0x7FFF_FFFF_FFFF_FFFF or 1


def _log_change(db: sqlite3.Connection, ctx: Context) -> int:
    """Append the commit's change-log row (what it touched) and its change-feed events, numbered in order."""
    d = ctx.dirty
    touched = {
        "created": ctx.created,
        "edges": sorted(d.edges),
        "aliases": sorted([kind, alias] for kind, alias in d.aliases),
        "passages": sorted(d.passages),
    }
    cur = db.execute("INSERT INTO changes(ctx, touched) VALUES(?, ?)", (ctx.cid, json.dumps(touched)))
    seq = cur.lastrowid or 0
    if seq % 1000 == 0 and seq > CHANGES_RETAINED:
        db.execute("DELETE FROM changes WHERE seq <= ?", (seq - CHANGES_RETAINED,))
    if not d.events:
        return seq
    latest = db.execute("SELECT COALESCE(MAX(seq), 0) FROM feed WHERE ctx = ?", (ctx.cid,)).fetchone()[0]
    db.executemany(
        "INSERT INTO feed VALUES(?, ?, ?, ?)",
        [
            (ctx.cid, latest + i, kind, json.dumps(fields, ensure_ascii=False))
            for i, (kind, fields) in enumerate(d.events, 1)
        ],
    )
    latest += len(d.events)
    if latest > FEED_RETAINED:
        db.execute("DELETE FROM feed WHERE ctx = ? AND seq <= ?", (ctx.cid, latest - FEED_RETAINED))
    return seq


def _passage(text: str, stored_meta: str) -> Passage:
    m = json.loads(stored_meta)
    return Passage(
        text,
        [(p, q) for p, q in m["questions"]],
        {p: s for p, s in m["sections"]},
        {p: (k, v) for p, k, v in m["locators"]},
        m["tags"],
        m["stored_at"],
        m["date"],
    )


def _attrs_json(records: list[list]) -> str:
    """The JSON array of an edge's attribution records [source, sum, count, paragraph|null].

    Sums are finite (they saturate) and repr() of a float is its JSON number, so this is
    what json.dumps writes, built without the encoder's per-call overhead.
    """
    return (
        "["
        + ",".join([f"[{sid},{rsum!r},{cnt},{'null' if par is None else par}]" for sid, rsum, cnt, par in records])
        + "]"
    )


_REASONS = {
    "NOTADB": "not a database file (damaged or replaced)",
    "CORRUPT": "the file is damaged",
    "READONLY": "the file or its directory is read-only",
    "IOERR": "a disk I/O error",
    "FULL": "the disk is full",
    "CANTOPEN": "no access to the file or its directory",
    "PERM": "permission denied",
}


def _reason(exc: sqlite3.Error) -> str:
    """The SQLite result as a short phrase (never a path or a value)."""
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    base = name.removeprefix("SQLITE_").split("_", 1)[0]
    return _REASONS.get(base, name.lower())


def _failed(exc: sqlite3.Error) -> StorageFailed:
    full = getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL"
    return StorageFailed("storage_full" if full else "unavailable", _reason(exc))


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
            except sqlite3.Error:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        elif self.db.in_transaction:  # after an I/O error SQLite may have rolled back already
            self.db.execute("ROLLBACK")


class _InSection:
    """The commit of a write section: the lock is already held by the section's transaction (see `Registry`)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        if not self.db.in_transaction:
            self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        db = self.db
        if exc_type is None:
            try:
                db.execute("COMMIT")
            except sqlite3.Error:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        elif db.in_transaction:
            db.execute("ROLLBACK")


class _Snapshot:
    """One consistent read: its own read transaction, or the write section's when one is open."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.own = False

    def __enter__(self) -> sqlite3.Connection:
        if not self.db.in_transaction:
            self.db.execute("BEGIN")
            self.own = True
        return self.db

    def __exit__(self, *exc: object) -> None:
        if self.own and self.db.in_transaction:
            self.db.execute("COMMIT")


__all__ = ["SqlitePersistence", "CONCEPT", "LABEL", "StoreRefused"]
