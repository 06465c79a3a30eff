"""A context as an import batch stream (`GET /contexts/{name}/export`, `taguru export`).

How the stream is made, and why:

- **One instant.** The export reads the store, never the in-memory context: a read transaction on
  its own connection to the SQLite file (WAL mode) sees the last commit before it began and
  nothing after, however long the stream takes. Graph, aliases, metadata and passages all come
  from that one snapshot, so a passage is never torn and the graph never half-written. Every
  write is committed before it is answered, so the store holds everything a client was told.
- **Refusals before the first byte.** `ContextExport.open` starts the snapshot and runs every
  check that can refuse (unknown context, the reserved source ids) before any line is made; the
  checks are point look-ups plus, only when a source is literally named `export:empty`, one scan
  of its attributions. After that, rendering can only fail if the store itself fails.
- **Bounded memory.** Nothing is gathered per context: the attribution records are un-nested
  and ordered by source (UTF-8 byte order, which is SQLite's binary collation) inside SQLite,
  whose sorter spills to temporary files; passages are read one row at a time in the same order;
  the sourceless residual is one pass over the live edges in id order. These three ordered
  streams are merged into batches, and `chunks` yields the lines in pieces of about
  `CHUNK_BYTES` (a piece is larger only when one line is).
- **Off the event loop.** Everything here is synchronous; the server pulls one chunk at a time
  in a worker thread, so the event loop only ever awaits.

The rendering follows the reference algorithm exactly (dead edges and unlinked records shed,
corroborated records as `count` identical lines of their average weight, `paragraph` on the
first of them, the residual under `export:unsourced`, `create` on the first batch, the live
aliases after the last, a header-only `export:empty` batch for an empty context), so the same
state always gives the same bytes, offline and over HTTP.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Iterator
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs

from taguru_server.store.errors import ApiError, Code, no_context
from taguru_server.store.model.context import CONCEPT, LABEL
from taguru_server.store.model.schema import stored
from taguru_server.store.persist.groups import GroupRecord
from taguru_server.store.transfer.schema_records import record_line
from taguru_server.store.wire import format_f32, format_f64

UNSOURCED = "export:unsourced"
EMPTY = "export:empty"
CHUNK_BYTES = 256 * 1024

_ATTRIBUTIONS = """
SELECT src.name, cs.name, lb.name, co.name, j.value
FROM edges e
CROSS JOIN json_each(e.attrs) j
CROSS JOIN sources src ON src.ctx = e.ctx AND src.id = json_extract(j.value, '$[0]')
CROSS JOIN concepts cs ON cs.ctx = e.ctx AND cs.id = e.s
CROSS JOIN labels lb ON lb.ctx = e.ctx AND lb.id = e.l
CROSS JOIN concepts co ON co.ctx = e.ctx AND co.id = e.o
WHERE e.ctx = ?1 AND e.count > 0 AND e.attrs != '' AND json_extract(j.value, '$[2]') > 0 AND src.name != ?2
ORDER BY src.name, e.id, j.key
"""
# (CROSS JOIN fixes the join order: each record finds its source by primary key, never a scan of sources)

_LIVE_EDGES = """
SELECT cs.name, lb.name, co.name, e.sum, e.count, e.attrs
FROM edges e
JOIN concepts cs ON cs.ctx = e.ctx AND cs.id = e.s
JOIN labels lb ON lb.ctx = e.ctx AND lb.id = e.l
JOIN concepts co ON co.ctx = e.ctx AND co.id = e.o
WHERE e.ctx = ?1 AND e.count > 0
ORDER BY e.id
"""

_PASSAGES = """
SELECT src.name, p.text, p.meta FROM passages p JOIN sources src ON src.ctx = p.ctx AND src.id = p.source
WHERE p.ctx = ?1 ORDER BY src.name
"""

_CONCEPT_ALIASES = """
SELECT a.alias, c.name FROM aliases a JOIN concepts c ON c.ctx = a.ctx AND c.id = a.target
WHERE a.ctx = ?1 AND a.kind = ?2 AND a.target IN (
  SELECT s FROM edges WHERE ctx = ?1 AND count > 0 UNION SELECT o FROM edges WHERE ctx = ?1 AND count > 0)
ORDER BY a.seq
"""

_LABEL_ALIASES = """
SELECT a.alias, c.name FROM aliases a JOIN labels c ON c.ctx = a.ctx AND c.id = a.target
WHERE a.ctx = ?1 AND a.kind = ?2 AND a.target IN (SELECT l FROM edges WHERE ctx = ?1 AND count > 0)
ORDER BY a.seq
"""

_RESERVED_ATTRIBUTION = """
SELECT 1 FROM edges e JOIN json_each(e.attrs) j
WHERE e.ctx = ?1 AND e.count > 0 AND e.attrs != ''
  AND json_extract(j.value, '$[0]') = ?2 AND json_extract(j.value, '$[2]') > 0
LIMIT 1
"""


# PostgreSQL (names are bytea holding UTF-8, so ORDER BY name is byte order there too)
_PG_ATTRIBUTIONS = """
SELECT src.name, cs.name, lb.name, co.name, j.value::text
FROM edges e
CROSS JOIN LATERAL jsonb_array_elements(convert_from(e.attrs, 'UTF8')::jsonb) WITH ORDINALITY AS j(value, key)
JOIN sources src ON src.ctx = e.ctx AND src.id = (j.value->>0)::bigint
JOIN concepts cs ON cs.ctx = e.ctx AND cs.id = e.s
JOIN labels lb ON lb.ctx = e.ctx AND lb.id = e.l
JOIN concepts co ON co.ctx = e.ctx AND co.id = e.o
WHERE e.ctx = ?1 AND e.count > 0 AND e.attrs <> '' AND (j.value->>2)::bigint > 0 AND src.name <> ?2
ORDER BY src.name, e.id, j.key
"""

_PG_RESERVED_ATTRIBUTION = """
SELECT 1 FROM edges e CROSS JOIN LATERAL jsonb_array_elements(convert_from(e.attrs, 'UTF8')::jsonb) AS j(value)
WHERE e.ctx = ?1 AND e.count > 0 AND e.attrs <> ''
  AND (j.value->>0)::bigint = ?2 AND (j.value->>2)::bigint > 0
LIMIT 1
"""


def reserved(source: str) -> ApiError:
    """409: a source id the stream format keeps for itself."""
    return ApiError(Code.CONFLICT, f"source id '{source}' is reserved by export — rename the source and re-export")


def unreadable(reason: str) -> ApiError:
    return ApiError(Code.INTERNAL, f"the store could not be read for export: {reason}")


def _s(text: str) -> str:
    return str(encode_basestring(text))


def _int(v: Any) -> str:
    return str(int(v))


def header_line(context: str, source: str, create: dict[str, Any] | None) -> str:
    line = f'{{"taguru_batch":1,"context":{_s(context)},"source":{_s(source)}'
    if create is None:
        return line + "}\n"
    body = f'"description":{_s(create.get("description") or "")}'
    if create.get("pinned"):
        body += ',"pinned":true'
    if create.get("dice_floor") is not None:
        body += f',"dice_floor":{format_f64(float(create["dice_floor"]))}'
    if create.get("semantic_floor") is not None:
        body += f',"semantic_floor":{format_f32(float(create["semantic_floor"]))}'
    return line + ',"create":{' + body + "}}\n"


def association_lines(subject: str, label: str, obj: str, total: float, count: int, paragraph: Any) -> str:
    """`count` identical lines of the average weight; `paragraph` rides the first one only."""
    head = f'{{"subject":{_s(subject)},"label":{_s(label)},"object":{_s(obj)},"weight":{format_f64(total / count)}'
    plain = head + "}\n"
    if paragraph is None:
        return plain * count
    return head + f',"paragraph":{_int(paragraph)}}}\n' + plain * (count - 1)


def passage_lines(text: str, stored_meta: str) -> str:
    """The passage line (text, stored_at, date, tags), then its questions, sections and locators."""
    m = json.loads(stored_meta)
    line = '{"passage":' + _s(text)
    if m.get("stored_at") is not None:
        line += f',"stored_at":{_int(m["stored_at"])}'
    if m.get("date") is not None:
        line += f',"date":{_int(m["date"])}'
    if m.get("tags"):
        line += ',"tags":[' + ",".join(_s(t) for t in m["tags"]) + "]"
    out = [line + "}\n"]
    out.extend(f'{{"paragraph":{_int(p)},"question":{_s(q)}}}\n' for p, q in m.get("questions") or [])
    out.extend(f'{{"paragraph":{_int(p)},"section":{_s(s)}}}\n' for p, s in m.get("sections") or [])
    out.extend(
        f'{{"paragraph":{_int(p)},"locator":{{"kind":{_s(k)},"value":{_s(v)}}}}}\n'
        for p, k, v in m.get("locators") or []
    )
    return "".join(out)


def connect(db_file: Path) -> sqlite3.Connection:
    """A connection of its own that cannot write (and does not create a missing file)."""
    uri = "file:" + quote(str(db_file)) + "?mode=rw"
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA query_only = ON")
    return db


class _PgRows:
    """A psycopg cursor as the export iterates it: `fetchone`, and `next()` row by row (server-side)."""

    def __init__(self, cur: Any) -> None:
        self.cur = cur
        self.it = iter(cur)

    def fetchone(self) -> Any:
        return next(self.it, None)

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        return next(self.it)


class _PgExportDb:
    """A read-only snapshot on PostgreSQL: the export's statements with `?N` / `?` placeholders."""

    def __init__(self, url: str) -> None:
        import psycopg

        from taguru_server.store.persist.postgres import configure_connection

        self.conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        configure_connection(self.conn)
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._named = 0

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> _PgRows:
        if "?1" in sql:
            text = re.sub(r"\?(\d)", lambda m: f"%(p{m.group(1)})s", sql)
            args: Any = {f"p{i}": v for i, v in enumerate(params, 1)}
        else:
            text, args = sql.replace("?", "%s"), params
        self._named += 1  # a named (server-side) cursor streams rows instead of fetching them all
        cur = self.conn.cursor(name=f"export{self._named}", binary=True)
        cur.execute(text, args)
        return _PgRows(cur)

    def close(self) -> None:
        self.conn.close()


@attrs.define
class ContextExport:
    """One context's export over one read transaction; `open` refuses, `chunks` renders, `close` ends it."""

    db: Any
    name: str
    cid: int
    meta: dict[str, Any]
    sql_attributions: str = attrs.field(init=False)
    sql_reserved: str = attrs.field(init=False)
    closed: bool = attrs.field(init=False, default=False)
    # what the last rendering wrote (the CLI reports it)
    batches: int = attrs.field(init=False, default=0)
    associations: int = attrs.field(init=False, default=0)
    aliases: int = attrs.field(init=False, default=0)
    passages: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        pg = isinstance(self.db, _PgExportDb)
        self.sql_attributions = _PG_ATTRIBUTIONS if pg else _ATTRIBUTIONS
        self.sql_reserved = _PG_RESERVED_ATTRIBUTION if pg else _RESERVED_ATTRIBUTION

    @classmethod
    def open(cls, store: Path | str, name: str) -> ContextExport:
        """Start the snapshot and run every refusal: 404 for an unknown context, 409 for reserved ids.

        `store` is the SQLite file, or the PostgreSQL URL of a shared store.
        """
        errors = _errors()
        db = snapshot(store)
        try:
            row = db.execute("SELECT id, meta FROM contexts WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise no_context(name)
            export = cls(db, name, int(row[0]), json.loads(row[1]))
            export._check_reserved()
            return export
        except BaseException as exc:
            _close(db)
            if isinstance(exc, errors):
                raise unreadable(_reason(exc)) from None
            raise

    def _source_id(self, name: str) -> int | None:
        row = self.db.execute("SELECT id FROM sources WHERE ctx = ? AND name = ?", (self.cid, name)).fetchone()
        return None if row is None else int(row[0])

    def _check_reserved(self) -> None:
        """The reference refuses while rendering (edges first, then passages in source order): same order here."""
        db, cid = self.db, self.cid
        empty = self._source_id(EMPTY)
        if empty is not None and db.execute(self.sql_reserved, (cid, empty)).fetchone():
            raise reserved(EMPTY)
        for source in (EMPTY, UNSOURCED):
            sid = self._source_id(source)
            if (
                sid is not None
                and db.execute("SELECT 1 FROM passages WHERE ctx = ? AND source = ?", (cid, sid)).fetchone()
            ):
                raise reserved(source)

    def close(self) -> None:
        """End the snapshot (idempotent)."""
        if not self.closed:
            self.closed = True
            _close(self.db)

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The stream in UTF-8 pieces of about `size` bytes; the snapshot ends when it is exhausted or closed."""
        try:
            pending: list[str] = []
            held = 0
            for text in self.lines():
                pending.append(text)
                held += len(text)
                if held >= size:
                    yield "".join(pending).encode("utf-8")
                    pending, held = [], 0
            if pending:
                yield "".join(pending).encode("utf-8")
        finally:
            self.close()

    def lines(self) -> Iterator[str]:
        """The export, a batch at a time (each item is one or more whole lines), after the context's
        `taguru_schema` record when its schema's mode is not off."""
        self.batches = self.associations = self.aliases = self.passages = 0
        schema_text = self.meta.get("schema")
        if schema_text:  # a schema in force travels first; an `off` one does not travel
            schema = stored(schema_text)
            if schema.mode != "off":
                yield record_line(self.name, schema) + "\n"
        first = True
        for source, passage, attributed in self._buckets():
            self.batches += 1
            yield header_line(self.name, source, self.meta if first else None)
            first = False
            if passage is not None:
                self.passages += 1
                yield passage_lines(*passage)
            for subject, label, obj, total, count, paragraph in attributed:
                self.associations += count
                yield association_lines(subject, label, obj, total, count, paragraph)
        if first:
            self.batches = 1
            yield header_line(self.name, EMPTY, self.meta)
            return
        for kind, sql, word in ((CONCEPT, _CONCEPT_ALIASES, "concept"), (LABEL, _LABEL_ALIASES, "label")):
            for alias, canonical in self.db.execute(sql, (self.cid, kind)):
                self.aliases += 1
                yield f'{{"alias":{_s(alias)},"canonical":{_s(canonical)},"kind":"{word}"}}\n'

    def _buckets(self) -> Iterator[tuple[str, tuple[str, str] | None, Iterable[tuple[str, str, str, float, int, Any]]]]:
        """(source, passage row or None, its association records) for every batch, in byte order of source.

        Three ordered streams merged by source: attributions (grouped), passages, and the residual.
        """
        records = _Grouped(self.db.execute(self.sql_attributions, (self.cid, UNSOURCED)))
        passages = self.db.execute(_PASSAGES, (self.cid,))
        residual: _Peek | None = _Peek(self._residual())
        passage = next(passages, None)
        while True:
            candidates = [name for name in (records.source, passage[0] if passage else None) if name is not None]
            if residual is not None and (not candidates or UNSOURCED < min(candidates)):
                if residual.has_next():
                    yield UNSOURCED, None, residual
                residual = None
                continue
            if not candidates:
                return
            source = min(candidates)
            text: tuple[str, str] | None = None
            if passage is not None and passage[0] == source:
                text = (passage[1], passage[2])
                passage = next(passages, None)
            yield source, text, records.take(source)

    def _residual(self) -> Iterator[tuple[str, str, str, float, int, Any]]:
        """The sourceless share of every live edge, in edge-id order (records of `export:unsourced` fold in)."""
        unsourced = self._source_id(UNSOURCED)
        loads = json.loads
        for subject, label, obj, total, count, stored_attrs in self.db.execute(_LIVE_EDGES, (self.cid,)):
            attributed_count = 0
            attributed_sum = 0.0
            for sid, rsum, rcount, _par in loads(stored_attrs) if stored_attrs else ():
                if rcount == 0 or sid == unsourced:
                    continue
                attributed_count += rcount
                attributed_sum += rsum
            rest = count - attributed_count
            if rest > 0:
                total = float(total)
                yield subject, label, obj, (total / count) * count - attributed_sum, rest, None


class _Peek:
    """An iterator that can tell whether it has another item without losing it."""

    def __init__(self, it: Iterator[tuple[str, str, str, float, int, Any]]) -> None:
        self.it = it
        self.head: list[tuple[str, str, str, float, int, Any]] = []

    def has_next(self) -> bool:
        if not self.head:
            self.head = [x for x in (next(self.it, None),) if x is not None]
        return bool(self.head)

    def __iter__(self) -> Iterator[tuple[str, str, str, float, int, Any]]:
        yield from self.head
        self.head = []
        yield from self.it


class _Grouped:
    """The attribution rows (ordered by source) handed out one source at a time."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows
        self.row: tuple[str, str, str, str, str] | None = next(rows, None)

    @property
    def source(self) -> str | None:
        return None if self.row is None else self.row[0]

    def take(self, source: str) -> Iterator[tuple[str, str, str, float, int, Any]]:
        loads = json.loads
        while self.row is not None and self.row[0] == source:
            _src, subject, label, obj, record = self.row
            _sid, rsum, rcount, paragraph = loads(record)
            yield subject, label, obj, float(rsum), int(rcount), paragraph
            self.row = next(self.rows, None)


def _errors() -> tuple[type[BaseException], ...]:
    try:
        import psycopg
    except ImportError:
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


def _close(db: Any) -> None:
    try:
        if isinstance(db, sqlite3.Connection) and db.in_transaction:
            db.execute("ROLLBACK")
    except sqlite3.Error:
        pass
    try:
        db.close()
    except _errors():
        pass


def _reason(exc: BaseException) -> str:
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    return str(name).removeprefix("SQLITE_").lower()


def snapshot(store: Path | str) -> Any:
    """A read-only snapshot of the store (the SQLite file, or the PostgreSQL URL), or the 500 `unreadable`."""
    try:
        db: Any = _PgExportDb(store) if isinstance(store, str) else connect(store)
    except _errors() as exc:
        if isinstance(store, str):
            from taguru_server.store.persist.postgres import connect_failure

            raise ApiError(Code.INTERNAL, connect_failure(store, exc)) from None
        raise unreadable(_reason(exc)) from None
    if not isinstance(db, _PgExportDb):
        try:
            db.execute("BEGIN")
        except _errors() as exc:
            _close(db)
            raise unreadable(_reason(exc)) from None
    return db


def store_directory(store: Path | str) -> tuple[list[str], dict[str, GroupRecord]]:
    """Every context name (sorted) and every group record of a store (the SQLite file, or the PostgreSQL
    URL), read in one snapshot: what a full `taguru export --out` writes."""
    errors = _errors()
    db = snapshot(store)
    try:
        names = sorted(str(row[0]) for row in db.execute("SELECT name FROM contexts"))
        groups = {str(n): GroupRecord.from_json(str(b)) for n, b in db.execute("SELECT name, body FROM context_groups")}
        return names, dict(sorted(groups.items()))
    except errors as exc:
        raise unreadable(_reason(exc)) from None
    finally:
        _close(db)


def export_text(store: Path | str, name: str) -> str:
    """The whole export as one string (tests and small contexts)."""
    return b"".join(ContextExport.open(store, name).chunks()).decode("utf-8")
