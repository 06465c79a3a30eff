"""The rows of embedding vectors (derived data: rewritten whole, per store, by the commit of a refresh)."""

from __future__ import annotations

from typing import Any

from taguru_server.store.index.vectors import (
    ContextVectors,
    GlossStore,
    PassageStore,
    RowKey,
    VectorError,
    blob_of,
    vector_of,
)
from taguru_server.store.persist.sql import Sql

VECTOR_TABLES = ("vector_stores", "gloss_vectors", "passage_vectors")
GLOSS_STORE, PASSAGE_STORE = 0, 1
_SIGN = 1 << 63


def _signed(h: int) -> int:
    """A u64 hash as the i64 both databases hold."""
    return h - (1 << 64) if h >= _SIGN else h


def _unsigned(h: int) -> int:
    return h + (1 << 64) if h < 0 else h


def stored_text(value: Any) -> str:
    return bytes(value).decode("utf-8") if isinstance(value, (bytes, bytearray, memoryview)) else str(value)


def write_vectors(db: Sql, cid: int, vectors: ContextVectors, which: set[str]) -> None:
    """Replace the named vector stores of a context by what memory holds (absent: deleted)."""
    if "glosses" in which:
        g = vectors.glosses
        rows = []
        if g is not None:
            for kind, table in ((0, g.concepts), (1, g.labels)):
                for seq, (name, row) in enumerate(table.rows.items()):
                    rows.append((cid, kind, seq, name, _signed(table.hashes[name]), blob_of(row)))
        _replace_store(db, cid, GLOSS_STORE, "gloss_vectors", g, rows)
    if "passages" in which:
        p = vectors.passages
        prow = []
        if p is not None:
            prow = [
                (
                    cid,
                    i,
                    key.source,
                    key.paragraph,
                    _signed(key.para_hash),
                    None if key.question_hash is None else _signed(key.question_hash),
                    blob_of(p.matrix[i]),
                )
                for i, key in enumerate(p.keys)
            ]
        _replace_store(db, cid, PASSAGE_STORE, "passage_vectors", p, prow)


def _replace_store(
    db: Sql, cid: int, store: int, table: str, held: GlossStore | PassageStore | None, rows: list[tuple[Any, ...]]
) -> None:
    """Delete a context's vector store `store` (its header and its rows in `table`), then write what memory holds."""
    db.execute(f"DELETE FROM {table} WHERE ctx = ?", (cid,))
    db.execute("DELETE FROM vector_stores WHERE ctx = ? AND store = ?", (cid, store))
    if held is None:
        return
    db.execute("INSERT INTO vector_stores VALUES(?, ?, ?, ?)", (cid, store, held.model, held.width))
    if rows:
        db.executemany(f"INSERT INTO {table} VALUES({', '.join('?' * len(rows[0]))})", rows)


def gloss_store_of(model: str, width: int, rows: list[Any]) -> GlossStore | None:
    store = GlossStore(model, width)
    try:
        for kind, name, h, vec in rows:
            table = store.concepts if int(kind) == 0 else store.labels
            text = stored_text(name)
            table.hashes[text] = _unsigned(int(h))
            table.rows[text] = vector_of(vec, width)
    except VectorError:
        return None  # unreadable: costs a re-embed, never an outage
    return store


def passage_store_of(model: str, width: int, rows: list[Any]) -> PassageStore | None:
    keys: list[RowKey] = []
    matrix = []
    try:
        for source, paragraph, para_hash, question_hash, vec in rows:
            q = None if question_hash is None else _unsigned(int(question_hash))
            keys.append(RowKey(stored_text(source), int(paragraph), _unsigned(int(para_hash)), q))
            matrix.append(vector_of(vec, width))
    except VectorError:
        return None
    return PassageStore(model, width, keys, stack_rows(matrix, width))


def stack_rows(rows: list[Any], width: int) -> Any:
    import numpy as np

    return np.vstack(rows).astype(np.float32) if rows else np.zeros((0, width), dtype=np.float32)
