"""Small named documents kept in the store's `store_meta` table on PostgreSQL, for state every replica
shares outside the contexts (the server's OAuth grants): read, and replaced under a lock of their own.

The documents live in the existing key/value table, so no store format changes; each replica holds a
connection of its own for them, apart from the store's reader and writer connections.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from taguru_server.store.persist import postgres
from taguru_server.store.persist.postgres import PgSql, configure_connection, require_driver

DOCUMENTS_LOCK = 0x7461_6775_6F61  # an advisory lock apart from the store's write lock


class SharedDocuments:
    """Named text documents in `store_meta`, on one connection of their own (reconnected after a failure)."""

    def __init__(self, url: str) -> None:
        require_driver()
        self.url = url
        self._db: PgSql | None = None
        self._mutex = threading.RLock()

    def _conn(self) -> PgSql:
        if self._db is None or self._db.conn.closed:
            conn = postgres.psycopg.connect(self.url, autocommit=True, connect_timeout=10)
            configure_connection(conn)
            self._db = PgSql(conn)
        return self._db

    def read(self, keys: tuple[str, ...]) -> dict[str, str]:
        """The documents present among `keys`."""
        with self._mutex:
            try:
                db = self._conn()
                rows = db.execute("SELECT key, value FROM store_meta WHERE key = ANY(?)", (list(keys),)).fetchall()
            except Exception:
                self._drop()
                raise
        return {str(key): str(value) for key, value in rows}

    def put(self, values: dict[str, str]) -> None:
        """Replace documents (inside `locked()`, in its transaction)."""
        with self._mutex:
            db = self._conn()
            for key, value in values.items():
                db.execute(
                    "INSERT INTO store_meta VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One transaction holding the documents' lock: every replica's changes are serialized."""
        with self._mutex:
            db = self._conn()
            try:
                db.execute("BEGIN")
                db.execute("SELECT pg_advisory_xact_lock(?)", (DOCUMENTS_LOCK,))
                yield
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    db.execute("ROLLBACK")
                self._drop()
                raise

    def _drop(self) -> None:
        """Forget a connection that failed (the next call reconnects)."""
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.conn.close()
        self._db = None

    def close(self) -> None:
        with self._mutex:
            self._drop()
