"""The connection the shared statements run on (`?` placeholders): what SQLite's and psycopg's have in common."""

from __future__ import annotations

from typing import Any, Protocol


class Cursor(Protocol):
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Any: ...


class Sql(Protocol):
    """The connection a backend hands the shared statements (`?` placeholders)."""

    def execute(self, sql: str, params: Any = ...) -> Cursor: ...
    def executemany(self, sql: str, rows: Any) -> Any: ...
