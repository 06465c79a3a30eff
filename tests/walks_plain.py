"""The three graph walks written as the contract's pseudo-code: dicts, sets, a deque, one entry at a time.

They are the yardstick `store.walks` is measured against: its array-based versions must give
identical answers (tests/test_walks.py, bench/graph_reads.py). The rules:

The graph is undirected for every walk: an edge joins its subject and object both ways; dead
edges (count 0) never connect. A concept's edges are visited as its outgoing edges then its
incoming edges, each in edge-id order, and a self-loop is in both lists. The breadth-first
queue order, and with it explore's `path` and the order paths enumerates trails in, follows
from that order exactly. Names are exact spellings, alias-folded; outputs are canonical.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from taguru_server.stages.render import association_out
from taguru_server.store.model.context import Context
from taguru_server.store.read.walks import PATHS_BUDGET, Trail, adjacency, concept_ids


def _chain(parent: dict[int, int], c: int) -> list[int]:
    """[origin, …, parent(c), c]: follow `parent` until a concept with none."""
    chain = [c]
    while chain[-1] in parent:
        chain.append(parent[chain[-1]])
    chain.reverse()
    return chain


# ----- explore ---------------------------------------------------------------------------------


def plain_explore_reach(
    ctx: Context, origins: list[str], max_depth: int
) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """Breadth-first from the origins: edge id -> (hop, from concept), first sighting wins; and parents."""
    e_s, e_o, e_cnt = ctx.edges.subject, ctx.edges.object, ctx.edges.count
    out_edges, in_edges = ctx.out_edges, ctx.in_edges
    dist: dict[int, int] = {}
    parent: dict[int, int] = {}
    queue: deque[int] = deque()
    for c in concept_ids(ctx, origins):
        dist[c] = 0
        queue.append(c)
    reached: dict[int, tuple[int, int]] = {}
    while queue:
        c = queue.popleft()
        hop = dist[c] + 1
        if hop > max_depth:
            break  # the queue is in hop order: nothing after this one is expanded either
        seen = (hop, c)
        # a self-loop is also in incoming(c), but its second sighting changes nothing here
        for edges in (out_edges[c], in_edges[c]):
            for e in edges:
                if e_cnt[e] == 0:
                    continue
                if e not in reached:
                    reached[e] = seen
                for n in (e_s[e], e_o[e]):
                    if n not in dist:
                        dist[n] = hop
                        parent[n] = c
                        queue.append(n)
    return reached, parent


def plain_explore(
    ctx: Context, origins: list[str], max_depth: int, limit: int, after: dict[str, Any] | None
) -> dict[str, Any]:
    """Every live association within `max_depth` hops of the origins, nearest first, one page."""
    reached, parent = plain_explore_reach(ctx, origins, max_depth)
    concepts, labels = ctx.concepts, ctx.labels
    e_s, e_l, e_o = ctx.edges.subject, ctx.edges.label, ctx.edges.object
    keyed = [((hop, concepts[e_s[e]], labels[e_l[e]], concepts[e_o[e]]), e) for e, (hop, _frm) in reached.items()]
    total = len(keyed)
    if after is not None:
        triple = (after["subject"], after["label"], after["object"])
        bound = (after["distance"], *triple)
        keyed = [ke for ke in keyed if ke[0][1:] != triple and ke[0] > bound]
    page = heapq.nsmallest(limit, keyed) if limit < len(keyed) else sorted(keyed)
    matches = []
    for (hop, _s, _l, _o), e in page:
        chain = _chain(parent, reached[e][1])
        matches.append({"distance": hop, "path": [concepts[c] for c in chain], "association": association_out(ctx, e)})
    return {"total": total, "matches": matches}


# ----- paths -----------------------------------------------------------------------------------


def plain_hops_to_targets(ctx: Context, targets: set[int], max_depth: int) -> dict[int, int]:
    """Multi-source breadth-first from the targets, bounded by max_depth: hops to the nearest one."""
    e_s, e_o, e_cnt = ctx.edges.subject, ctx.edges.object, ctx.edges.count
    out_edges, in_edges = ctx.out_edges, ctx.in_edges
    to_target = dict.fromkeys(targets, 0)
    queue = deque(targets)
    while queue:
        c = queue.popleft()
        hop = to_target[c] + 1
        if hop > max_depth:
            continue
        for edges in (out_edges[c], in_edges[c]):
            for e in edges:
                if e_cnt[e] == 0:
                    continue
                for n in (e_s[e], e_o[e]):
                    if n not in to_target:
                        to_target[n] = hop
                        queue.append(n)
    return to_target


def plain_enumerate_trails(
    ctx: Context, origins: list[int], targets: set[int], max_depth: int, budget: int
) -> tuple[list[Trail], bool]:
    """Depth-first: every simple trail origin → target within max_depth, until the budget runs out."""
    to_target = plain_hops_to_targets(ctx, targets, max_depth)
    e_s, e_o, e_cnt = ctx.edges.subject, ctx.edges.object, ctx.edges.count
    adj: dict[int, list[int]] = {}

    def entries(c: int) -> list[int]:
        got = adj.get(c)
        if got is None:
            got = adj[c] = adjacency(ctx, c)
        return got

    found: list[Trail] = []
    for o in origins:
        if o not in to_target:
            continue
        nodes: list[int] = [o]
        edges: list[int] = []
        on_path = {o}
        lists, positions = [entries(o)], [0]
        while lists:
            top = lists[-1]
            i = positions[-1]
            if i == len(top):
                lists.pop()
                positions.pop()
                on_path.discard(nodes.pop())
                if edges:
                    edges.pop()
                continue
            if budget == 0:
                return found, True
            budget -= 1
            positions[-1] = i + 1
            e = top[i]
            if e_cnt[e] == 0:
                continue
            here = nodes[-1]
            nxt = e_o[e] if e_s[e] == here else e_s[e]
            if nxt == here or nxt in on_path:
                continue
            depth = len(edges) + 1
            far = to_target.get(nxt)
            if far is None or depth + far > max_depth:
                continue
            if nxt in targets:
                found.append((nodes + [nxt], edges + [e]))
            if depth < max_depth:
                nodes.append(nxt)
                on_path.add(nxt)
                edges.append(e)
                lists.append(entries(nxt))
                positions.append(0)
    return found, False


def trail_key(ctx: Context, trail: Trail) -> tuple[int, float, list[int], list[int]]:
    """Shortest first, then the strongest weakest link (raw |sum|), then concept ids, then edge ids."""
    nodes, edges = trail
    e_sum = ctx.edges.weight
    return (len(edges), -min(abs(e_sum[e]) for e in edges), nodes, edges)


def plain_paths(
    ctx: Context, origins: list[str], targets: list[str], max_depth: int, limit: int, budget: int = PATHS_BUDGET
) -> dict[str, Any]:
    """Simple trails from any origin to any target, shortest first."""
    t_ids = set(concept_ids(ctx, targets))
    o_ids = concept_ids(ctx, origins)
    if not o_ids or not t_ids or max_depth == 0 or limit == 0:
        return {"total": 0, "capped": False, "matches": []}
    found, capped = plain_enumerate_trails(ctx, o_ids, t_ids, max_depth, budget)
    page = heapq.nsmallest(limit, found, key=lambda t: trail_key(ctx, t))
    concepts = ctx.concepts
    matches = []
    for nodes, edges in page:
        matches.append(
            {
                "distance": len(edges),
                "path": [concepts[c] for c in nodes],
                "strength": float(min(abs(ctx.edges.weight[e]) for e in edges)),
                "associations": [association_out(ctx, e) for e in edges],
            }
        )
    return {"total": len(found), "capped": capped, "matches": matches}


# ----- unreachable_from ------------------------------------------------------------------------


def plain_reachable(ctx: Context, origins: list[str], check: Callable[[], None]) -> set[int]:
    """Every concept a walk over live edges reaches from the origins (`check` runs per dequeued concept)."""
    e_s, e_o, e_cnt = ctx.edges.subject, ctx.edges.object, ctx.edges.count
    out_edges, in_edges = ctx.out_edges, ctx.in_edges
    seeds = concept_ids(ctx, origins)
    visited = set(seeds)
    queue = deque(seeds)
    while queue:
        c = queue.popleft()
        check()
        for edges in (out_edges[c], in_edges[c]):
            for e in edges:
                if e_cnt[e] == 0:
                    continue
                for n in (e_s[e], e_o[e]):
                    if n not in visited:
                        visited.add(n)
                        queue.append(n)
    return visited


def plain_unreachable_from(
    ctx: Context, origins: list[str], limit: int, after: dict[str, Any] | None, check: Callable[[], None]
) -> dict[str, Any]:
    """Every live association no walk from the origins reaches: |weight| desc, then names, one page."""
    visited = plain_reachable(ctx, origins, check)
    e_s, e_cnt = ctx.edges.subject, ctx.edges.count
    orphans = []
    for e in range(len(e_s)):
        check()
        if e_cnt[e] > 0 and e_s[e] not in visited:
            orphans.append(e)
    return page_by_weight(ctx, orphans, limit, after)


def page_by_weight(ctx: Context, edges: list[int], limit: int, after: dict[str, Any] | None) -> dict[str, Any]:
    """|weight| desc, then subject, label, object; `after` drops its own triple and everything up to it."""
    concepts, labels = ctx.concepts, ctx.labels
    e_s, e_l, e_o = ctx.edges.subject, ctx.edges.label, ctx.edges.object
    keyed = [((-abs(ctx.weight(e)), concepts[e_s[e]], labels[e_l[e]], concepts[e_o[e]]), e) for e in edges]
    total = len(keyed)
    if after is not None:
        triple = (after["subject"], after["label"], after["object"])
        bound = (-abs(float(after["weight"])), *triple)
        keyed = [ke for ke in keyed if ke[0][1:] != triple and ke[0] > bound]
    page = heapq.nsmallest(limit, keyed) if limit < len(keyed) else sorted(keyed)
    return {"total": total, "matches": [association_out(ctx, e) for _k, e in page]}
