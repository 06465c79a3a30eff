"""A context's passages from their stored rows (text and metadata JSON), as a load reads them in batches."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np

from taguru_server.store.model.context import Context
from taguru_server.store.model.passage import Passage
from taguru_server.store.persist.sql import Sql
from taguru_server.store.text import paragraph_counts, split_many

PASSAGE_BATCH = 2048  # passage rows a load reads and parses at a time


def load_passages(db: Sql, ctx: Context, counts: Any) -> None:
    """Every stored passage of `ctx` into it, in source-id order, each registered with the BM25 index.

    `counts`: each passage's paragraph count as the context's BM25 file numbers them
    (`bm25_snapshot.trusted_counts`): while a batch's paragraphs count the same (counted, not split),
    they are registered by count and split when first read; from the first batch that differs on,
    and with None, they are split and registered with their parts (the file is then matched by
    digests, `bm25_snapshot.restore`)."""
    stored = iter(db.execute("SELECT source, text, meta FROM passages WHERE ctx = ? ORDER BY source", (ctx.cid,)))
    at = 0
    while rows := list(itertools.islice(stored, PASSAGE_BATCH)):
        # every stored meta is a JSON object we wrote: parse a batch of them in one call
        metas = json.loads("[" + ",".join([r[2] for r in rows]) + "]")
        if counts is not None and not np.array_equal(
            paragraph_counts([r[1] for r in rows]), counts[at : at + len(rows)]
        ):
            counts = None
        if counts is not None:
            batch = [(sid, passage_from(text, m)) for (sid, text, _stored), m in zip(rows, metas, strict=True)]
            ranges = ctx.bm25.add_counted([sid for sid, _ in batch], counts[at : at + len(batch)])
            for (_, passage), docs in zip(batch, ranges, strict=True):
                passage.docs.extend(docs)
            at += len(batch)
        else:
            paragraphs = split_many([r[1] for r in rows])
            batch = [
                (sid, passage_from(text, m, split))
                for (sid, text, _stored), m, split in zip(rows, metas, paragraphs, strict=True)
            ]
            ctx._index_passages(batch)
        ctx.passages.update(batch)


def passage_of(text: str, stored_meta: str) -> Passage:
    """A passage from its stored text and metadata JSON."""
    return passage_from(text, json.loads(stored_meta))


def passage_from(text: str, m: dict[str, Any], paragraphs: list[str] | None = None) -> Passage:
    """A passage from its stored text and parsed metadata (`paragraphs`: its split, when already made)."""
    return Passage(
        text,
        [(p, q) for p, q in m["questions"]],
        {p: s for p, s in m["sections"]},
        {p: (k, v) for p, k, v in m["locators"]},
        m["tags"],
        m["stored_at"],
        m["date"],
        paragraphs,
    )
