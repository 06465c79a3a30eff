"""The embedded default persistence: one SQLite database in WAL mode under the data dir."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Iterable

from store.context import CONCEPT, LABEL, Context, Dirty, Meta, Passage

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
"""

_META_FIELDS = (
    "description", "pinned", "dice_floor", "semantic_floor", "rev_graph", "rev_passages", "rev_config",
    "reads", "empty_reads", "writes", "dead_attributions",
)


def _meta_json(meta: Meta) -> str:
    return json.dumps({f: getattr(meta, f) for f in _META_FIELDS}, ensure_ascii=False)


class SqlitePersistence:
    """Durable rows for every context; a commit is one transaction, synced before it returns."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir)
        self.path.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path / "taguru.sqlite3", isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=OFF")
        self.db.executescript(SCHEMA)
        self._alias_seq = self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM aliases").fetchone()[0]

    def close(self) -> None:
        self.db.close()

    def list_contexts(self) -> list[tuple[int, str, Meta]]:
        rows = self.db.execute("SELECT id, name, meta FROM contexts ORDER BY id").fetchall()
        return [(cid, name, Meta(**json.loads(meta))) for cid, name, meta in rows]

    def next_id(self) -> int:
        return int(self.db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM contexts").fetchone()[0])

    def delete(self, cid: int) -> None:
        with self._tx() as db:
            for table in ("concepts", "labels", "sources", "aliases", "edges", "passages"):
                db.execute(f"DELETE FROM {table} WHERE ctx = ?", (cid,))
            db.execute("DELETE FROM contexts WHERE id = ?", (cid,))

    def commit(self, contexts: Iterable[Context]) -> None:
        """Write what each context's dirty set names, all in one transaction."""
        todo = [c for c in contexts if c.dirty.any() or c.created]
        if not todo:
            return
        with self._tx() as db:
            for ctx in todo:
                self._write(db, ctx)
        for ctx in todo:
            ctx.dirty = Dirty(len(ctx.concepts), len(ctx.labels), len(ctx.sources))
            ctx.created = False

    def _tx(self) -> _Transaction:
        return _Transaction(self.db)

    def _write(self, db: sqlite3.Connection, ctx: Context) -> None:
        d = ctx.dirty
        cid = ctx.cid
        if ctx.created:
            db.execute("INSERT INTO contexts(id, name, meta) VALUES(?, ?, ?)", (cid, ctx.name, _meta_json(ctx.meta)))
        else:
            db.execute("UPDATE contexts SET meta = ? WHERE id = ?", (_meta_json(ctx.meta), cid))
        if len(ctx.concepts) > d.concepts_from:
            db.executemany(
                "INSERT INTO concepts VALUES(?, ?, ?)",
                ((cid, i, ctx.concepts[i]) for i in range(d.concepts_from, len(ctx.concepts))),
            )
        if len(ctx.labels) > d.labels_from:
            db.executemany(
                "INSERT INTO labels VALUES(?, ?, ?)",
                ((cid, i, ctx.labels[i]) for i in range(d.labels_from, len(ctx.labels))),
            )
        if len(ctx.sources) > d.sources_from:
            db.executemany(
                "INSERT INTO sources VALUES(?, ?, ?)",
                ((cid, i, ctx.sources[i]) for i in range(d.sources_from, len(ctx.sources))),
            )
        if d.edges:
            db.executemany(
                "INSERT OR REPLACE INTO edges VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    (cid, e, ctx.e_s[e], ctx.e_l[e], ctx.e_o[e], ctx.e_sum[e], ctx.e_cnt[e],
                     json.dumps(ctx.e_attr[e]) if ctx.e_attr[e] else "")
                    for e in sorted(d.edges)
                ),
            )
        for (kind, alias), target in d.aliases.items():
            if target is None:
                db.execute("DELETE FROM aliases WHERE ctx = ? AND kind = ? AND alias = ?", (cid, kind, alias))
            else:
                self._alias_seq += 1
                db.execute(
                    "INSERT OR REPLACE INTO aliases VALUES(?, ?, ?, ?, ?)", (cid, kind, alias, target, self._alias_seq)
                )
        for sid in sorted(d.passages):
            passage = ctx.passages.get(sid)
            if passage is None:
                db.execute("DELETE FROM passages WHERE ctx = ? AND source = ?", (cid, sid))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO passages VALUES(?, ?, ?, ?)",
                    (cid, sid, passage.text, json.dumps(passage.meta_json(), ensure_ascii=False)),
                )

    def load(self, cid: int, name: str, meta: Meta) -> Context:
        """Rebuild a context and all its indexes from its rows."""
        ctx = Context(cid, name, meta)
        db = self.db
        for (cname,) in db.execute("SELECT name FROM concepts WHERE ctx = ? ORDER BY id", (cid,)):
            ctx.intern_concept(cname)
        for (lname,) in db.execute("SELECT name FROM labels WHERE ctx = ? ORDER BY id", (cid,)):
            ctx.intern_label(lname)
        for (sname,) in db.execute("SELECT name FROM sources WHERE ctx = ? ORDER BY id", (cid,)):
            ctx.intern_source(sname)
        for kind, alias, target in db.execute(
            "SELECT kind, alias, target FROM aliases WHERE ctx = ? ORDER BY seq", (cid,)
        ):
            ctx.aliases[kind][alias] = target
            ctx.lexicons[kind].add(alias, target)
        e_s, e_l, e_o, e_sum, e_cnt, e_attr = ctx.e_s, ctx.e_l, ctx.e_o, ctx.e_sum, ctx.e_cnt, ctx.e_attr
        out_edges, in_edges, label_edges, source_edges = ctx.out_edges, ctx.in_edges, ctx.label_edges, ctx.source_edges
        edge_of = ctx.edge_of
        loads = json.loads
        for e, s, lab, o, esum, cnt, attrs in db.execute(
            "SELECT id, s, l, o, sum, count, attrs FROM edges WHERE ctx = ? ORDER BY id", (cid,)
        ):
            e_s.append(s)
            e_l.append(lab)
            e_o.append(o)
            e_sum.append(float(esum))
            e_cnt.append(cnt)
            records = loads(attrs) if attrs else []
            e_attr.append(records)
            edge_of[(s, lab, o)] = e
            out_edges[s].append(e)
            if o != s:
                in_edges[o].append(e)
            label_edges[lab].append(e)
            for rec in records:
                source_edges.setdefault(rec[0], set()).add(e)
        for sid, text, pmeta in db.execute(
            "SELECT source, text, meta FROM passages WHERE ctx = ? ORDER BY source", (cid,)
        ):
            m = loads(pmeta)
            passage = Passage(
                text,
                [(p, q) for p, q in m["questions"]],
                {p: s for p, s in m["sections"]},
                {p: (k, v) for p, k, v in m["locators"]},
                m["tags"],
                m["stored_at"],
                m["date"],
            )
            ctx.passages[sid] = passage
            ctx._index_passage(sid, passage)
        ctx.dirty = Dirty(len(ctx.concepts), len(ctx.labels), len(ctx.sources))
        return ctx


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.db.execute("COMMIT")
        else:
            self.db.execute("ROLLBACK")


__all__ = ["SqlitePersistence", "CONCEPT", "LABEL"]
