"""The gloss and describe lanes: a concept's (a label's) strongest live facts as text, and its label tallies."""

from __future__ import annotations

import heapq

import attrs
import numpy as np

from taguru_server.store.model.context import CONCEPT, LABEL, Context
from taguru_server.store.model.schema_check import live_types
from taguru_server.store.read.activation_graph import current_graph
from taguru_server.store.read.cache import versioned_cache


def _fact(ctx: Context, e: int, omit_subject: bool) -> str:
    subject = "" if omit_subject else ctx.concepts[ctx.edges.subject[e]] + "の"
    neg = "ではない" if ctx.edges.weight[e] < 0 else ""
    return f"{subject}{ctx.labels[ctx.edges.label[e]]}は{ctx.concepts[ctx.edges.object[e]]}{neg}。"


def _strongest(ctx: Context, edges: list[int], n: int) -> list[int]:
    live = [e for e in edges if ctx.edges.count[e] > 0]
    return heapq.nsmallest(n, live, key=lambda e: (-abs(ctx.edges.weight[e]), e))


def _concept_edges(ctx: Context, c: int) -> list[int]:
    return ctx.out_edges[c] + [e for e in ctx.in_edges[c] if ctx.edges.subject[e] != ctx.edges.object[e]]


def _zero_sum_live(ctx: Context, edges: list[int]) -> list[int]:
    """The live edges whose sum is zero (the activation graph leaves them out), by edge id."""
    return sorted(e for e in edges if ctx.edges.count[e] > 0 and ctx.edges.weight[e] == 0)


def gloss_edges(ctx: Context, kind: int, record: int) -> list[int]:
    """A concept's four (a label's three) strongest live edges: |sum| desc, then edge id.

    Per read version each answer is kept, and when the activation graph is current it is read
    from its per-concept entries (already in that order) or from its edges by |sum| instead of
    scanning every edge of a hub; `_strongest` over all edges is the plain definition."""
    memo = versioned_cache(ctx, "gloss_edges")
    key = (kind, record)
    found = memo.get(key)
    if found is not None:
        return found
    n = 4 if kind == CONCEPT else 3
    g = current_graph(ctx)
    if g is None:
        edges = _concept_edges(ctx, record) if kind == CONCEPT else ctx.label_edges[record]
        found = _strongest(ctx, edges, n)
    elif kind == CONCEPT:
        a = int(g.ptr[record])
        found = g.edge[a : min(int(g.ptr[record + 1]), a + n)].tolist()
        if len(found) < n:
            found += _zero_sum_live(ctx, _concept_edges(ctx, record))[: n - len(found)]
    else:
        labels = memo.get("edge_labels")
        if labels is None:
            labels = memo["edge_labels"] = np.array(ctx.edges.label, dtype=np.int64)
        heavy = g.heavy
        found = heavy[labels[heavy] == record][:n].tolist()
        if len(found) < n:
            found += _zero_sum_live(ctx, ctx.label_edges[record])[: n - len(found)]
    memo[key] = found
    return found


def concept_gloss(ctx: Context, c: int) -> str:
    """`{name}。` then up to four of the concept's strongest live facts."""
    parts = [ctx.concepts[c] + "。"]
    prev: int | None = None
    for e in gloss_edges(ctx, CONCEPT, c):
        s = ctx.edges.subject[e]
        parts.append(_fact(ctx, e, s == c or s == prev))
        prev = s
    return "".join(parts)


def label_gloss(ctx: Context, lab: int) -> str:
    """`{label}。` then up to three of the label's strongest live facts."""
    parts = [ctx.labels[lab] + "。"]
    prev: int | None = None
    for e in gloss_edges(ctx, LABEL, lab):
        s = ctx.edges.subject[e]
        parts.append(_fact(ctx, e, s == prev))
        prev = s
    return "".join(parts)


# ----- describe, query, recall ---------------------------------------------------


@attrs.frozen
class LabelCount:
    """How many live edges of a concept carry one label."""

    label: str
    count: int


@attrs.frozen
class Description:
    """The describe lane's result: the concept's canonical name, its label tallies on either side, and
    (a schema installed) its asserted types."""

    concept: str
    as_subject: tuple[LabelCount, ...]
    as_object: tuple[LabelCount, ...]
    types: tuple[str, ...] = ()


def concept_types(ctx: Context, c: int) -> tuple[str, ...]:
    """A concept's live asserted types, sorted (never `is_a`-expanded); none without a schema."""
    if ctx.meta.schema is None:
        return ()
    return tuple(sorted(live_types(ctx, c)))


def description(ctx: Context, concept: str) -> Description | None:
    """A concept's live edges tallied by label as subject and as object (count desc, then label id), and its
    types, or None."""
    c = ctx.find_concept(concept)
    if c is None:
        return None

    def tally(edges: list[int]) -> tuple[LabelCount, ...]:
        counts: dict[int, int] = {}
        for e in edges:
            if ctx.edges.count[e] > 0:
                counts[ctx.edges.label[e]] = counts.get(ctx.edges.label[e], 0) + 1
        return tuple(
            LabelCount(ctx.labels[lab], n) for lab, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        )

    as_object = ctx.in_edges[c] + [e for e in ctx.out_edges[c] if ctx.edges.object[e] == c]
    return Description(ctx.concepts[c], tally(ctx.out_edges[c]), tally(as_object), concept_types(ctx, c))
