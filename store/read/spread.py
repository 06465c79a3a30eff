"""Spreading activation as the reference defines it (a max-heap walk), and the activate lane's records."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import attrs

from taguru_server.store.model.context import Context
from taguru_server.store.model.schema_check import hidden_label

FLOW_FLOOR = 1e-6


@attrs.frozen
class Activated:
    """One activated edge: its strength and the concept path from an origin to its producer."""

    edge: int
    strength: float
    path: tuple[int, ...]


@attrs.frozen
class Activation:
    """The activate lane's result: how many edges were scored (−1: not counted), and the strongest ones in order."""

    total: int
    matches: tuple[Activated, ...]


def activation_plain(
    ctx: Context,
    origins: list[str],
    decay: float,
    limit: int,
    counts: Sequence[int] | None = None,
    sums: Sequence[float] | None = None,
) -> Activation:
    """Spreading activation as the reference defines it: a max-heap walk over every reachable concept
    (over a window's edge counts and sums when given)."""
    strength, source, parent, scored_total = spread(ctx, origins, decay, counts, sums)
    ranked = heapq.nsmallest(limit, strength, key=lambda e: (-strength[e], e))
    matches = tuple(Activated(e, float(strength[e]), tuple(_path(parent, source[e]))) for e in ranked)
    return Activation(scored_total, matches)


def spread(
    ctx: Context,
    origins: list[str],
    decay: float,
    counts: Sequence[int] | None = None,
    sums: Sequence[float] | None = None,
) -> tuple[dict[int, float], dict[int, int], dict[int, int], int]:
    """Run activation; returns per-edge strength, producing concept, parent links, scored count.

    `counts` and `sums` (a window's, by edge id) replace the edges' own when given. Dead edges, and once
    a schema is installed the `schema:type` edges, neither weigh nor carry flow."""
    best: dict[int, float] = {}
    parent: dict[int, int] = {}
    heap: list[tuple[float, int]] = []
    for name in origins:
        c = ctx.find_concept(name)
        if c is not None and c not in best:
            best[c] = 1.0
            heap.append((-1.0, c))
    heapq.heapify(heap)
    settled: set[int] = set()
    strength: dict[int, float] = {}
    source: dict[int, int] = {}
    e_sum: Sequence[float] = ctx.edges.weight if sums is None else sums
    e_cnt: Sequence[int] = ctx.edges.count if counts is None else counts
    e_s, e_o = ctx.edges.subject, ctx.edges.object
    hidden, e_lab = hidden_label(ctx), ctx.edges.label
    while heap:
        neg_a, c = heapq.heappop(heap)
        if c in settled:
            continue
        settled.add(c)
        a = -neg_a
        edges = [e for e in ctx.out_edges[c] if e_cnt[e] > 0] + [e for e in ctx.in_edges[c] if e_cnt[e] > 0]
        if hidden is not None:
            edges = [e for e in edges if e_lab[e] != hidden]
        total = 0.0
        for e in edges:
            total += abs(e_sum[e])
        if total == 0:
            continue
        ad = a * decay
        for e in edges:
            score = ad * abs(e_sum[e])
            if score <= 0:
                continue
            if score > strength.get(e, 0.0):
                strength[e] = score
                source[e] = c
            flow = score / total
            if flow < FLOW_FLOOR:
                continue
            for n in (e_s[e], e_o[e]):
                if n in settled:
                    continue
                if flow > best.get(n, 0.0):
                    best[n] = flow
                    parent[n] = c
                    heapq.heappush(heap, (-flow, n))
    return strength, source, parent, len(strength)


def _path(parent: dict[int, int], c: int) -> list[int]:
    chain = [c]
    seen = {c}
    while chain[-1] in parent:
        p = parent[chain[-1]]
        if p in seen:
            break
        chain.append(p)
        seen.add(p)
    chain.reverse()
    return chain


def seed_ids(ctx: Context, origins: list[str]) -> list[int]:
    """The origins' concept ids, first-seen order, unknown names dropped."""
    seeds: list[int] = []
    for name in origins:
        c = ctx.find_concept(name)
        if c is not None and c not in seeds:
            seeds.append(c)
    return seeds
