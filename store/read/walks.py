"""The three graph walks: explore (breadth-first), paths (simple trails) and unreachable_from.

The graph is undirected for every walk: an edge joins its subject and object both ways; dead
edges (count 0) never connect. A concept's edges are visited as its outgoing edges then its
incoming edges, each in edge-id order, and a self-loop is in both lists. The breadth-first
queue order, and with it explore's `path` and the order paths enumerates trails in, follows
from that order exactly. Names are exact spellings, alias-folded; outputs are canonical.

The breadth-first walks run a level at a time over arrays (`WalkGraph`, built once per graph
version): a level's new concepts, taken in first-occurrence order of the previous level's
adjacency entries, are exactly the ones the one-at-a-time queue would append, in its order.
The depth-first trail enumeration runs entry by entry, as its budget is counted per entry.
`tests/walks_plain.py` holds the walks as the contract writes them; both must agree exactly.

Once a schema is installed the `schema:type` edges are hidden from every walk
(`schema_check.hidden_label`): never reported, never a hop or a bridge, never an orphan; paths
still draws them from the budget, as it draws dead edges.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from taguru_server.store.model.context import Context
from taguru_server.store.model.schema_check import hidden_label

MAX_DEPTH = 10  # explore and paths clamp max_depth to this
PATHS_BUDGET = 100_000  # adjacency entries paths may draw, over all origins
SCAN_CHUNK = 1 << 15  # edges unreachable_from scans between two deadline checks
_FAR = 1 << 30  # "not reached" as a hop count

Trail = tuple[list[int], list[int]]  # concept ids (origin first), edge ids in walk order
# a found trail with its sort key first: (edge count, -weakest |sum|, concept ids, edge ids)
RankedTrail = tuple[int, float, list[int], list[int]]


def concept_ids(ctx: Context, names: list[str]) -> list[int]:
    """The concepts the names spell (alias-folded), unknown names dropped, first occurrence kept."""
    seen: dict[int, None] = {}
    for name in names:
        c = ctx.find_concept(name)
        if c is not None:
            seen.setdefault(c, None)
    return list(seen)


def incoming(ctx: Context, c: int) -> list[int]:
    """The edges whose object is `c`, self-loops included, in edge-id order."""
    loops = [e for e in ctx.out_edges[c] if ctx.edges.object[e] == c]
    if not loops:
        return ctx.in_edges[c]
    return sorted(ctx.in_edges[c] + loops)


def adjacency(ctx: Context, c: int) -> list[int]:
    """A concept's adjacency in visit order: outgoing, then incoming (a self-loop is in both)."""
    return ctx.out_edges[c] + incoming(ctx, c)


# ----- the array view of one graph version ------------------------------------------------------


class WalkGraph:
    """Live adjacency in visit order as CSR arrays, edge columns, and name ranks (byte order).

    A concept's entries are its live outgoing edges, then its live incoming edges other than
    self-loops (a self-loop's second sighting changes nothing in a breadth-first walk). A hidden
    label's edges count as dead.
    """

    __slots__ = (
        "n",
        "hidden",
        "ptr",
        "other",
        "edge",
        "e_s",
        "e_l",
        "e_o",
        "live",
        "neg_abs_weight",
        "c_rank",
        "l_rank",
        "c_sorted",
        "l_sorted",
        "trail_adj",
    )

    def __init__(self, ctx: Context, hidden: int | None = None) -> None:
        self.n = n = len(ctx.concepts)
        self.hidden = hidden
        self.e_s = np.array(ctx.edges.subject, dtype=np.int64)
        self.e_l = np.array(ctx.edges.label, dtype=np.int64)
        self.e_o = np.array(ctx.edges.object, dtype=np.int64)
        counts = np.array(ctx.edges.count, dtype=np.int64)
        self.live = counts > 0
        if hidden is not None:
            self.live &= self.e_l != hidden
        sums = np.array(ctx.edges.weight, dtype=np.float64)
        # -|sum / count| (the averaged weight, as Context.weight divides it); dead edges 0
        self.neg_abs_weight = np.zeros(len(counts), dtype=np.float64)
        np.divide(sums, counts, out=self.neg_abs_weight, where=self.live)
        self.neg_abs_weight = -np.abs(self.neg_abs_weight)
        ids = np.flatnonzero(self.live)
        inward = ids[self.e_s[ids] != self.e_o[ids]]
        node = np.concatenate((self.e_s[ids], self.e_o[inward]))
        side = np.concatenate((np.zeros(len(ids), np.int64), np.ones(len(inward), np.int64)))
        edge = np.concatenate((ids, inward))
        other = np.concatenate((self.e_o[ids], self.e_s[inward]))
        order = np.argsort(node * 2 + side, kind="stable")  # each part is already in edge-id order
        self.edge = edge[order]
        self.other = other[order]
        self.ptr = np.zeros(n + 1, dtype=np.int64)
        if len(node):
            np.cumsum(np.bincount(node, minlength=n), out=self.ptr[1:])
        self.c_sorted, self.c_rank, self.l_sorted, self.l_rank = _name_order(ctx)
        # paths: per concept, (neighbour or -1 for a dead edge or self-loop, edge id) per adjacency entry
        self.trail_adj: dict[int, tuple[list[int], list[int], np.ndarray]] = {}

    def expand(self, frontier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The frontier's adjacency entries in visit order, and the concept each one belongs to."""
        starts = self.ptr[frontier]
        lens = self.ptr[frontier + 1] - starts
        total = int(lens.sum())
        if total == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        offsets = np.cumsum(lens) - lens
        idx = np.repeat(starts - offsets, lens) + np.arange(total, dtype=np.int64)
        return idx, np.repeat(frontier, lens)


def _ranks(names: list[str]) -> tuple[list[str], np.ndarray]:
    """The names sorted (code point, so byte, order), and each name's position in that order."""
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), dtype=np.int64)
    rank[np.array(order, dtype=np.int64)] = np.arange(len(names), dtype=np.int64)
    return [names[i] for i in order], rank


def _name_order(ctx: Context) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """Concept and label names in byte order with their ranks; kept while no name is added.

    Names are only ever appended (a rolled-back write clears the read cache), so the counts
    identify the vocabulary.
    """
    key = (len(ctx.concepts), len(ctx.labels))
    cached = ctx.read_cache.get("walk_names")
    if cached is None or cached[0] != key:
        cached = (key, *_ranks(ctx.concepts), *_ranks(ctx.labels))
        ctx.read_cache["walk_names"] = cached
    return cached[1], cached[2], cached[3], cached[4]


def walk_graph(ctx: Context) -> WalkGraph:
    """The context's WalkGraph for its current graph version and hidden label (built on first use)."""
    key = (ctx.graph_version, len(ctx.concepts), len(ctx.labels), len(ctx.edges.subject), hidden_label(ctx))
    cached = ctx.read_cache.get("walks")
    if cached is not None and cached[0] == key:
        graph: WalkGraph = cached[1]
        return graph
    graph = WalkGraph(ctx, key[-1])
    ctx.read_cache["walks"] = (key, graph)
    return graph


def _distinct(values: np.ndarray, size: int) -> np.ndarray:
    """The distinct values (all in [0, size)), ascending."""
    mark = np.zeros(size, dtype=bool)
    mark[values] = True
    return np.flatnonzero(mark)


def _first_seen(values: np.ndarray, size: int) -> np.ndarray:
    """Where each distinct value (all in [0, size)) first occurs, ascending."""
    k = len(values)
    first = np.full(size, k, dtype=np.int64)
    np.minimum.at(first, values, np.arange(k, dtype=np.int64))
    positions = first[first < k]
    positions.sort()
    return positions


# ----- ordering by names ------------------------------------------------------------------------


class _NameBound:
    """Where one spelling falls among sorted names: ranks below `lo` sort before it, `lo` may equal it."""

    __slots__ = ("lo", "equal")

    def __init__(self, sorted_names: list[str], name: str) -> None:
        self.lo = bisect.bisect_left(sorted_names, name)
        self.equal = self.lo < len(sorted_names) and sorted_names[self.lo] == name

    def gt(self, ranks: np.ndarray) -> np.ndarray:
        return ranks > self.lo if self.equal else ranks >= self.lo

    def eq(self, ranks: np.ndarray) -> np.ndarray:
        return ranks == self.lo if self.equal else np.zeros(len(ranks), dtype=bool)


def _after_cursor(
    g: WalkGraph, first_gt: np.ndarray, first_eq: np.ndarray, ranks: tuple[np.ndarray, ...], after: dict[str, Any]
) -> np.ndarray:
    """Keep-mask: (first key, subject, label, object) after the cursor's, and not the cursor's own triple."""
    bounds = (
        _NameBound(g.c_sorted, after["subject"]),
        _NameBound(g.l_sorted, after["label"]),
        _NameBound(g.c_sorted, after["object"]),
    )
    sr, lr, orank = ranks
    eq_s, eq_l, eq_o = bounds[0].eq(sr), bounds[1].eq(lr), bounds[2].eq(orank)
    names_gt = bounds[0].gt(sr) | (eq_s & (bounds[1].gt(lr) | (eq_l & bounds[2].gt(orank))))
    own = eq_s & eq_l & eq_o
    keep: np.ndarray = (first_gt | (first_eq & names_gt)) & ~own
    return keep


def smallest(keys: list[np.ndarray], limit: int) -> np.ndarray:
    """Positions of the `limit` smallest rows by the keys (first key first), in sorted order."""
    n = len(keys[0])
    if limit >= n:
        return np.lexsort(keys[::-1]) if n else np.zeros(0, dtype=np.int64)
    if limit <= 0:
        return np.zeros(0, dtype=np.int64)
    chosen = []
    cand = np.arange(n, dtype=np.int64)
    need = limit
    for k in keys:
        if len(cand) <= need:
            break
        vals = k[cand]
        pivot = np.partition(vals, need - 1)[need - 1]
        below = cand[vals < pivot]
        chosen.append(below)
        need -= len(below)
        cand = cand[vals == pivot]
    chosen.append(cand[:need])
    sel = np.concatenate(chosen)
    ordered: np.ndarray = sel[np.lexsort([k[sel] for k in keys[::-1]])]
    return ordered


# ----- explore ---------------------------------------------------------------------------------


class _Reach:
    """A breadth-first walk's outcome: hop, queue position and parent of every queued concept."""

    __slots__ = ("dist", "rank", "parent", "entries", "seen")

    def __init__(self, g: WalkGraph, seeds: np.ndarray, max_depth: int) -> None:
        self.dist = dist = np.full(g.n, -1, dtype=np.int64)
        self.rank = rank = np.full(g.n, _FAR, dtype=np.int64)  # queue position
        self.parent = parent = np.full(g.n, -1, dtype=np.int64)
        visited = np.zeros(g.n, dtype=bool)
        visited[seeds] = True
        dist[seeds] = 0
        rank[seeds] = np.arange(len(seeds), dtype=np.int64)
        queued = len(seeds)
        frontier = seeds
        self.entries = 0  # adjacency entries of the expanded concepts
        self.seen: list[np.ndarray] = []  # their edge ids, level by level, while they stay few
        for hop in range(1, max_depth + 1):
            if not len(frontier):
                break
            idx, src = g.expand(frontier)
            self.entries += len(idx)
            if self.entries * 4 <= len(g.e_s):
                self.seen.append(g.edge[idx])
            nb = g.other[idx]
            fresh = ~visited[nb]
            cand = nb[fresh]
            first = _first_seen(cand, g.n)
            frontier = cand[first]
            visited[frontier] = True
            dist[frontier] = hop
            parent[frontier] = src[fresh][first]  # the queued concept whose entry first named it
            rank[frontier] = np.arange(queued, queued + len(frontier), dtype=np.int64)
            queued += len(frontier)

    def edges(self, g: WalkGraph, max_depth: int) -> np.ndarray:
        """Every live edge with an expanded endpoint (one queued at a hop below max_depth), ascending."""
        if self.entries * 4 <= len(g.e_s):
            return _distinct(np.concatenate(self.seen), len(g.e_s)) if self.seen else np.zeros(0, dtype=np.int64)
        near = np.where(self.dist >= 0, self.dist, _FAR)
        return np.flatnonzero(g.live & (np.minimum(near[g.e_s], near[g.e_o]) < max_depth))


def _own_edge(ctx: Context, after: dict[str, Any]) -> int:
    """The edge a cursor names by its canonical spellings, or -1."""
    s, lab, o = (
        ctx.concept_id.get(after["subject"]),
        ctx.label_id.get(after["label"]),
        ctx.concept_id.get(after["object"]),
    )
    if s is None or lab is None or o is None:
        return -1
    return ctx.edges.by_triple.get((s, lab, o), -1)


@attrs.frozen
class Reached:
    """One association explore reached: its hops and the concept path from an origin to its endpoint reached first."""

    distance: int
    path: tuple[int, ...]
    edge: int


@attrs.frozen
class Explored:
    """Explore's page: how many live associations are within reach, and the page's, nearest first."""

    total: int
    matches: tuple[Reached, ...]


def explored(
    ctx: Context,
    origins: list[str],
    max_depth: int,
    limit: int,
    after: dict[str, Any] | None,
    graph: WalkGraph | None = None,
) -> Explored:
    """Every live association within `max_depth` hops of the origins, nearest first, one page (over
    `graph`, a window's, when given)."""
    g = walk_graph(ctx) if graph is None else graph
    reach = _Reach(g, np.array(concept_ids(ctx, origins), dtype=np.int64), max_depth)
    edges = reach.edges(g, max_depth)
    total = len(edges)
    s, o = g.e_s[edges], g.e_o[edges]
    frm = np.where(reach.rank[s] <= reach.rank[o], s, o)  # the endpoint the queue reached first
    hops = reach.dist[frm] + 1
    if after is not None:
        at = min(int(after["distance"]), max_depth + 1)  # past every hop either way
        keep = (hops >= at) & (edges != _own_edge(ctx, after))
        level = np.flatnonzero(keep & (hops == at))
        if len(level):
            sub = edges[level]
            ranks = (g.c_rank[g.e_s[sub]], g.l_rank[g.e_l[sub]], g.c_rank[g.e_o[sub]])
            keep[level] = _after_cursor(g, np.zeros(len(sub), dtype=bool), np.ones(len(sub), dtype=bool), ranks, after)
        edges, frm, hops = edges[keep], frm[keep], hops[keep]
    if 0 < limit < len(hops):  # only the hops up to the limit-th smallest can be on the page
        near = np.flatnonzero(hops <= np.partition(hops, limit - 1)[limit - 1])
        edges, frm, hops = edges[near], frm[near], hops[near]
    ranks = (g.c_rank[g.e_s[edges]], g.l_rank[g.e_l[edges]], g.c_rank[g.e_o[edges]])
    page = smallest([hops, *ranks], limit)
    parent = reach.parent
    matches = []
    for i in page.tolist():
        chain = [int(frm[i])]
        while parent[chain[-1]] >= 0:
            chain.append(int(parent[chain[-1]]))
        chain.reverse()
        matches.append(Reached(int(hops[i]), tuple(chain), int(edges[i])))
    return Explored(total, tuple(matches))


# ----- paths -----------------------------------------------------------------------------------


def hops_to_targets(g: WalkGraph, targets: list[int], max_depth: int) -> np.ndarray:
    """Hops from each concept to the nearest target over live edges, up to max_depth (else _FAR)."""
    far = np.full(g.n, _FAR, dtype=np.int64)
    frontier = np.array(targets, dtype=np.int64)
    far[frontier] = 0
    for hop in range(1, max_depth + 1):
        if not len(frontier):
            break
        idx, _src = g.expand(frontier)
        nb = g.other[idx]
        frontier = _distinct(nb[far[nb] == _FAR], g.n)
        far[frontier] = hop
    return far


def _trail_entries(ctx: Context, g: WalkGraph, c: int) -> tuple[list[int], list[int], np.ndarray]:
    """One concept's adjacency for the trail walk: each entry's neighbour (-1: a dead or hidden edge
    or a self-loop), its edge id, and the neighbour as an index into a hop array one longer than the
    concept count (-1 becomes its last slot, which is never near a target)."""
    got = g.trail_adj.get(c)
    if got is None:
        edges = adjacency(ctx, c)
        e_s, e_o, e_cnt, e_l = ctx.edges.subject, ctx.edges.object, ctx.edges.count, ctx.edges.label
        hidden = g.hidden
        nbs = []
        for e in edges:
            s, o = e_s[e], e_o[e]
            nbs.append(-1 if e_cnt[e] == 0 or s == o or e_l[e] == hidden else (o if s == c else s))
        index = np.array(nbs, dtype=np.int64)
        index[index < 0] = g.n
        got = g.trail_adj[c] = (nbs, edges, index)
    return got


class _Trails:
    """One depth-first enumeration. Only the entries that can still lead to a target in time are
    visited one by one ("candidates": live, not a self-loop, near enough for the remaining depth);
    the entries in between are counted against the budget in bulk, so the budget is spent exactly
    as drawing every entry would spend it."""

    def __init__(self, ctx: Context, targets: set[int], max_depth: int, budget: int) -> None:
        self.ctx = ctx
        self.g = g = walk_graph(ctx)
        far = hops_to_targets(g, sorted(targets), max_depth)
        self.far = np.append(far, _FAR)
        self.max_depth = max_depth
        self.budget = budget
        self.is_target = bytearray(g.n)
        for t in targets:
            self.is_target[t] = 1
        self.on_path = bytearray(g.n)
        self.candidates: dict[tuple[int, int], list[int]] = {}
        self.found: list[RankedTrail] = []
        self.e_sum = ctx.edges.weight

    def frame(self, c: int, depth: int) -> list[Any]:
        """[neighbours, edge ids, entry count, candidate positions, next candidate, next entry] for
        the concept at the end of a trail of `depth - 1` edges."""
        nbs, eids, index = _trail_entries(self.ctx, self.g, c)
        reach = self.max_depth - depth
        cands = self.candidates.get((c, reach))
        if cands is None:
            cands = self.candidates[(c, reach)] = np.flatnonzero(self.far[index] <= reach).tolist()
        return [nbs, eids, len(nbs), cands, 0, 0]

    def spend(self, count: int) -> bool:
        """Draw `count` more entries; False when the budget runs out first (the walk is capped)."""
        if self.budget < count:
            return False
        self.budget -= count
        return True

    def walk(self, o: int) -> bool:
        """Every trail from one origin; False when capped."""
        max_depth, on_path, is_target, found = self.max_depth, self.on_path, self.is_target, self.found
        e_sum = self.e_sum
        nodes: list[int] = [o]
        edges: list[int] = []
        weakest = [float("inf")]  # the smallest |sum| along the trail so far, per edge count
        on_path[o] = 1
        stack = [self.frame(o, 1)]
        while stack:
            top = stack[-1]
            nbs, eids, size, cands, ci, pos = top
            depth = len(edges) + 1
            child = None
            while ci < len(cands):
                p = cands[ci]
                ci += 1
                if not self.spend(p - pos + 1):
                    return False
                pos = p + 1
                nxt = nbs[p]
                if on_path[nxt]:
                    continue
                e = eids[p]
                strength = min(weakest[-1], abs(e_sum[e]))
                if is_target[nxt]:
                    found.append((depth, -strength, nodes + [nxt], edges + [e]))
                if depth < max_depth:
                    top[4], top[5] = ci, pos
                    nodes.append(nxt)
                    edges.append(e)
                    weakest.append(strength)
                    on_path[nxt] = 1
                    child = self.frame(nxt, depth + 1)
                    break
            if child is not None:
                stack.append(child)
                continue
            if not self.spend(size - pos):
                return False
            stack.pop()
            on_path[nodes.pop()] = 0
            if edges:
                edges.pop()
                weakest.pop()
        return True


def enumerate_trails(
    ctx: Context, origins: list[int], targets: set[int], max_depth: int, budget: int
) -> tuple[list[RankedTrail], bool]:
    """Depth-first: every simple trail origin → target within max_depth, until the budget runs out.

    The budget counts every adjacency entry drawn (dead edges and self-loops included); drawing
    one with nothing left caps the walk for every remaining origin.
    """
    trails = _Trails(ctx, targets, max_depth, budget)
    for o in origins:
        if trails.far[o] > max_depth:
            continue
        if not trails.walk(o):
            return trails.found, True
    return trails.found, False


@attrs.frozen
class FoundTrail:
    """One simple trail: its length, its concepts, its weakest link's |sum| and its edges."""

    distance: int
    path: tuple[int, ...]
    strength: float
    edges: tuple[int, ...]


@attrs.frozen
class Trails:
    """The trails paths found (all of them, or as many as the budget allowed) and the page, shortest first."""

    total: int
    capped: bool
    matches: tuple[FoundTrail, ...]


def trails(
    ctx: Context, origins: list[str], targets: list[str], max_depth: int, limit: int, budget: int = PATHS_BUDGET
) -> Trails:
    """Simple trails from any origin to any target, shortest first."""
    t_ids = set(concept_ids(ctx, targets))
    o_ids = concept_ids(ctx, origins)
    if not o_ids or not t_ids or max_depth == 0 or limit == 0:
        return Trails(0, False, ())
    found, capped = enumerate_trails(ctx, o_ids, t_ids, max_depth, budget)
    page = heapq.nsmallest(limit, found)  # the keys are distinct
    matches = tuple(FoundTrail(d, tuple(nodes), float(-neg), tuple(edges)) for d, neg, nodes, edges in page)
    return Trails(len(found), capped, matches)


# ----- unreachable_from ------------------------------------------------------------------------


@attrs.frozen
class Unreached:
    """unreachable_from's page: how many live associations no walk from the origins reaches, and the page's."""

    total: int
    edges: tuple[int, ...]


def unreached(
    ctx: Context, origins: list[str], limit: int, after: dict[str, Any] | None, check: Callable[[], None]
) -> Unreached:
    """Every live association no walk from the origins reaches: |weight| desc, then names, one page.

    `check` (the deadline) runs once per breadth-first level and once per SCAN_CHUNK edges.
    """
    g = walk_graph(ctx)
    visited = np.zeros(g.n, dtype=bool)
    frontier = np.array(concept_ids(ctx, origins), dtype=np.int64)
    visited[frontier] = True
    while len(frontier):
        check()
        idx, _src = g.expand(frontier)
        nb = g.other[idx]
        frontier = _distinct(nb[~visited[nb]], g.n)
        visited[frontier] = True
    m = len(g.e_s)
    orphan = np.zeros(m, dtype=bool)
    for start in range(0, m, SCAN_CHUNK):
        check()
        end = min(start + SCAN_CHUNK, m)
        orphan[start:end] = g.live[start:end] & ~visited[g.e_s[start:end]]
    edges = np.flatnonzero(orphan)
    total = len(edges)
    neg_abs = g.neg_abs_weight[edges]
    ranks = (g.c_rank[g.e_s[edges]], g.l_rank[g.e_l[edges]], g.c_rank[g.e_o[edges]])
    if after is not None:
        bound = -abs(float(after["weight"]))
        keep = _after_cursor(g, neg_abs > bound, neg_abs == bound, ranks, after)
        edges, neg_abs = edges[keep], neg_abs[keep]
        ranks = (ranks[0][keep], ranks[1][keep], ranks[2][keep])
    page = smallest([neg_abs, *ranks], limit)
    return Unreached(total, tuple(edges[page].tolist()))
