"""PostgreSQL as the shared system of record: every `taguru serve` pointed at one database is a replica.

Selected by `TAGURU_DATABASE_URL=postgresql://…` (driver: `pip install -e '.[postgres]'`).
The rows and statements are those of the embedded SQLite store (`store/persist/rows.py`); this module
adds the connection, versioned migrations applied at boot (or alone by `taguru migrate`), the
write lock (a transaction-scoped advisory lock, so writes from every replica are serialized and
ids, which are positions assigned in memory, never collide) and `NOTIFY` on every commit so
that replicas catch up before a client asks.

Every string column is `bytea` holding UTF-8: PostgreSQL `text` cannot hold U+0000, which the
contract allows in names and passages. Strings are converted at the driver (a dumper and a
loader registered on the connection), so the shared statements pass `str` as everywhere else.

Two connections per process, each re-opened when the server drops it: the event loop's reads
(`db`), and writes (`wdb`: write transactions and the write lock), which one thread at a time
steps (writes are serialized; a commit may run in the writer thread). A background load opens a
connection of its own for its one snapshot (`_reader`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

from taguru_server.store.errors import StorageFailed, StoreRefused
from taguru_server.store.persist.rows import RowStore
from taguru_server.store.persist.sql import Sql

try:  # the driver is an extra: `pip install -e '.[postgres]'`
    import psycopg
    from psycopg.pq import TransactionStatus
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]

CHANNEL = "taguru_changes"
WRITE_LOCK = 0x54414755  # the advisory-lock key every replica's write section takes ("TAGU")
MIGRATE_LOCK = 0x54414756

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
CREATE TABLE contexts(id BIGINT PRIMARY KEY, name BYTEA NOT NULL UNIQUE, meta BYTEA NOT NULL);
CREATE TABLE concepts(ctx BIGINT, id BIGINT, name BYTEA, PRIMARY KEY(ctx, id));
CREATE TABLE labels(ctx BIGINT, id BIGINT, name BYTEA, PRIMARY KEY(ctx, id));
CREATE TABLE sources(ctx BIGINT, id BIGINT, name BYTEA, PRIMARY KEY(ctx, id));
CREATE TABLE aliases(ctx BIGINT, kind INT, alias BYTEA, target BIGINT, seq BIGINT, PRIMARY KEY(ctx, kind, alias));
CREATE TABLE edges(
  ctx BIGINT, id BIGINT, s BIGINT, l BIGINT, o BIGINT, sum DOUBLE PRECISION, count BIGINT, attrs BYTEA,
  PRIMARY KEY(ctx, id));
CREATE TABLE passages(ctx BIGINT, source BIGINT, text BYTEA, meta BYTEA, PRIMARY KEY(ctx, source));
CREATE TABLE store_meta(key BYTEA PRIMARY KEY, value BYTEA NOT NULL);
CREATE TABLE changes(seq BIGSERIAL PRIMARY KEY, ctx BIGINT NOT NULL, touched BYTEA NOT NULL);
CREATE TABLE feed(ctx BIGINT, seq BIGINT, kind BYTEA NOT NULL, fields BYTEA NOT NULL, PRIMARY KEY(ctx, seq));
CREATE TABLE feed_epochs(ctx BIGINT PRIMARY KEY, epoch BIGINT NOT NULL);
""",
    ),
    (
        2,  # the embedding vectors of each context (f32 little-endian in `vec`)
        """
CREATE TABLE vector_stores(ctx BIGINT, store INT, model BYTEA NOT NULL, width BIGINT NOT NULL, PRIMARY KEY(ctx, store));
CREATE TABLE gloss_vectors(
  ctx BIGINT, kind INT, seq BIGINT, name BYTEA NOT NULL, hash BIGINT NOT NULL, vec BYTEA NOT NULL,
  PRIMARY KEY(ctx, kind, seq));
CREATE TABLE passage_vectors(
  ctx BIGINT, ord BIGINT, source BYTEA NOT NULL, paragraph BIGINT NOT NULL, para_hash BIGINT NOT NULL,
  question_hash BIGINT, vec BYTEA NOT NULL, PRIMARY KEY(ctx, ord));
""",
    ),
    (
        3,  # context groups: one row per group, its record as JSON (description, member contexts, child groups)
        """
CREATE TABLE context_groups(name BYTEA PRIMARY KEY, body BYTEA NOT NULL);
""",
    ),
]
LATEST = MIGRATIONS[-1][0]


def require_driver() -> None:
    if psycopg is None:
        raise StoreRefused(
            "TAGURU_DATABASE_URL names PostgreSQL, but its driver is not installed: pip install -e '.[postgres]'"
        )


def configure_connection(conn: Any) -> None:
    """str travels as bytea (UTF-8) both ways on this connection (binary format)."""
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format

    class StrAsBytea(Dumper):
        format = Format.BINARY
        oid = psycopg.adapters.types["bytea"].oid

        def dump(self, obj: Any) -> bytes:
            return str(obj).encode("utf-8")

    class ByteaAsStr(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> str:
            return bytes(data).decode("utf-8")

    conn.adapters.register_dumper(str, StrAsBytea)
    conn.adapters.register_loader("bytea", ByteaAsStr)


class PgSql:
    """The shared statements' view of a psycopg connection: `?` placeholders, binary parameters."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._sql: dict[str, str] = {}

    def _q(self, sql: str) -> str:
        got = self._sql.get(sql)
        if got is None:
            got = self._sql[sql] = sql.replace("?", "%s")
        return got

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(self._q(sql), params, binary=True)

    def executemany(self, sql: str, rows: Any) -> Any:
        cur = self.conn.cursor(binary=True)
        cur.executemany(self._q(sql), list(rows))
        return cur

    def execute_bytes(self, sql: str, params: Any = ()) -> list[Any]:
        """A query whose bytea columns come back as bytes (vectors; text columns are decoded by the caller)."""
        from psycopg.adapt import Loader
        from psycopg.pq import Format

        class Raw(Loader):
            format = Format.BINARY

            def load(self, data: Any) -> bytes:
                return bytes(data)

        cur = self.conn.cursor(binary=True)
        cur.adapters.register_loader("bytea", Raw)
        cur.execute(self._q(sql), params)
        return list(cur.fetchall())

    @property
    def in_transaction(self) -> bool:
        return bool(self.conn.info.transaction_status != TransactionStatus.IDLE)

    def close(self) -> None:
        self.conn.close()


class PostgresPersistence(RowStore):
    """Durable rows in a PostgreSQL database shared by every replica; a commit is one transaction."""

    def __init__(self, url: str, migrate: bool = True, check: bool = True) -> None:
        require_driver()
        self.url = url
        self.ERRORS = (psycopg.Error,)
        self._write_section = False
        self._sql = self._connect()
        self._wsql: PgSql | None = None  # writes' own connection, opened at the first write (see `wdb`)
        self.store_id = ""
        try:
            if migrate:
                self.migrate()
            if check:
                self._check_version()
                self.store_id = self._identity()
        except psycopg.Error as exc:
            self._sql.close()
            raise StoreRefused(f"the PostgreSQL store cannot be opened: {_reason(exc)}") from None

    # ----- connection ------------------------------------------------------------------------

    def _connect(self) -> PgSql:
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreRefused(connect_failure(self.url, exc)) from None
        configure_connection(conn)
        return PgSql(conn)

    @property
    def db(self) -> PgSql:  # type: ignore[override]
        if self._sql.conn.broken or self._sql.conn.closed:
            if self._write_section:
                raise StorageFailed("unavailable", "the database connection was lost")
            try:
                self._sql = self._connect()
            except StoreRefused as exc:
                raise StorageFailed("unavailable", str(exc)) from None
        return self._sql

    @property
    def wdb(self) -> PgSql:
        """The connection every write transaction runs on (the write lock included), apart from the loop's reads.

        A commit may then run in the writer thread while the event loop reads on `db`; writes are
        serialized, so one thread at a time steps this one. Re-opened when the server dropped it,
        except inside a write section (its lock went with the connection).
        """
        conn = self._wsql
        if conn is None or conn.conn.broken or conn.conn.closed:
            if self._write_section:
                raise StorageFailed("unavailable", "the database connection was lost")
            try:
                self._wsql = conn = self._connect()
            except StoreRefused as exc:
                raise StorageFailed("unavailable", str(exc)) from None
        return conn

    def interrupt(self) -> None:
        """Ask the server to cancel the write statement running now, if any (a commit past its deadline)."""
        conn = self._wsql
        if conn is not None and not conn.conn.closed:
            with contextlib.suppress(Exception):
                conn.conn.cancel_safe(timeout=2.0)

    def close(self, intact: bool = True) -> None:
        if self._wsql is not None:
            self._wsql.close()
        self._sql.close()

    def _blob_rows(self, db: Sql, sql: str, params: Any) -> list[Any]:
        """Rows with a vector column: bytea read as bytes here (the connection reads it as UTF-8 text)."""
        assert isinstance(db, PgSql)
        return db.execute_bytes(sql, params)

    # ----- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply the migrations this database has not had, each in its own transaction; returns them."""
        db = self._sql
        applied: list[int] = []
        db.execute("BEGIN")
        try:
            db.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATE_LOCK,))
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations(version INT PRIMARY KEY, applied_at BIGINT)")
            have = {int(v) for (v,) in db.execute("SELECT version FROM schema_migrations").fetchall()}
            for version, ddl in MIGRATIONS:
                if version in have:
                    continue
                for statement in ddl.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("INSERT INTO schema_migrations VALUES(?, ?)", (version, int(time.time())))
                applied.append(version)
            db.execute("INSERT INTO store_meta VALUES('store_id', ?) ON CONFLICT(key) DO NOTHING", (uuid.uuid4().hex,))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return applied

    def _check_version(self) -> None:
        row = self._sql.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        version = int(row[0]) if row and row[0] is not None else 0
        if version > LATEST:
            raise StoreRefused(
                f"the PostgreSQL store has schema version {version}, newer than this build reads (up to {LATEST}); "
                "run a newer build"
            )
        if version < LATEST:
            raise StoreRefused(
                f"the PostgreSQL store has schema version {version}; run `taguru migrate` (this build needs {LATEST})"
            )

    def _identity(self) -> str:
        return str(self._sql.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()[0])

    # ----- transactions and the write lock -----------------------------------------------------

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Sql]:
        db = self.wdb
        if not db.in_transaction:  # outside a write section (or after its commit): take the lock here
            db.execute("BEGIN")
            db.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
        with committed(db):
            yield db

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[Sql]:
        db = self.db
        if db.in_transaction:
            yield db
            return
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield db
        finally:
            if db.in_transaction:
                db.execute("COMMIT")

    @contextlib.contextmanager
    def _reader(self) -> Iterator[Sql]:
        """A connection of its own in one read-only REPEATABLE READ snapshot, closed after (any thread)."""
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        try:
            configure_connection(conn)
            db = PgSql(conn)
            db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield db
        finally:
            conn.close()

    def _row_bytes(self, table: str, columns: tuple[str, ...], numbers: int) -> str:
        """PostgreSQL measures a stored row itself: the sum of `pg_column_size` over the context's rows."""
        return f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t WHERE ctx = ?"

    def try_lock_writes(self) -> bool:
        db = self.wdb
        try:
            db.execute("BEGIN")
            got = bool(db.execute("SELECT pg_try_advisory_xact_lock(?)", (WRITE_LOCK,)).fetchone()[0])
        except psycopg.Error as exc:
            if db.in_transaction:
                with contextlib.suppress(psycopg.Error):  # the outage may have broken the connection too
                    db.execute("ROLLBACK")
            raise self._failed(exc) from exc
        if not got:
            db.execute("ROLLBACK")
            return False
        self._write_section = True
        return True

    def unlock_writes(self) -> None:
        self._write_section = False
        db = self.wdb
        if db.in_transaction:
            db.execute("ROLLBACK")

    def _failed(self, exc: BaseException) -> StorageFailed:
        full = getattr(exc, "sqlstate", None) == "53100"
        return StorageFailed("storage_full" if full else "unavailable", _reason(exc))


def store_location(url: str) -> str:
    """Where a PostgreSQL URL points, as `host:port/dbname`, with no user name and no password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - an unparsable URL is said as such, never echoed
        return "(an unparsable URL)"
    host = str(parts.get("host") or parts.get("hostaddr") or "localhost")
    host = f"[{host}]" if ":" in host and not host.startswith("/") else host
    return f"{host}:{parts.get('port') or 5432}/{parts.get('dbname') or '(default database)'}"


CONNECT_REASON_CAP = 200  # characters of the driver's reason a refusal keeps


def connect_failure(url: str, exc: BaseException) -> str:
    """Why a connection to `url` failed, as one line: the server's location (no credentials) and the driver's
    reason (its first line, with the location prefix libpq adds dropped; the password never appears)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = text.removeprefix("connection failed: ").removeprefix("connection is bad: ")
    if " failed: " in text and text.startswith("connection to server"):
        text = text.split(" failed: ", 1)[1]
    try:
        from psycopg.conninfo import conninfo_to_dict

        password = str(conninfo_to_dict(url).get("password") or "")
    except Exception:  # noqa: BLE001 - nothing to hide when the URL does not parse
        password = ""
    if password:
        text = text.replace(password, "***")
    if len(text) > CONNECT_REASON_CAP:
        text = text[:CONNECT_REASON_CAP] + "…"
    return f"the PostgreSQL store at {store_location(url)} cannot be reached: {text.strip() or type(exc).__name__}"


def _reason(exc: BaseException) -> str:
    """The failure as a short phrase: the error class and SQLSTATE, never the server's message (it may quote data)."""
    state = getattr(exc, "sqlstate", None)
    return f"{type(exc).__name__}" + (f" (SQLSTATE {state})" if state else "")


async def follow_notifications(url: str, on_change: Any, retry_secs: float = 1.0) -> None:
    """LISTEN for commits of every replica and call `on_change()` (on the event loop) for each burst of them.

    Reads stay correct without it (each checks the change log first); this makes the check find
    nothing to do. Runs until cancelled; a lost connection is re-opened after `retry_secs`.
    """
    import asyncio

    import structlog

    log = structlog.get_logger("taguru.replica")
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                on_change()  # whatever was committed before the LISTEN
                async for _note in conn.notifies():
                    on_change()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database went away: keep serving, listen again later
            log.warning("replica.listen_failed", error_type=type(exc).__name__)
        await asyncio.sleep(retry_secs)


COPIED_TABLES = (
    "contexts",
    "concepts",
    "labels",
    "sources",
    "aliases",
    "edges",
    "passages",
    "feed",
    "feed_epochs",
    "vector_stores",
    "gloss_vectors",
    "passage_vectors",
    "context_groups",
)


@contextlib.contextmanager
def committed(db: Any) -> Iterator[None]:
    """The body's statements committed, with a NOTIFY that wakes the other replicas; rolled back on any failure."""
    try:
        yield
        db.execute(f"NOTIFY {CHANNEL}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def copy_from_sqlite(sqlite_file: str, target: PostgresPersistence, batch: int = 5000) -> dict[str, int]:
    """Copy every row of an SQLite store into an empty PostgreSQL store, exactly (same ids, same floats,
    dead edges and feed history included), in one transaction; returns the rows copied per table."""
    import sqlite3

    source = sqlite3.connect(f"file:{sqlite_file}?mode=ro", uri=True)
    copied: dict[str, int] = {}
    db = target.db
    try:
        with committed(db):
            db.execute("BEGIN")
            db.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
            if db.execute("SELECT 1 FROM contexts LIMIT 1").fetchone():
                raise StoreRefused("the PostgreSQL store already holds contexts; copy into an empty one")
            present = {row[0] for row in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in COPIED_TABLES:
                if table not in present:  # a store of an older format: nothing of that kind to copy
                    copied[table] = 0
                    continue
                cur = source.execute(f"SELECT * FROM {table}")
                width = len(cur.description)
                insert = f"INSERT INTO {table} VALUES({', '.join('?' * width)})"
                n = 0
                while rows := cur.fetchmany(batch):
                    db.executemany(insert, rows)
                    n += len(rows)
                copied[table] = n
            # every replica starts from a change log that names each context once (so caches know them)
            for (cid,) in db.execute("SELECT id FROM contexts").fetchall():
                db.execute("INSERT INTO changes(ctx, touched) VALUES(?, ?)", (cid, '{"created": true}'))
    finally:
        source.close()
    return copied
