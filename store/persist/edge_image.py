"""A context's edge table and adjacency as a mapped file: what a load rebuilds from the edge rows, kept.

A load of a large context spends most of its time on its edges: reading every row, parsing every
attribution array, and building the per-concept, per-label and per-source edge lists. This file
holds the result in columns (`store.index.index_file`: checksummed arrays, written atomically),
next to the BM25 file, under the same identity: the store, the context, and the context's last
change-log position. A load whose identity matches — and whose concept, label, source and edge
counts, read from the rows, match the file's — takes the edges from the file; any other file is
ignored and rewritten by that load from the rows it read, so a file is never trusted on its word.

The triple index (`store.model.edges.TripleIndex`) is kept as its sorted packed keys, mapped as they
are. Adjacency is written in its canonical order (each list in ascending edge id, as a load from rows
builds it), whatever order the context writing the file holds it in, so a context taken from
the file equals one loaded from its rows, structure for structure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from taguru_server.store.index.index_file import IndexFileRejected, read_arrays, release_pages, write_arrays
from taguru_server.store.model.adjacency import Adjacency
from taguru_server.store.model.attributions import Attributions, SourceEdges, source_csr
from taguru_server.store.model.context import Context
from taguru_server.store.model.csr import grouped, owners
from taguru_server.store.model.edges import TripleIndex
from taguru_server.store.persist.sql import Sql

KIND = "edges"
FORMAT = 3  # 2: the packed triple keys; 3: the attribution records as columns


def image_path(index_dir: Path, cid: int) -> Path:
    return index_dir / f"ctx-{cid}.{KIND}"


def _sizes(ctx: Context, n_edges: int) -> dict[str, int]:
    return {"concepts": len(ctx.concepts), "labels": len(ctx.labels), "sources": len(ctx.sources), "edges": n_edges}


def adjacency_csr(
    subject: np.ndarray, label: np.ndarray, obj: np.ndarray, n_concepts: int, n_labels: int, ids: Any = None
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The out, in (self-loops left out) and label CSRs of an edge table's columns (edge ids: the row
    positions unless given, ascending), each group ascending."""
    ids = np.arange(len(subject), dtype=np.int32) if ids is None else np.asarray(ids, dtype=np.int32)
    looped = obj != subject
    return (
        grouped(subject, ids, n_concepts),
        grouped(obj[looped], ids[looped], n_concepts),
        grouped(label, ids, n_labels),
    )


def write_image(ctx: Context, index_dir: Path, identity: dict[str, Any]) -> int:
    """Write the file a load of `ctx`'s rows at `identity` would take; returns its size in bytes."""
    table = ctx.edges
    n = len(table)
    subject = np.asarray(table.subject, dtype=np.int32)
    label = np.asarray(table.label, dtype=np.int32)
    obj = np.asarray(table.object, dtype=np.int32)
    (out_ptr, out_ids), (in_ptr, in_ids), (label_ptr, label_ids) = adjacency_csr(
        subject, label, obj, len(ctx.concepts), len(ctx.labels)
    )
    attr_ptr, attr_sid, attr_sum, attr_cnt, attr_par = table.attributions.packed()
    src_keys, src_ptr, src_ids = source_csr(owners(attr_ptr), attr_sid)
    n_concepts, n_labels = len(ctx.concepts), len(ctx.labels)
    if TripleIndex.packable(n_concepts, n_labels):
        keys = TripleIndex.packed(subject, label, obj, n_concepts, n_labels)
        order = np.argsort(keys, kind="stable")
        triple_keys, triple_ids = keys[order], order.astype(np.int32)
    else:  # spans too large to pack: the load indexes the triples in a dict
        triple_keys, triple_ids = np.zeros(0, np.int64), np.zeros(0, np.int32)
    arrays: dict[str, np.ndarray] = {
        "subject": subject,
        "label": label,
        "object": obj,
        "weight": np.asarray(table.weight, dtype=np.float64),
        "count": np.asarray(table.count, dtype=np.int64),
        "attr_ptr": attr_ptr,
        "attr_source": attr_sid,
        "attr_sum": attr_sum,
        "attr_count": attr_cnt,
        "attr_paragraph": attr_par,
        "out_ptr": out_ptr,
        "out_ids": out_ids,
        "in_ptr": in_ptr,
        "in_ids": in_ids,
        "label_ptr": label_ptr,
        "label_ids": label_ids,
        "source_keys": src_keys,
        "source_ptr": src_ptr,
        "source_ids": src_ids,
        "triple_keys": triple_keys,
        "triple_ids": triple_ids,
    }
    header = {"kind": KIND, "format": FORMAT, "identity": identity, "sizes": _sizes(ctx, n)}
    index_dir.mkdir(parents=True, exist_ok=True)
    size = write_arrays(image_path(index_dir, ctx.cid), header, arrays)
    ctx.image_state = (index_dir, identity, ctx.graph_version)
    return size


def edges_from_rows(db: Sql, ctx: Context) -> None:
    """Fill a context's (empty) edge table and adjacency from its edge rows."""
    cid = ctx.cid
    loads = json.loads
    rows = db.execute("SELECT id, s, l, o, sum, count, attrs FROM edges WHERE ctx = ? ORDER BY id", (cid,)).fetchall()
    if rows:
        ids, col_s, col_l, col_o, col_sum, col_cnt, col_attrs = zip(*rows, strict=False)
        del rows
        ctx.edges.subject.extend(col_s)
        ctx.edges.label.extend(col_l)
        ctx.edges.object.extend(col_o)
        ctx.edges.weight.extend(map(float, col_sum))
        ctx.edges.count.extend(col_cnt)
        # every stored attrs value is a JSON array we wrote: parse them in one call
        ctx.edges.attributions.extend(loads("[" + ",".join([a or "[]" for a in col_attrs]) + "]"))
        del col_attrs
        ctx.source_edges.take(*source_csr(*ctx.edges.attributions.record_sources()))
        ctx.edges.index_triples(len(ctx.concepts), len(ctx.labels))
        out_csr, in_csr, label_csr = adjacency_csr(
            np.asarray(col_s, dtype=np.int64),
            np.asarray(col_l, dtype=np.int64),
            np.asarray(col_o, dtype=np.int64),
            len(ctx.concepts),
            len(ctx.labels),
            ids,
        )
        ctx.out_edges.take(*out_csr)
        ctx.in_edges.take(*in_csr)
        ctx.label_edges.take(*label_csr)


def restore_edges(ctx: Context, index_dir: Path, identity: dict[str, Any], n_edges: int) -> str | None:
    """Fill `ctx`'s (empty) edge table and adjacency from its file; None when done, else why not (nothing
    was changed). `ctx` holds its names already; `n_edges` is the number of its edge rows."""
    try:
        header, arrays = read_arrays(image_path(index_dir, ctx.cid))
    except IndexFileRejected as exc:
        return str(exc)
    if header.get("kind") != KIND or header.get("format") != FORMAT:
        return "another format"
    if header.get("identity") != identity:
        return "stale"
    if header.get("sizes") != _sizes(ctx, n_edges):
        return "sizes differ from the rows"
    try:
        attributions = (
            arrays["attr_ptr"],
            arrays["attr_source"],
            arrays["attr_sum"],
            arrays["attr_count"],
            arrays["attr_paragraph"],
        )
        subject, label, obj = arrays["subject"], arrays["label"], arrays["object"]
        out_csr = (arrays["out_ptr"], arrays["out_ids"])
        in_csr = (arrays["in_ptr"], arrays["in_ids"])
        label_csr = (arrays["label_ptr"], arrays["label_ids"])
        sources = (arrays["source_keys"], arrays["source_ptr"], arrays["source_ids"])
        triple_keys, triple_ids = arrays["triple_keys"], arrays["triple_ids"]
    except (KeyError, ValueError, IndexError, TypeError) as exc:
        return f"damaged ({type(exc).__name__})"
    if not (len(subject) == len(label) == len(obj) == len(attributions[0]) - 1 == n_edges):
        return "damaged (column lengths)"
    n_concepts, n_labels = len(ctx.concepts), len(ctx.labels)
    if not (
        Adjacency.valid(*out_csr, n_concepts, n_edges)
        and Adjacency.valid(*in_csr, n_concepts, n_edges)
        and Adjacency.valid(*label_csr, n_labels, n_edges)
    ):
        return "damaged (adjacency)"
    packable = TripleIndex.packable(len(ctx.concepts), len(ctx.labels))
    if len(triple_keys) != (n_edges if packable else 0) or len(triple_ids) != len(triple_keys):
        return "damaged (triple keys)"
    if not Attributions.valid(*attributions, len(ctx.sources)):
        return "damaged (attribution records)"
    if not SourceEdges.valid(*sources, len(ctx.sources), n_edges):
        return "damaged (source index)"
    table = ctx.edges
    for column, values, dtype in (
        (table.subject, subject, np.int64),
        (table.label, label, np.int64),
        (table.object, obj, np.int64),
        (table.weight, arrays["weight"], np.float64),
        (table.count, arrays["count"], np.int64),
    ):
        column.frombytes(np.ascontiguousarray(values, dtype=dtype).tobytes())
    table.attributions.take(*attributions)
    if packable:
        table.by_triple.take(triple_keys, triple_ids, len(ctx.concepts), len(ctx.labels))
    else:
        table.index_triples(len(ctx.concepts), len(ctx.labels))
    ctx.out_edges.take(*out_csr)
    ctx.in_edges.take(*in_csr)
    ctx.label_edges.take(*label_csr)
    ctx.source_edges.take(*sources)
    ctx.image_state = (index_dir, identity, ctx.graph_version)
    release_pages(arrays)
    return None
