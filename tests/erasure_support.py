"""Where a marker string's bytes are still held: in any row of any table of the store, or any file of a directory.

A marker is looked for whole and by its parts (an ASCII word and a CJK run, as the tokenizer
splits them), each as UTF-8 and as JSON with non-ASCII escaped (`\\u79d8`, how `json.dumps`
writes text by default), so a trace is found whichever way a table or file encodes it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def needles(*texts: str) -> list[bytes]:
    """Every text as UTF-8 and JSON-escaped (once each when they are the same bytes)."""
    out: list[bytes] = []
    for text in texts:
        for form in (text.encode("utf-8"), json.dumps(text)[1:-1].encode("ascii")):
            if form not in out:
                out.append(form)
    return out


def marker_needles(ascii_part: str, cjk_part: str) -> list[bytes]:
    """A marker (`ascii_part + cjk_part`), its two parts and the CJK part's first bigram (a BM25 term)."""
    return needles(ascii_part + cjk_part, ascii_part, cjk_part, cjk_part[:2])


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return str(value).encode("utf-8", "surrogatepass")


def _found(table: str, rows: list[Any], wanted: list[bytes]) -> set[tuple[str, bytes]]:
    hits: set[tuple[str, bytes]] = set()
    for row in rows:
        blob = b"\x00".join(_as_bytes(v) for v in row)
        hits.update((table, w) for w in wanted if w in blob)
    return hits


def sqlite_rows_holding(db_file: Path, wanted: list[bytes]) -> set[tuple[str, bytes]]:
    """(table, needle) for every table of the SQLite database with a row holding a needle."""
    db = sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)
    db.text_factory = bytes
    try:
        tables = [bytes(t).decode() for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert {"changes", "feed", "aliases", "passages", "passage_vectors"} <= set(tables)
        hits: set[tuple[str, bytes]] = set()
        for table in tables:
            hits |= _found(table, db.execute(f'SELECT * FROM "{table}"').fetchall(), wanted)
        return hits
    finally:
        db.close()


def postgres_rows_holding(url: str, wanted: list[bytes]) -> set[tuple[str, bytes]]:
    """(table, needle) for every table of the store's schema with a row holding a needle (bytea as bytes)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            ).fetchall()
        ]
        assert {"changes", "feed", "aliases", "passages", "passage_vectors"} <= set(tables)
        hits: set[tuple[str, bytes]] = set()
        for table in tables:
            hits |= _found(table, conn.execute(f'SELECT * FROM "{table}"').fetchall(), wanted)
        return hits


def rows_holding(store: Any, wanted: list[bytes]) -> set[tuple[str, bytes]]:
    """Every (table, needle) of a running store (SQLite or PostgreSQL persistence object)."""
    url = getattr(store, "url", None)
    if url:
        return postgres_rows_holding(url, wanted)
    return sqlite_rows_holding(store.file, wanted)


def files_holding(directory: Path, wanted: list[bytes]) -> set[tuple[str, bytes]]:
    """(relative path, needle) for every file under `directory` whose bytes hold a needle."""
    hits: set[tuple[str, bytes]] = set()
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            hits.update((str(path.relative_to(directory)), w) for w in wanted if w in data)
    return hits
