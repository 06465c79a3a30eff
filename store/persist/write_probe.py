"""Whether the backend could take a write now, asked without writing anything (what `/health` reports).

A probe never touches the connection a server's requests use: PostgreSQL is asked on a short-lived
connection of its own (so a probe can run in any thread, and an outage is seen even while no write
is tried), SQLite by the file system's own answer for the database files. What a probe cannot see
(a full disk, an I/O error) is found by the next write, which the registry reports itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PG_CONNECT_TIMEOUT_SECS = 2  # libpq's smallest useful connect_timeout
PG_TCP_USER_TIMEOUT_MS = 2000  # a connection whose packets go unanswered this long is given up


def write_probe(persistence: Any) -> str | None:
    """Why the store cannot take a write now, as a short phrase naming nothing stored and no path, or None."""
    url = getattr(persistence, "url", None)
    if isinstance(url, str):
        return _postgres(url)
    file = getattr(persistence, "file", None)
    if isinstance(file, Path):
        return _sqlite(file)
    return None


def _postgres(url: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=PG_CONNECT_TIMEOUT_SECS,
            tcp_user_timeout=PG_TCP_USER_TIMEOUT_MS,
            application_name="taguru-health",
        ) as conn:
            row = conn.execute("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')").fetchone()
    except psycopg.Error as exc:
        state = getattr(exc, "sqlstate", None)  # the class and SQLSTATE only: the server's text may quote data
        return f"the database does not answer ({type(exc).__name__}" + (f", SQLSTATE {state})" if state else ")")
    if row is None:
        return "the database gave no answer to the probe"
    if row[0]:
        return "the database is a standby in recovery (read-only)"
    if row[1] == "on":
        return "the database takes read-only transactions only"
    return None


def _sqlite(file: Path) -> str | None:
    # the -shm file is left out: SQLite maps it, and it must stay writable whatever else is frozen
    for path in (file, file.with_name(file.name + "-wal")):
        if path.exists() and not os.access(path, os.W_OK):
            return "the database file cannot be written (read-only or immutable)"
    return None
