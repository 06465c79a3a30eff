"""Bringing a loaded context back in line with the store, record by record.

A context in memory can differ from its durable rows in two ways: it holds changes whose commit
failed (memory ahead of the store), or another process committed changes it has not seen (the
store ahead of memory). Both are repaired the same way: name the records that may differ (a
dirty set, or the change log's entries), read exactly those rows back, and apply them here.
Nothing else is reloaded, so a refused write costs a few row reads, not a context load.

Ids are positions: concepts, labels, sources and edges are numbered in the order they were
interned and never renumbered, so "the records from id N on" is both what a failed commit must
forget and what another process may have added.
"""

from __future__ import annotations

from typing import Any

import attrs

from taguru_server.store.model.context import CONCEPT, LABEL, Context, Meta
from taguru_server.store.model.passage import Passage

EdgeRow = tuple[float, int, list[list[Any]]]  # sum, count, attribution records


@attrs.define
class DurableRows:
    """The durable state of the records that may differ between a context in memory and its store."""

    meta: Meta
    concepts_from: int
    concepts: list[str]  # names of the concepts with id >= concepts_from, in id order
    labels_from: int
    labels: list[str]
    sources_from: int
    sources: list[str]
    edges_from: int
    new_edges: list[tuple[int, int, int, EdgeRow]]  # (s, label, o, row) of ids >= edges_from, in id order
    edges: dict[int, EdgeRow | None]  # touched edges below edges_from
    aliases: dict[tuple[int, str], int | None]  # None: no such alias in the store
    passages: dict[int, Passage | None]  # None: no passage for that source in the store


def apply_rows(ctx: Context, rows: DurableRows) -> None:
    """Make `ctx` hold exactly the durable state `rows` describes for the records it names."""
    _apply_aliases(ctx, rows.aliases)
    for sid in rows.passages:
        ctx._drop_passage_index(sid)
        ctx.passages.pop(sid, None)
    _truncate_edges(ctx, rows.edges_from)
    for e, row in rows.edges.items():
        if e < len(ctx.edges.subject):
            _set_edge(ctx, e, row if row is not None else (0.0, 0, []))
    _truncate_names(ctx, rows.concepts_from, rows.labels_from, rows.sources_from)
    for name in rows.concepts:
        _append_concept(ctx, name)
    for name in rows.labels:
        _append_label(ctx, name)
    for name in rows.sources:
        ctx.source_id[name] = len(ctx.sources)
        ctx.sources.append(name)
    for s, lab, o, row in rows.new_edges:
        _append_edge(ctx, s, lab, o, row)
    for sid, passage in rows.passages.items():
        if passage is not None:
            ctx.passages[sid] = passage
            ctx._index_passage(sid, passage)
    ctx.meta = rows.meta
    ctx.graph_version += 1
    ctx.read_cache.clear()
    ctx._source_rank = None
    ctx.mark_clean()


def _apply_aliases(ctx: Context, aliases: dict[tuple[int, str], int | None]) -> None:
    for (kind, alias), target in aliases.items():
        table = ctx.aliases[kind]
        if alias in table:
            del table[alias]
            ctx.lexicons[kind].remove(alias)
        if target is not None:
            table[alias] = target
            ctx.lexicons[kind].add(alias, target)


def _unlink(ids: list[int], e: int) -> None:
    if ids and ids[-1] == e:  # edge ids are appended in increasing order, so the newest is last
        ids.pop()
    elif e in ids:
        ids.remove(e)


def _truncate_edges(ctx: Context, keep: int) -> None:
    """Forget the edges with id >= keep (created by changes the store does not hold)."""
    for e in range(len(ctx.edges.subject) - 1, keep - 1, -1):
        s, lab, o = ctx.edges.subject[e], ctx.edges.label[e], ctx.edges.object[e]
        ctx.edges.by_triple.pop((s, lab, o), None)
        _unlink(ctx.out_edges.own(s), e)
        if o != s:
            _unlink(ctx.in_edges.own(o), e)
        _unlink(ctx.label_edges.own(lab), e)
        for rec in ctx.edges.attributions[e]:
            linked = ctx.source_edges.get(rec[0])
            if linked is not None:
                linked.discard(e)
    for column in ctx.edges.columns():
        del column[keep:]


def _set_edge(ctx: Context, e: int, row: EdgeRow) -> None:
    for rec in ctx.edges.attributions[e]:
        linked = ctx.source_edges.get(rec[0])
        if linked is not None:
            linked.discard(e)
    total, count, records = row
    ctx.edges.weight[e] = total
    ctx.edges.count[e] = count
    ctx.edges.attributions[e] = records
    for rec in records:
        ctx.source_edges.setdefault(rec[0], set()).add(e)


def _truncate_names(ctx: Context, concepts_from: int, labels_from: int, sources_from: int) -> None:
    for _ in range(len(ctx.concepts) - concepts_from):
        name = ctx.concepts.pop()
        del ctx.concept_id[name]
        ctx.lexicons[CONCEPT].remove(name)
        ctx.out_edges.pop()
        ctx.in_edges.pop()
    for _ in range(len(ctx.labels) - labels_from):
        name = ctx.labels.pop()
        del ctx.label_id[name]
        ctx.lexicons[LABEL].remove(name)
        ctx.label_edges.pop()
    for sid in range(len(ctx.sources) - 1, sources_from - 1, -1):
        del ctx.source_id[ctx.sources.pop()]
        ctx.source_edges.pop(sid, None)
        if sid in ctx.passages:
            ctx._drop_passage_index(sid)
            del ctx.passages[sid]


def _append_concept(ctx: Context, name: str) -> None:
    ctx.concept_id[name] = len(ctx.concepts)
    ctx.lexicons[CONCEPT].add(name, len(ctx.concepts))
    ctx.concepts.append(name)
    ctx.out_edges.append([])
    ctx.in_edges.append([])


def _append_label(ctx: Context, name: str) -> None:
    ctx.label_id[name] = len(ctx.labels)
    ctx.lexicons[LABEL].add(name, len(ctx.labels))
    ctx.labels.append(name)
    ctx.label_edges.append([])


def _append_edge(ctx: Context, s: int, lab: int, o: int, row: EdgeRow) -> None:
    _set_edge(ctx, ctx._edge(s, lab, o), row)  # a new (s, lab, o): `_edge` appends it with the next id
