"""Compaction: a context rebuilt from its live content, as the reference's `compact` rebuilds its image.

The rebuild replays the live edges in edge-id order into a new `Context`: each interns its
subject, then its object, then its label, then the sources of its attribution records in chain
order, so concept, label and source ids are reassigned by first appearance and every id-based
tie-break matches a context that was filled with that content from scratch. Dead edges
(count 0), vocabulary no live edge uses and aliases whose canonical did not survive are left
out; each edge's sum is re-derived as weight × count. Sources that only hold a passage keep it
and are interned after the graph's sources, in their old id order. Embedding vectors follow:
the gloss rows of names that went, and the passage rows of sources that hold no passage any
more, are left out.

The old context is never mutated: if the rebuild runs out of time or its commit is refused,
the registry keeps serving the old one unchanged.
"""

from __future__ import annotations

import copy
import time

import attrs
import numpy as np

from taguru_server.store.errors import MID_SCAN, budget_spent
from taguru_server.store.index.vectors import ContextVectors, GlossStore, GlossTable, PassageStore
from taguru_server.store.model.context import CONCEPT, LABEL, Context, _saturate

MID_SCAN_TIMEOUT = MID_SCAN


@attrs.frozen
class Compaction:
    """What one rebuild shed; `context` is the rebuilt context (not yet durable)."""

    context: Context
    dead_edges: int
    aliases_dropped: int
    bytes_before: int
    bytes_after: int


def dead_edges(ctx: Context) -> int:
    """How many edges of the context are dead (count 0)."""
    return ctx.edges.count.count(0)


def rebuild(ctx: Context, deadline: float) -> Compaction:
    """A new context holding exactly `ctx`'s live content, renumbered; raises the mid-scan 408 past `deadline`."""
    new = Context(ctx.cid, ctx.name, attrs.evolve(ctx.meta, dead_attributions=0))
    dead = _replay_edges(ctx, new, deadline)
    for sid in sorted(ctx.passages):  # passages stay (search and citations still see them)
        passage = copy.copy(ctx.passages[sid])
        passage.docs = []
        nsid = new.intern_source(ctx.sources[sid])
        new.passages[nsid] = passage
        new._index_passage(nsid, passage)
    dropped = _readd_aliases(ctx, new, deadline)
    new.vectors, pruned = _kept_vectors(ctx.vectors, new)
    new.vectors.passages, rows_pruned = _kept_passage_rows(ctx.vectors.passages, new)
    new.mark_clean()
    if pruned:
        new.dirty.vectors.add("glosses")
    if rows_pruned:
        new.dirty.vectors.add("passages")
    from taguru_server.store.read.cache import warm

    warm(new)
    return Compaction(new, dead, dropped, ctx.footprint_bytes(), new.footprint_bytes())


def _replay_edges(ctx: Context, new: Context, deadline: float) -> int:
    dead = 0
    concepts, labels, sources = ctx.concepts, ctx.labels, ctx.sources
    # old id -> new id, filled on first sight (interning by name once per record, not once per edge)
    cmap = [-1] * len(concepts)
    lmap = [-1] * len(labels)
    smap = [-1] * len(sources)
    e_s, e_l, e_o, e_sum, e_cnt, e_attr = ctx.edges.columns()
    source_edges = new.source_edges
    now = time.monotonic
    for e, e_records in e_attr.span(0, len(e_s)):
        if now() > deadline:
            raise budget_spent()
        count = e_cnt[e]
        if count == 0:
            dead += 1
            continue
        s = cmap[e_s[e]]
        if s < 0:
            s = cmap[e_s[e]] = new.intern_concept(concepts[e_s[e]])
        o = cmap[e_o[e]]
        if o < 0:
            o = cmap[e_o[e]] = new.intern_concept(concepts[e_o[e]])
        lab = lmap[e_l[e]]
        if lab < 0:
            lab = lmap[e_l[e]] = new.intern_label(labels[e_l[e]])
        records = []
        for sid, rsum, rcount, par in e_records:
            nsid = smap[sid]
            if nsid < 0:
                nsid = smap[sid] = new.intern_source(sources[sid])
            records.append([nsid, rsum, rcount, par])
        ne = new._edge(s, lab, o)
        new.edges.weight[ne] = _saturate((e_sum[e] / count) * count)
        new.edges.count[ne] = count
        new.edges.attributions[ne] = records
        for rec in records:
            got = source_edges.get(rec[0])
            if got is None:
                source_edges[rec[0]] = {ne}
            else:
                got.add(ne)
    new.pack_edges()
    return dead


def _readd_aliases(ctx: Context, new: Context, deadline: float) -> int:
    """Concept aliases, then label aliases, in table order; one whose canonical is gone is dropped (counted)."""
    dropped = 0
    for kind, names, ids in ((CONCEPT, ctx.concepts, new.concept_id), (LABEL, ctx.labels, new.label_id)):
        for alias, target in ctx.aliases[kind].items():
            if time.monotonic() > deadline:
                raise budget_spent()
            kept = ids.get(names[target])
            if kept is None:
                dropped += 1
                continue
            new.aliases[kind][alias] = kept
            new.lexicons[kind].add(alias, kept)
    return dropped


def _kept_vectors(vectors: ContextVectors, new: Context) -> tuple[ContextVectors, bool]:
    """The context's vectors without the gloss rows of names it no longer has; whether any row went."""
    glosses = vectors.glosses
    if glosses is None:
        return ContextVectors(None, vectors.passages), False
    kept = GlossStore(glosses.model, glosses.width)
    pruned = False
    for old, into, names in (
        (glosses.concepts, kept.concepts, new.concept_id),
        (glosses.labels, kept.labels, new.label_id),
    ):
        if _copy_table(old, into, names):
            pruned = True
    return ContextVectors(kept, vectors.passages), pruned


def _kept_passage_rows(store: PassageStore | None, new: Context) -> tuple[PassageStore | None, bool]:
    """The passage vectors without the rows of sources that no longer hold a passage (a retracted source's
    rows name it and were made from its text; a refresh would drop them too); whether any row went."""
    if store is None:
        return None, False
    live = {new.sources[sid] for sid in new.passages}
    keep = [i for i, key in enumerate(store.keys) if key.source in live]
    if len(keep) == len(store.keys):
        return store, False
    matrix = store.matrix[keep] if keep else np.zeros((0, store.width), dtype=np.float32)
    return PassageStore(store.model, store.width, [store.keys[i] for i in keep], matrix), True


def _copy_table(old: GlossTable, into: GlossTable, names: dict[str, int]) -> bool:
    for name, row in old.rows.items():
        if name in names:
            into.rows[name] = row
            if name in old.hashes:
                into.hashes[name] = old.hashes[name]
    return len(into.rows) != len(old.rows)
