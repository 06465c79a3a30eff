"""Deterministic community detection over a context's concept graph (`louvain-cc/1`, docs/communities.md).

Concepts with at least one live, non-self-loop, non-netted association are the nodes; parallel
labels and both directions collapse into one undirected pair weighted by the summed |sum|.
Louvain runs level by level (nodes in index order, candidates compared with a strict `>` so the
lowest community id wins ties, ids renumbered by first member), each level's communities are split
into connected components, and the levels aggregate into a hierarchy of at most 8 recorded levels.

Floating-point sums are accumulated in exactly the order the contract's algorithm visits them, so
the partition does not depend on how this module happens to be written. The detection works on a
copied :class:`GraphSnapshot`, which is cheap to take and safe to analyse off the event loop.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import attrs
import numpy as np

MAX_LEVELS = 8
_F64_MAX = sys.float_info.max
_DEADLINE_STRIDE = 1024


class DeadlineExceeded(Exception):
    """The analysis ran past its deadline and was abandoned."""


@attrs.frozen
class GraphSnapshot:
    """A copy of the arrays detection reads: names and the edge arrays, indexed by id."""

    concepts: Sequence[str]
    labels: Sequence[str]
    e_s: Sequence[int]
    e_l: Sequence[int]
    e_o: Sequence[int]
    e_sum: Sequence[float]
    e_cnt: Sequence[int]

    @classmethod
    def of(cls, ctx: Any) -> GraphSnapshot:
        """Copy a context's graph so later writes cannot change what is being analysed."""
        return cls(
            list(ctx.concepts),
            list(ctx.labels),
            list(ctx.edges.subject),
            list(ctx.edges.label),
            list(ctx.edges.object),
            list(ctx.edges.weight),
            list(ctx.edges.count),
        )


@attrs.define
class WorkGraph:
    """Undirected weighted adjacency over dense node indices, neighbor lists sorted by index."""

    neighbors: list[list[int]]
    weights: list[list[float]]
    self_weight: list[float]

    def __len__(self) -> int:
        return len(self.neighbors)


def saturated(v: float) -> float:
    """Saturate an accumulated sum at ±f64::MAX, as the reference accumulates."""
    if v > _F64_MAX:
        return _F64_MAX
    if v < -_F64_MAX:
        return -_F64_MAX
    return v


Check = Callable[[], None]


def _no_check() -> None:
    return None


def deadline_check(deadline: float | None) -> Check:
    """A callable that raises DeadlineExceeded once `time.monotonic()` passes `deadline`."""
    if deadline is None:
        return _no_check

    def check() -> None:
        if time.monotonic() > deadline:
            raise DeadlineExceeded()

    return check


# ----- the leaf graph ----------------------------------------------------------------


def leaf_graph(snap: GraphSnapshot, check: Check = _no_check) -> tuple[list[int], WorkGraph]:
    """Dense nodes (concept ids ascending) and their collapsed undirected pair graph."""
    check()
    if not snap.e_s:
        return [], WorkGraph([], [], [])
    e_s = np.asarray(snap.e_s, dtype=np.int64)
    e_o = np.asarray(snap.e_o, dtype=np.int64)
    mag = np.abs(np.asarray(snap.e_sum, dtype=np.float64))
    keep = (np.asarray(snap.e_cnt, dtype=np.int64) != 0) & (e_s != e_o) & (mag != 0.0)
    lo = np.minimum(e_s, e_o)[keep]
    hi = np.maximum(e_s, e_o)[keep]
    mag = mag[keep]
    if not safe_total(mag):
        return _leaf_graph_python(snap, check)
    width = max(len(snap.concepts), int(hi.max(initial=0)) + 1)
    keys, inverse = np.unique(lo * width + hi, return_inverse=True)
    # bincount adds each bin's weights in input (edge id) order: the contract's accumulation order
    sums = np.bincount(inverse.ravel(), weights=mag, minlength=len(keys))
    pa, pb = keys // width, keys % width
    nodes = np.unique(np.concatenate((pa, pb)))
    check()
    graph = _csr_graph(len(nodes), np.searchsorted(nodes, pa), np.searchsorted(nodes, pb), sums, [0.0] * len(nodes))
    return nodes.tolist(), graph


def safe_total(weights: np.ndarray) -> bool:
    """Whether no running sum of these (non-negative) weights can come near f64::MAX."""
    total = float(np.sum(weights)) if len(weights) else 0.0
    return math.isfinite(total) and 8.0 * total < _F64_MAX


def _csr_graph(n: int, pa: np.ndarray, pb: np.ndarray, w: np.ndarray, self_weight: list[float]) -> WorkGraph:
    """Neighbor lists (sorted by index) from unique undirected pairs `pa < pb`."""
    rows = np.concatenate((pa, pb))
    cols = np.concatenate((pb, pa))
    ws = np.concatenate((w, w))
    order = np.lexsort((cols, rows))
    cols_list = cols[order].tolist()
    ws_list = ws[order].tolist()
    bounds = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n)))).tolist()
    neighbors = [cols_list[bounds[i] : bounds[i + 1]] for i in range(n)]
    weights = [ws_list[bounds[i] : bounds[i + 1]] for i in range(n)]
    return WorkGraph(neighbors, weights, self_weight)


def _leaf_graph_python(snap: GraphSnapshot, check: Check = _no_check) -> tuple[list[int], WorkGraph]:
    """The leaf graph transcribed step by step, with saturating sums (huge weights, and tests)."""
    merged: dict[tuple[int, int], float] = {}
    e_s, e_o, e_sum, e_cnt = snap.e_s, snap.e_o, snap.e_sum, snap.e_cnt
    for e in range(len(e_s)):
        if not e & (_DEADLINE_STRIDE * 64 - 1):
            check()
        if e_cnt[e] == 0:
            continue
        s, o = e_s[e], e_o[e]
        if s == o:
            continue
        mag = abs(e_sum[e])
        if mag == 0.0:
            continue
        key = (s, o) if s < o else (o, s)
        merged[key] = saturated(merged.get(key, 0.0) + mag)
    nodes = sorted({c for pair in merged for c in pair})
    index_of = {c: i for i, c in enumerate(nodes)}
    n = len(nodes)
    neighbors: list[list[int]] = [[] for _ in range(n)]
    weights: list[list[float]] = [[] for _ in range(n)]
    # pairs ascending by (a, b): every neighbor list comes out sorted (smaller neighbors first)
    for (a, b), w in sorted(merged.items()):
        ia, ib = index_of[a], index_of[b]
        neighbors[ia].append(ib)
        weights[ia].append(w)
        neighbors[ib].append(ia)
        weights[ib].append(w)
    return nodes, WorkGraph(neighbors, weights, [0.0] * n)


# ----- one level ---------------------------------------------------------------------


def _total_weight(g: WorkGraph) -> float:
    total = 0.0
    for i, (nb, wt) in enumerate(zip(g.neighbors, g.weights, strict=False)):
        total = saturated(total + g.self_weight[i])
        for j, w in zip(nb, wt, strict=False):
            if j > i:
                total = saturated(total + w)
    return total


def _strength(g: WorkGraph, i: int) -> float:
    total = 2.0 * g.self_weight[i]
    for w in g.weights[i]:
        total = saturated(total + w)
    return total


def _renumber(assignment: list[int]) -> int:
    seen: dict[int, int] = {}
    for i, c in enumerate(assignment):
        v = seen.get(c)
        if v is None:
            v = seen[c] = len(seen)
        assignment[i] = v
    return len(seen)


def _split_components(g: WorkGraph, assignment: list[int]) -> int:
    n = len(assignment)
    component = [-1] * n
    nxt = 0
    neighbors = g.neighbors
    for start in range(n):
        if component[start] >= 0:
            continue
        cid = nxt
        nxt += 1
        component[start] = cid
        home = assignment[start]
        frontier = [start]
        while frontier:
            node = frontier.pop()
            for j in neighbors[node]:
                if component[j] < 0 and assignment[j] == home:
                    component[j] = cid
                    frontier.append(j)
    assignment[:] = component
    return _renumber(assignment)


def one_level(g: WorkGraph, check: Check = _no_check) -> tuple[list[int], int]:
    """Greedy modularity moves to convergence, then the component split: (assignment, count)."""
    n = len(g)
    m = _total_weight(g)
    if m == 0.0:
        return list(range(n)), n
    k = [_strength(g, i) for i in range(n)]
    # Saturation can only bite when the weights come near f64::MAX; keep the fast path exact by
    # taking the transcribed reference path then.
    if not (4.0 * m < _F64_MAX):
        assignment = _move_nodes_reference(g, m, k, check)
    else:
        assignment = _move_nodes(g, m, k, check)
    _renumber(assignment)
    count = _split_components(g, assignment)
    return assignment, count


def _move_nodes(g: WorkGraph, m: float, k: list[float], check: Check) -> list[int]:
    n = len(g)
    comm = list(range(n))
    tot = list(k)
    two_m = 2.0 * m
    # One C-level gather per node fetches its neighbors' communities; a node whose neighbors all
    # sit in its own community has no other candidate, so it stays without any gain arithmetic.
    gathers: list[Callable[[list[int]], tuple[int, ...]] | None] = []
    for nb in g.neighbors:
        if not nb:
            gathers.append(None)
        elif len(nb) == 1:
            gathers.append(_single_gather(nb[0]))
        else:
            gathers.append(itemgetter(*nb))
    weights = g.weights
    moved = True
    while moved:
        moved = False
        for start in range(0, n, _DEADLINE_STRIDE):
            check()
            for i in range(start, min(n, start + _DEADLINE_STRIDE)):
                own = comm[i]
                ki = k[i]
                gather = gathers[i]
                if gather is None:
                    tot[own] = (tot[own] - ki) + ki
                    continue
                cs = gather(comm)
                if cs.count(own) == len(cs):
                    tot[own] = (tot[own] - ki) + ki
                    continue
                link = {own: 0.0}
                get = link.get
                for c, w in zip(cs, weights[i], strict=False):
                    link[c] = get(c, 0.0) + w
                tot[own] -= ki
                best = own
                best_gain = link[own] - ki * tot[own] / two_m
                for c, lc in link.items():
                    if c == own:
                        continue
                    gain = lc - ki * tot[c] / two_m
                    # strict ">" over an ascending scan: the lowest id among the best wins,
                    # and staying wins every tie it is part of
                    if gain > best_gain or (gain == best_gain and best != own and c < best):
                        best = c
                        best_gain = gain
                tot[best] += ki
                if best != own:
                    comm[i] = best
                    moved = True
    return comm


def _single_gather(index: int) -> Callable[[list[int]], tuple[int, ...]]:
    def gather(values: list[int]) -> tuple[int, ...]:
        return (values[index],)

    return gather


def _move_nodes_reference(g: WorkGraph, m: float, k: list[float], check: Check) -> list[int]:
    """The contract's moving phase transcribed step by step (saturating sums, ascending scan)."""
    n = len(g)
    comm = list(range(n))
    tot = list(k)
    moved = True
    visits = 0
    while moved:
        moved = False
        for i in range(n):
            visits += 1
            if visits % _DEADLINE_STRIDE == 0:
                check()
            own = comm[i]
            link: dict[int, float] = {own: 0.0}
            for j, w in zip(g.neighbors[i], g.weights[i], strict=False):
                link[comm[j]] = saturated(link.get(comm[j], 0.0) + w)
            tot[own] -= k[i]
            best = (own, link[own] - k[i] * tot[own] / (2.0 * m))
            for c in sorted(link):
                if c == own:
                    continue
                gain = link[c] - k[i] * tot[c] / (2.0 * m)
                if gain > best[1]:
                    best = (c, gain)
            comm[i] = best[0]
            tot[best[0]] += k[i]
            if best[0] != own:
                moved = True
    return comm


def aggregate(g: WorkGraph, assignment: list[int], count: int) -> WorkGraph:
    """Communities become nodes: intra weight (with member self-loops) to self, the rest summed per pair."""
    n = len(g)
    degrees = np.fromiter((len(nb) for nb in g.neighbors), dtype=np.int64, count=n)
    total = int(degrees.sum())
    cols = np.fromiter(itertools.chain.from_iterable(g.neighbors), dtype=np.int64, count=total)
    ws = np.fromiter(itertools.chain.from_iterable(g.weights), dtype=np.float64, count=total)
    self_w = np.asarray(g.self_weight, dtype=np.float64)
    if not safe_total(np.concatenate((ws, self_w))):
        return _aggregate_python(g, assignment, count)
    rows = np.repeat(np.arange(n, dtype=np.int64), degrees)
    home = np.asarray(assignment, dtype=np.int64)
    upper = cols > rows  # each pair once, in (i, j) order
    pi, pj, pw = rows[upper], cols[upper], ws[upper]
    hi, hj = home[pi], home[pj]
    intra = hi == hj
    # self weights: per node, its own self weight first, then its intra pairs in neighbor order
    ev_row = np.concatenate((np.arange(n, dtype=np.int64), pi[intra]))
    ev_col = np.concatenate((np.full(n, -1, dtype=np.int64), pj[intra]))
    ev_home = np.concatenate((home, hi[intra]))
    ev_w = np.concatenate((self_w, pw[intra]))
    order = np.lexsort((ev_col, ev_row))
    self_weight = np.bincount(ev_home[order], weights=ev_w[order], minlength=count).tolist()
    inter = ~intra
    a, b, w = hi[inter], hj[inter], pw[inter]
    lo, up = np.minimum(a, b), np.maximum(a, b)
    if len(lo) == 0:
        return WorkGraph([[] for _ in range(count)], [[] for _ in range(count)], self_weight)
    keys, inverse = np.unique(lo * count + up, return_inverse=True)
    sums = np.bincount(inverse.ravel(), weights=w, minlength=len(keys))
    return _csr_graph(count, keys // count, keys % count, sums, self_weight)


def _aggregate_python(g: WorkGraph, assignment: list[int], count: int) -> WorkGraph:
    """Aggregation transcribed step by step, with saturating sums (huge weights, and tests)."""
    self_weight = [0.0] * count
    between: dict[tuple[int, int], float] = {}
    for i, (nb, wt) in enumerate(zip(g.neighbors, g.weights, strict=False)):
        home = assignment[i]
        self_weight[home] = saturated(self_weight[home] + g.self_weight[i])
        for j, w in zip(nb, wt, strict=False):
            if j <= i:
                continue
            there = assignment[j]
            if there == home:
                self_weight[home] = saturated(self_weight[home] + w)
            else:
                key = (home, there) if home < there else (there, home)
                between[key] = saturated(between.get(key, 0.0) + w)
    neighbors: list[list[int]] = [[] for _ in range(count)]
    weights: list[list[float]] = [[] for _ in range(count)]
    for (a, b), w in sorted(between.items()):
        neighbors[a].append(b)
        weights[a].append(w)
        neighbors[b].append(a)
        weights[b].append(w)
    return WorkGraph(neighbors, weights, self_weight)


def detect_levels(g: WorkGraph, check: Check = _no_check) -> list[list[int]]:
    """The recorded level assignments: level k maps a level-k node to its community one level up."""
    levels: list[list[int]] = []
    graph = g
    while len(levels) < MAX_LEVELS:
        assignment, count = one_level(graph, check)
        if count == len(graph):
            break
        graph = aggregate(graph, assignment, count)
        levels.append(assignment)
        if count == 1:
            break
    if not levels:
        levels.append(list(range(len(g))))
    return levels
