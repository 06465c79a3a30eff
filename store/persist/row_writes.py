"""What a commit writes: a context's dirty rows, the change-log row and feed events, and the group rows.

Every statement is one both backends read alike (see `rows.py`); each function runs on the connection
of the transaction it is handed.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

from taguru_server.store.model.context import Context, Meta
from taguru_server.store.persist.groups import GroupRecord, context_renamed
from taguru_server.store.persist.sql import Sql
from taguru_server.store.persist.vector_rows import write_vectors

FEED_RETAINED = 1024  # change-feed events kept per context (the reference's ring size)
CHANGES_RETAINED = 100_000  # change-log rows kept for other processes to catch up from

UPSERT_EDGE = (
    "INSERT INTO edges VALUES(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(ctx, id) DO UPDATE SET s = excluded.s, "
    "l = excluded.l, o = excluded.o, sum = excluded.sum, count = excluded.count, attrs = excluded.attrs"
)
UPSERT_ALIAS = (
    "INSERT INTO aliases VALUES(?, ?, ?, ?, ?) ON CONFLICT(ctx, kind, alias) DO UPDATE SET "
    "target = excluded.target, seq = excluded.seq"
)
UPSERT_PASSAGE = (
    "INSERT INTO passages VALUES(?, ?, ?, ?) ON CONFLICT(ctx, source) DO UPDATE SET "
    "text = excluded.text, meta = excluded.meta"
)


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
    "schema",
)


def meta_json(meta: Meta) -> str:
    return json.dumps({f: getattr(meta, f) for f in _META_FIELDS}, ensure_ascii=False)


_epochs = itertools.count()


def new_epoch() -> int:
    """A change-feed epoch: the wall clock in nanoseconds plus a counter; never 0, unique per process and call."""
    return (time.time_ns() + next(_epochs)) & 0x7FFF_FFFF_FFFF_FFFF or 1


def prepared_write(ctx: Context) -> Callable[[Sql], int]:
    """A context's commit as a call over a connection: every value it writes is read from the context now.

    The call appends the change-log row and feed events, then the rows the dirty set names, and returns
    the change-log seq.
    """
    d = ctx.dirty
    cid = ctx.cid
    touched: dict[str, Any] = {
        "created": ctx.created,
        "edges": sorted(d.edges),
        "aliases": sorted([kind, alias] for kind, alias in d.aliases),
        "passages": sorted(d.passages),
    }
    if d.vectors:  # followers reload these vector stores of the context (`Registry.catch_up`)
        touched["vectors"] = sorted(d.vectors)
    touched_json = json.dumps(touched)
    events = [(kind, json.dumps(fields, ensure_ascii=False)) for kind, fields in d.events]
    created, name, meta = ctx.created, ctx.name, meta_json(ctx.meta)
    concepts = [(cid, i, ctx.concepts[i]) for i in range(d.concepts_from, len(ctx.concepts))]
    labels = [(cid, i, ctx.labels[i]) for i in range(d.labels_from, len(ctx.labels))]
    sources = [(cid, i, ctx.sources[i]) for i in range(d.sources_from, len(ctx.sources))]
    e_s, e_l, e_o, e_sum, e_cnt, e_attr = ctx.edges.columns()
    edges = [
        (cid, e, e_s[e], e_l[e], e_o[e], e_sum[e], e_cnt[e], attrs_json(records) if (records := e_attr[e]) else "")
        for e in sorted(d.edges)
    ]
    gone = [(cid, kind, alias) for (kind, alias), target in d.aliases.items() if target is None]
    kept = [(kind, alias, target) for (kind, alias), target in d.aliases.items() if target is not None]
    dropped: list[tuple[int, int]] = []
    stored: list[tuple[int, int, str, str]] = []
    for sid in sorted(d.passages):
        passage = ctx.passages.get(sid)
        if passage is None:
            dropped.append((cid, sid))
        else:
            stored.append((cid, sid, passage.text, json.dumps(passage.meta_json(), ensure_ascii=False)))
    vectors, which = ctx.vectors, set(d.vectors)

    def write(db: Sql) -> int:
        seq = log_change(db, cid, touched_json, events)
        if created:
            db.execute("INSERT INTO contexts(id, name, meta) VALUES(?, ?, ?)", (cid, name, meta))
            db.execute(
                "INSERT INTO feed_epochs VALUES(?, ?) ON CONFLICT(ctx) DO UPDATE SET epoch = excluded.epoch",
                (cid, new_epoch()),
            )
        else:
            db.execute("UPDATE contexts SET meta = ? WHERE id = ?", (meta, cid))
        for table, rows in (("concepts", concepts), ("labels", labels), ("sources", sources)):
            if rows:
                db.executemany(f"INSERT INTO {table} VALUES(?, ?, ?)", rows)
        if edges:
            db.executemany(UPSERT_EDGE, edges)
        # an alias's seq orders registration (the load order): the commit's change-log seq (unique and
        # increasing across every process writing the store) in the high bits, its order in the commit below
        if gone:
            db.executemany("DELETE FROM aliases WHERE ctx = ? AND kind = ? AND alias = ?", gone)
        if kept:
            base = seq << 32
            added = [(cid, kind, alias, target, base + i) for i, (kind, alias, target) in enumerate(kept, 1)]
            db.executemany(UPSERT_ALIAS, added)
        if dropped:
            db.executemany("DELETE FROM passages WHERE ctx = ? AND source = ?", dropped)
        if stored:
            db.executemany(UPSERT_PASSAGE, stored)
        if which:
            write_vectors(db, cid, vectors, which)
        return seq

    return write


def log_change(db: Sql, cid: int, touched: str, events: list[tuple[str, str]]) -> int:
    """Append the commit's change-log row (what it touched) and its change-feed events, numbered in order."""
    insert = "INSERT INTO changes(ctx, touched) VALUES(?, ?) RETURNING seq"
    seq = int(db.execute(insert, (cid, touched)).fetchone()[0])
    if seq % 1000 == 0 and seq > CHANGES_RETAINED:
        db.execute("DELETE FROM changes WHERE seq <= ?", (seq - CHANGES_RETAINED,))
    if not events:
        return seq
    latest = db.execute("SELECT COALESCE(MAX(seq), 0) FROM feed WHERE ctx = ?", (cid,)).fetchone()[0]
    db.executemany(
        "INSERT INTO feed VALUES(?, ?, ?, ?)",
        [(cid, latest + i, kind, fields) for i, (kind, fields) in enumerate(events, 1)],
    )
    latest += len(events)
    if latest > FEED_RETAINED:
        db.execute("DELETE FROM feed WHERE ctx = ? AND seq <= ?", (cid, latest - FEED_RETAINED))
    return seq


GROUPS_CHANGED = '{"groups":true}'
RELOAD = '{"reload":true}'  # a context rebuilt whole (compacted): other processes load it afresh
EVICTED = ""  # the kind of the feed row that keeps a context's event numbering once its events were evicted


def evict_feed(db: Sql, cid: int) -> None:
    """Drop every change-feed event a context holds, keeping its numbering (inside a compaction).

    The events name sources and concepts, so an erasure cannot keep them. What is left is one row
    of kind EVICTED at the last seq, never served: the epoch stays, so a cursor that had seen every
    event still reads on (the next event is that seq + 1), and one that had not answers 410, as
    when retention drops events it had not read (`feed.check_held`).
    """
    latest = db.execute("SELECT COALESCE(MAX(seq), 0) FROM feed WHERE ctx = ?", (cid,)).fetchone()[0]
    db.execute("DELETE FROM feed WHERE ctx = ?", (cid,))
    if latest:
        db.execute("INSERT INTO feed VALUES(?, ?, ?, ?)", (cid, int(latest), EVICTED, "{}"))


def forget_changes(db: Sql, cid: int, before: int, touched: str) -> None:
    """Drop context `cid`'s change-log rows older than `before`, the row that says it is to be loaded
    afresh (or is gone), written as `touched`, in the same transaction.

    Followers lose nothing by it: that newer row makes them drop the context whatever the older
    rows said, and no other context's row is touched. The log's oldest row is what a follower's
    gap check reads (`oldest > applied + 1`), so when it is one of these it stays, rewritten to
    `touched` (no text of the context left in it): removing it would move the oldest row up and
    make a follower conclude a gap that is not there.
    """
    oldest = db.execute("SELECT seq, ctx FROM changes ORDER BY seq LIMIT 1").fetchone()
    keep = int(oldest[0]) if oldest is not None and int(oldest[1]) == cid and int(oldest[0]) < before else None
    if keep is None:
        db.execute("DELETE FROM changes WHERE ctx = ? AND seq < ?", (cid, before))
        return
    db.execute("UPDATE changes SET touched = ? WHERE seq = ?", (touched, keep))
    db.execute("DELETE FROM changes WHERE ctx = ? AND seq > ? AND seq < ?", (cid, keep, before))


def read_groups(db: Sql) -> dict[str, GroupRecord]:
    return {name: GroupRecord.from_json(body) for name, body in db.execute("SELECT name, body FROM context_groups")}


def put_groups(db: Sql, records: dict[str, GroupRecord]) -> bool:
    """Upsert the given group rows; whether there were any."""
    if records:
        db.executemany(
            "INSERT INTO context_groups VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET body = excluded.body",
            [(name, record.to_json()) for name, record in sorted(records.items())],
        )
    return bool(records)


def log_groups(db: Sql) -> int:
    """The change-log row of a group write: context id 0, which no context has; followers reload the groups."""
    return int(
        db.execute("INSERT INTO changes(ctx, touched) VALUES(0, ?) RETURNING seq", (GROUPS_CHANGED,)).fetchone()[0]
    )


def rename_in_groups(db: Sql, old: str, new: str) -> int | None:
    """Inside a caller's transaction (a context rename): every group naming `old` now names `new`.

    Returns the change-log seq of the group write, or None when no group named `old`.
    """
    if not put_groups(db, context_renamed(read_groups(db), old, new)):
        return None
    return log_groups(db)


def attrs_json(records: list[list]) -> str:
    """The JSON array of an edge's attribution records [source, sum, count, paragraph|null].

    Sums are finite (they saturate) and repr() of a float is its JSON number, so this is
    what json.dumps writes, built without the encoder's per-call overhead.
    """
    return (
        "["
        + ",".join([f"[{sid},{rsum!r},{cnt},{'null' if par is None else par}]" for sid, rsum, cnt, par in records])
        + "]"
    )
