"""The query and recall lanes: edges by pinned positions, /query order, facets, cursor pages and attributions."""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import attrs

from taguru_server.store.model.context import Context
from taguru_server.store.read.cache import versioned_cache


def sort_key(ctx: Context, e: int) -> tuple[float, str, str, str]:
    return (
        -abs(ctx.weight(e)),
        ctx.concepts[ctx.edges.subject[e]],
        ctx.labels[ctx.edges.label[e]],
        ctx.concepts[ctx.edges.object[e]],
    )


def ranked_edges(ctx: Context, edges: list[int], limit: int) -> list[int]:
    """The first `limit` edges in /query order: |weight| desc, then subject, label, object names."""
    keyed = [(sort_key(ctx, e), e) for e in edges]
    page = heapq.nsmallest(limit, keyed) if limit < len(keyed) else sorted(keyed)
    return [e for _k, e in page]


def _facet(ctx: Context, c: int, lab: int) -> tuple[tuple[tuple[float, str, str, str], int], ...]:
    """A subject's edges (dead ones included) under one label, keyed and sorted in /query order;
    kept per read version. Kept as tuples of plain values, which the cyclic collector stops
    tracking, so a hub's long lists do not lengthen its full passes."""
    memo = versioned_cache(ctx, "facets")
    found = memo.get((c, lab))
    if found is None:
        by_label = versioned_cache(ctx, "facet_labels")
        labels = by_label.get(c)
        if labels is None:
            grouped: dict[int, list[int]] = {}
            for e in ctx.out_edges[c]:
                grouped.setdefault(ctx.edges.label[e], []).append(e)
            labels = by_label[c] = {k: tuple(v) for k, v in grouped.items()}
        found = memo[(c, lab)] = tuple(sorted((sort_key(ctx, e), e) for e in labels.get(lab, ())))
    return found


def ranked_facets(ctx: Context, subjects: list[str], labels: list[str], limit: int) -> list[int]:
    """`ranked_edges(ctx, query_edges(ctx, subjects, labels, None), limit)`, merged from the per
    (subject, label) lists: every edge sits in exactly one of them, and /query order is total."""
    cs = {c for c in map(ctx.find_concept, subjects) if c is not None}
    ls = {lab for lab in map(ctx.find_label, labels) if lab is not None}
    lists = [_facet(ctx, c, lab) for c in cs for lab in ls]
    return [e for _k, e in itertools.islice(heapq.merge(*lists), max(limit, 0))]


def page_edges(ctx: Context, edges: list[int], limit: int, after: dict[str, Any] | None) -> list[int]:
    """The page of matching edges in /query order: those after the cursor (its weight, subject, label and
    object), the first `limit` of them."""
    keyed = [(sort_key(ctx, e), e) for e in edges]
    if after is not None:
        bound = (-abs(float(after["weight"])), after["subject"], after["label"], after["object"])
        keyed = [ke for ke in keyed if ke[0] > bound]
    page = heapq.nsmallest(limit, keyed) if limit < len(keyed) else sorted(keyed)
    return [e for _k, e in page]


def query_edges(
    ctx: Context, subjects: list[str] | None, labels: list[str] | None, objects: list[str] | None
) -> list[int]:
    """Edges (dead ones included) whose positions match every pinned OR-set."""
    sets: list[tuple[str, set[int]]] = []
    if subjects is not None:
        sets.append(("s", {c for c in map(ctx.find_concept, subjects) if c is not None}))
    if labels is not None:
        sets.append(("l", {lab for lab in map(ctx.find_label, labels) if lab is not None}))
    if objects is not None:
        sets.append(("o", {c for c in map(ctx.find_concept, objects) if c is not None}))
    if any(not ids for _p, ids in sets):
        return []

    def candidates(pos: str, ids: set[int]) -> list[int]:
        lists = ctx.out_edges if pos == "s" else ctx.label_edges if pos == "l" else ctx.in_edges
        out: list[int] = []
        for i in ids:
            out.extend(lists[i])
            if pos == "o":
                out.extend(e for e in ctx.out_edges[i] if ctx.edges.object[e] == i)
        return out

    sizes = []
    for pos, ids in sets:
        lists = ctx.out_edges if pos == "s" else ctx.label_edges if pos == "l" else ctx.in_edges
        sizes.append((sum(lists.degree(i) for i in ids), pos, ids))
    sizes.sort(key=lambda t: t[0])
    _n, pos0, ids0 = sizes[0]
    arrays = {"s": ctx.edges.subject, "l": ctx.edges.label, "o": ctx.edges.object}
    result = []
    for e in dict.fromkeys(candidates(pos0, ids0)):
        if all(arrays[p][e] in ids for _n2, p, ids in sizes[1:]):
            result.append(e)
    return result


@attrs.frozen
class Attribution:
    """One source's share of an edge: the source name, its summed weight, the paragraph if any."""

    source: str
    weight: float
    paragraph: int | None


@attrs.frozen
class AssociationFacts:
    """An edge's identity (subject, label, object names) and its attributions, in stored order."""

    subject: str
    label: str
    object: str
    attributions: tuple[Attribution, ...]


def association_facts(ctx: Context, e: int) -> AssociationFacts:
    """The facts of one edge that `association_out` renders, without sections and locators."""
    sources = ctx.sources
    return AssociationFacts(
        ctx.concepts[ctx.edges.subject[e]],
        ctx.labels[ctx.edges.label[e]],
        ctx.concepts[ctx.edges.object[e]],
        tuple(
            Attribution(sources[sid], float(rsum), paragraph)
            for sid, rsum, _count, paragraph in ctx.edges.attributions[e]
        ),
    )


def recall_edges(ctx: Context, cue: str) -> list[int]:
    """Edges whose subject, object or label is the cue (exact spelling, alias-folded)."""
    edges: list[int] = []
    c = ctx.find_concept(cue)
    if c is not None:
        edges.extend(ctx.out_edges[c])
        edges.extend(ctx.in_edges[c])
    lab = ctx.find_label(cue)
    if lab is not None:
        edges.extend(ctx.label_edges[lab])
    return list(dict.fromkeys(edges))
