"""Which store a server opens: the embedded SQLite database in the data dir, or a shared PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

from taguru_server.store.persist.persistence import Persistence


def open_store(
    data_dir: str, database_url: str | None, report: Callable[..., None] | None = None, checked: bool = False
) -> Persistence:
    """PostgreSQL when a database URL is given (every process on it is a replica), else SQLite in `data_dir`."""
    if database_url:
        from taguru_server.store.persist.postgres import PostgresPersistence

        return PostgresPersistence(database_url)
    from taguru_server.store.persist.sqlite import SqlitePersistence

    return SqlitePersistence(data_dir, report, checked)


def is_shared(database_url: str | None, workers: int) -> bool:
    """Whether other processes may write the same store (PostgreSQL, or several workers)."""
    return bool(database_url) or workers > 1
