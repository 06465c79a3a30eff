"""The embedded default persistence: one SQLite database in WAL mode under the data dir."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from taguru_server.store.errors import StorageFailed, StoreRefused
from taguru_server.store.model.context import CONCEPT, LABEL
from taguru_server.store.persist.row_writes import new_epoch
from taguru_server.store.persist.rows import RowStore
from taguru_server.store.persist.seal import seal, sealed, unseal

DB_NAME = "taguru.sqlite3"
# `PRAGMA application_id` of every store this project writes ("TAGU"): a database without it is not ours
APPLICATION_ID = 0x54414755
# `PRAGMA user_version`: the store format; 0 is a store written before formats were recorded.
# 2 added the change log (`changes`), the change feed (`feed`) and its epochs (`feed_epochs`).
# 3 added the embedding vectors (`vector_stores`, `gloss_vectors`, `passage_vectors`).
# 4 added context groups (`context_groups`).
FORMAT_VERSION = 4
BUSY_TIMEOUT_MS = 5000  # how long a statement waits for another process's write lock (several workers)
CHECKPOINT_WAIT_MS = 200  # how long a compaction's checkpoint waits for other processes' reads
# the store's identity, also kept beside the database: a deleted or swapped database is noticed at boot
STORE_ID_FILE = "STORE_ID"
# told "store.checking" (before a full-file check), "store.checked" or "store.check_skipped", with fields
CheckReport = Callable[..., None]
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
CREATE TABLE IF NOT EXISTS vector_stores(
  ctx INTEGER, store INTEGER, model TEXT NOT NULL, width INTEGER NOT NULL, PRIMARY KEY(ctx, store)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gloss_vectors(
  ctx INTEGER, kind INTEGER, seq INTEGER, name TEXT NOT NULL, hash INTEGER NOT NULL, vec BLOB NOT NULL,
  PRIMARY KEY(ctx, kind, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS passage_vectors(
  ctx INTEGER, ord INTEGER, source TEXT NOT NULL, paragraph INTEGER NOT NULL, para_hash INTEGER NOT NULL,
  question_hash INTEGER, vec BLOB NOT NULL, PRIMARY KEY(ctx, ord)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS context_groups(name TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;
"""


class SqlitePersistence(RowStore):
    """Durable rows for every context; a commit is one transaction, synced before it returns."""

    ERRORS = (sqlite3.Error,)
    db: sqlite3.Connection  # an `Sql` with SQLite's own extras: the event loop's reads
    wdb: sqlite3.Connection  # writes (see `_writer`)

    def __init__(
        self, data_dir: str | os.PathLike[str], report: CheckReport | None = None, checked: bool = False
    ) -> None:
        self.report = report  # told of the boot's integrity check (server/app.py logs it)
        self.checked = checked  # a worker's open: the supervisor, which holds the data-dir lock, checked it
        self.path = Path(data_dir)
        self.file = self.path / DB_NAME
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            existed = self.file.exists()
        except OSError as exc:
            raise StoreRefused(f"the data dir {self.path} cannot be used: {exc.strerror or exc}") from None
        recorded = self._recorded_id(existed)
        self._write_section = False
        with self._refusing(opened=False):
            self.db = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False)
            self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self.wdb = self.db  # the boot's own transaction (schema, identity) runs on the one connection
        with self._refusing(opened=True):
            self.store_id = self._open(existed)
            self._record_id(recorded)
            self.wdb = self._writer()

    @contextlib.contextmanager
    def _refusing(self, opened: bool) -> Iterator[None]:
        """One step of opening the store: a database error is the store's refusal, and once the connection is
        `opened` a refusal closes it first."""
        try:
            yield
        except (StoreRefused, sqlite3.Error) as exc:
            if opened:
                self.db.close()
            if isinstance(exc, StoreRefused):
                raise
            raise StoreRefused(f"the store {self.file} cannot be opened: {_reason(exc)}") from None

    def _writer(self) -> sqlite3.Connection:
        """The connection every write transaction runs on (the write section's lock included).

        Apart from `db`, which the event loop reads on: a commit may then run in the writer thread
        (`Registry.commit_off_loop`) while the loop goes on reading, and no two threads ever step
        one connection (writes are serialized, so one thread at a time uses this one).
        """
        wdb = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False)
        for pragma in (f"busy_timeout={BUSY_TIMEOUT_MS}", "synchronous=FULL", "foreign_keys=OFF", "secure_delete=ON"):
            wdb.execute(f"PRAGMA {pragma}")
        return wdb

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
            raise StoreRefused(identity_mismatch(self.file, self.store_id, recorded, id_file))
        try:
            staging = id_file.with_suffix(".tmp")
            staging.write_text(self.store_id + "\n", encoding="ascii")
            os.replace(staging, id_file)
        except OSError as exc:
            raise StoreRefused(f"the store identity {id_file} cannot be written: {exc.strerror or exc}") from None

    def _open(self, existed: bool) -> str:
        """Recognise the file (new, this project's, or an older build's), check it, and return its identity."""
        db = self.db
        version = self._checked(existed)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=OFF")
        # deleted content (a retracted passage, a compacted edge) is overwritten, not left in free pages
        db.execute("PRAGMA secure_delete=ON")
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
                    # format 2 -> 3: the (empty) vector tables were created above; nothing else changes
                    # format 3 -> 4: the (empty) groups table was created above; nothing else changes
                    db.execute(f"PRAGMA user_version={FORMAT_VERSION}")
                db.execute("INSERT OR IGNORE INTO store_meta VALUES('store_id', ?)", (uuid.uuid4().hex,))
                db.execute("INSERT OR REPLACE INTO store_meta VALUES('opened_at', ?)", (str(int(time.time())),))
        except sqlite3.Error as exc:
            raise StoreRefused(f"the store {self.file} cannot be written: {_reason(exc)}") from None
        return str(db.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()[0])

    def _checked(self, existed: bool) -> int:
        """`check_store`, logged: the full-file check is skipped for a database its seal vouches for."""
        report = self.report or (lambda _event, **_fields: None)
        trusted = "checked by the supervisor" if self.checked else None
        if existed and (trusted or sealed(self.file)):
            version = check_store(self.db, self.file, existed, full=False)
            report("store.check_skipped", reason=trusted or "unchanged since the last clean stop")
            return version
        size = self.file.stat().st_size if existed else 0
        if size:
            report("store.checking", check="quick_check", file_bytes=size)
        began = time.perf_counter()
        try:
            version = check_store(self.db, self.file, existed)
        except StoreRefused:
            unseal(self.file)
            raise
        if size:
            report("store.checked", check="quick_check", duration_ms=round((time.perf_counter() - began) * 1000, 1))
        return version

    def close(self, intact: bool = True) -> None:
        self.wdb.close()
        self.db.close()
        # the last process to close the store, cleanly, leaves its seal (store/persist/seal.py); a store a
        # read found damaged is checked in full at the next boot (which refuses it)
        if intact:
            seal(self.file)
        else:
            unseal(self.file)

    def interrupt(self) -> None:
        """Abort the write statement running now, if any (a commit past its deadline; any thread may call it)."""
        self.wdb.interrupt()

    def _tx(self) -> _Transaction | _InSection:
        return _InSection(self.wdb) if self._write_section else _Transaction(self.wdb)

    def try_lock_writes(self) -> bool:
        """Take the store's write lock (shared by every process) if it is free; False when another holds it."""
        db = self.wdb
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
        if self.wdb.in_transaction:
            self.wdb.execute("ROLLBACK")

    def purge_freed(self) -> bool:
        """Checkpoint the WAL into the database and truncate it, so no old page image (with content a retract
        or a compaction deleted, already zeroed in the database by `secure_delete`) stays on disk.

        False when another process's read or write kept the checkpoint from completing.
        """
        db = self.wdb
        if db.in_transaction:
            return False
        db.execute(f"PRAGMA busy_timeout={CHECKPOINT_WAIT_MS}")
        try:
            busy, _log, _done = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            return False
        finally:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return int(busy) == 0

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(self.db)

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection of its own in one snapshot (WAL: it never waits for a writer, nor blocks one)."""
        db = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False)
        try:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA query_only=ON")
            db.execute("BEGIN")
            yield db
        finally:
            db.close()  # ends the read transaction

    def _failed(self, exc: BaseException) -> StorageFailed:
        assert isinstance(exc, sqlite3.Error)
        return _failed(exc)


_REASONS = {
    "NOTADB": "not a database file (damaged or replaced)",
    "CORRUPT": "the file is damaged",
    "READONLY": "the file or its directory is read-only",
    "IOERR": "a disk I/O error",
    "FULL": "the disk is full",
    "CANTOPEN": "no access to the file or its directory",
    "PERM": "permission denied",
}


def check_store(db: sqlite3.Connection, file: Path, existed: bool, full: bool = True) -> int:
    """The boot's checks of a store file, which only read: this project's (or an older build's, or a new
    empty one), a format this build reads, and intact (`quick_check`, unless not `full`: a sealed file).
    Its format, or StoreRefused."""
    app_id = int(db.execute("PRAGMA application_id").fetchone()[0])
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app_id == APPLICATION_ID:
        if version > FORMAT_VERSION:
            raise StoreRefused(
                f"the store {file} has format {version}, newer than this build reads "
                f"(up to {FORMAT_VERSION}); run a newer build"
            )
    elif app_id != 0 or (tables and not LEGACY_TABLES <= tables):
        raise StoreRefused(f"the store {file} is not a taguru store; move it away or restore it from a backup")
    elif not tables and existed:
        raise StoreRefused(
            f"the store {file} is empty (truncated or replaced?); restore it from a backup, "
            "or move it away to start an empty store"
        )
    problem = db.execute("PRAGMA quick_check(1)").fetchone()[0] if full else "ok"
    if problem != "ok":
        raise StoreRefused(f"the store {file} is damaged (integrity check failed); restore it from a backup")
    return version


def identity_mismatch(file: Path, store_id: str, recorded: str, id_file: Path) -> str:
    """The boot's refusal of a database that is not the store its data dir recorded."""
    return (
        f"the store {file} is store {store_id}, but the data dir held store {recorded} (replaced?); "
        f"restore the right database, or remove {id_file} to adopt this one"
    )


class ReadOnlySqlite(SqlitePersistence):
    """A store file opened only to read (`taguru inspect`): `mode=ro`, and `immutable` when no `-wal` file
    exists, so nothing is ever written beside it (no `-wal`/`-shm`, no `opened_at`, no identity file)."""

    def __init__(self, file: str | os.PathLike[str]) -> None:
        self.file = Path(file)
        self.path = self.file.parent
        self._write_section = False
        self.index_dir = None
        with self._refusing(opened=False):
            self.db = self._connect()
        self.wdb = self.db
        with self._refusing(opened=True):
            self.format = check_store(self.db, self.file, existed=True)
            self.store_id = self._store_meta("store_id") or ""

    def _connect(self) -> sqlite3.Connection:
        from urllib.parse import quote

        wal = self.file.with_name(self.file.name + "-wal")
        immutable = "" if wal.exists() else "&immutable=1"
        uri = f"file:{quote(str(self.file.resolve()))}?mode=ro{immutable}"
        db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA query_only=ON")
        return db

    def close(self, intact: bool = True) -> None:
        self.db.close()  # and no seal: nothing is written beside a store opened only to read

    def _store_meta(self, key: str) -> str | None:
        tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "store_meta" not in tables:
            return None
        row = self.db.execute("SELECT value FROM store_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        try:
            db.execute("BEGIN")
            yield db
        finally:
            db.close()


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
