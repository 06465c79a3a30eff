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
import struct
import sys
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import attrs
import numpy as np

ALGORITHM = "louvain-cc/1"
MAX_LEVELS = 8
TOP_ASSOCIATIONS = 24
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF
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
            list(ctx.e_s),
            list(ctx.e_l),
            list(ctx.e_o),
            list(ctx.e_sum),
            list(ctx.e_cnt),
        )


@attrs.define
class WorkGraph:
    """Undirected weighted adjacency over dense node indices, neighbor lists sorted by index."""

    neighbors: list[list[int]]
    weights: list[list[float]]
    self_weight: list[float]

    def __len__(self) -> int:
        return len(self.neighbors)


def _sat(v: float) -> float:
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
    if not _safe_total(mag):
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


def _safe_total(weights: np.ndarray) -> bool:
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
        merged[key] = _sat(merged.get(key, 0.0) + mag)
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
        total = _sat(total + g.self_weight[i])
        for j, w in zip(nb, wt, strict=False):
            if j > i:
                total = _sat(total + w)
    return total


def _strength(g: WorkGraph, i: int) -> float:
    total = 2.0 * g.self_weight[i]
    for w in g.weights[i]:
        total = _sat(total + w)
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
                link[comm[j]] = _sat(link.get(comm[j], 0.0) + w)
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
    if not _safe_total(np.concatenate((ws, self_w))):
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
        self_weight[home] = _sat(self_weight[home] + g.self_weight[i])
        for j, w in zip(nb, wt, strict=False):
            if j <= i:
                continue
            there = assignment[j]
            if there == home:
                self_weight[home] = _sat(self_weight[home] + w)
            else:
                key = (home, there) if home < there else (there, home)
                between[key] = _sat(between.get(key, 0.0) + w)
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


# ----- fingerprints ------------------------------------------------------------------


def fnv1a(data: bytes, h: int = FNV_OFFSET) -> int:
    """Fold bytes into an FNV-1a 64 digest."""
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & _MASK
    return h


_PY_NS_PER_BYTE = 150  # rough costs that pick which streams fold in numpy lockstep
_STEP_NS = 8000


def fnv1a_many(streams: Sequence[bytes]) -> list[int]:
    """FNV-1a 64 of many byte strings; all but the longest few are folded in lockstep with numpy."""
    out = [0] * len(streams)
    order = sorted(range(len(streams)), key=lambda i: -len(streams[i]))
    # fold the k longest byte by byte and the rest in max(len) numpy steps: pick the cheapest k
    best_k, best_cost, folded = 0, None, 0
    for k, i in enumerate(order):
        cost = _STEP_NS * len(streams[i]) + _PY_NS_PER_BYTE * folded
        if best_cost is None or cost < best_cost:
            best_k, best_cost = k, cost
        folded += len(streams[i])
    for i in order[:best_k]:
        out[i] = fnv1a(streams[i])
    short = order[best_k:]
    if not short or not streams[short[0]]:
        for i in short:
            out[i] = FNV_OFFSET
        return out
    lengths = np.fromiter((len(streams[i]) for i in short), dtype=np.int64, count=len(short))
    flat = np.frombuffer(b"".join(streams[i] for i in short), dtype=np.uint8)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    digests = np.full(len(short), FNV_OFFSET, dtype=np.uint64)
    prime = np.uint64(FNV_PRIME)
    # lengths descend, so the streams still folding at step t are a prefix
    steps = np.arange(int(lengths[0]), dtype=np.int64)
    active_at = (len(short) - np.searchsorted(lengths[::-1], steps, "right")).tolist()
    for t, active in enumerate(active_at):
        part = digests[:active]
        np.multiply(np.bitwise_xor(part, flat[offsets[:active] + t]), prime, out=part)
    for i, d in zip(short, digests.tolist(), strict=False):
        out[i] = int(d)
    return out


def _u64(v: int) -> bytes:
    return (v & _MASK).to_bytes(8, "little")


def _named(name: str) -> bytes:
    raw = name.encode("utf-8", "surrogatepass")
    return _u64(len(raw)) + raw


_SUM_COUNT = struct.Struct("<dQ")


def parent_fingerprint(child_digests: Sequence[int]) -> int:
    """The child count, then each child digest in ascending numeric order."""
    ordered = sorted(child_digests)
    return fnv1a(_u64(len(ordered)) + b"".join(_u64(d) for d in ordered))


def hex16(digest: int) -> str:
    return f"{digest:016x}"


# ----- the analysis --------------------------------------------------------------------


def analyze(snap: GraphSnapshot, deadline: float | None = None) -> dict[str, Any]:
    """The full analysis: `{algorithm, concept_count, edge_count, levels, communities}`, leaves first."""
    check = deadline_check(deadline)
    nodes, g = leaf_graph(snap, check)
    edge_count = sum(len(nb) for nb in g.neighbors) // 2
    if not nodes:
        return {"algorithm": ALGORITHM, "concept_count": 0, "edge_count": 0, "levels": 0, "communities": []}
    levels = detect_levels(g, check)
    communities = _assemble(snap, nodes, levels, check)
    return {
        "algorithm": ALGORITHM,
        "concept_count": len(nodes),
        "edge_count": edge_count,
        "levels": len(levels),
        "communities": communities,
    }


def _assemble(snap: GraphSnapshot, nodes: list[int], levels: list[list[int]], check: Check) -> list[dict[str, Any]]:
    """Every community's record, leaves first, then each higher level in order."""
    per_level = _levels_per_node(levels)
    leaf_count = _community_count(per_level[0])
    edges = _LeafEdges.of(snap, nodes, per_level[0])
    check()
    strength = _member_strength(edges, len(snap.concepts))
    concept_rank, label_rank = _name_ranks(snap, nodes)
    check()
    order = _LeafOrders.of(edges, leaf_count, strength, concept_rank, label_rank)
    check()
    out, streams = _leaf_communities(snap, nodes, levels, edges, order, strength, check)
    check()
    fingerprints = fnv1a_many(streams)
    for community, digest in zip(out, fingerprints, strict=False):
        community["fingerprint"] = hex16(digest)
    out.extend(_upper_communities(levels, per_level, fingerprints, check))
    return out


def _levels_per_node(levels: list[list[int]]) -> list[list[int]]:
    """For each level, every leaf-graph node's community at that level."""
    per_level = [list(levels[0])]
    for assignment in levels[1:]:
        prev = per_level[-1]
        per_level.append([assignment[c] for c in prev])
    return per_level


def _community_count(assignment: list[int]) -> int:
    """How many communities a dense assignment names."""
    return max(assignment) + 1 if assignment else 0


@attrs.frozen
class _LeafEdges:
    """The nodes with their leaf, and the live edges whose both ends share one leaf (`ind_*`)."""

    node_arr: np.ndarray
    node_leaf: np.ndarray
    induced: np.ndarray
    ind_home: np.ndarray
    ind_s: np.ndarray
    ind_l: np.ndarray
    ind_o: np.ndarray
    ind_sum: np.ndarray
    ind_cnt: np.ndarray
    ind_mag: np.ndarray

    @classmethod
    def of(cls, snap: GraphSnapshot, nodes: list[int], leaf_assignment: list[int]) -> _LeafEdges:
        """Select the edges induced by each leaf community."""
        node_arr = np.asarray(nodes, dtype=np.int64)
        node_leaf = np.asarray(leaf_assignment, dtype=np.int64)
        leaf_of = np.full(len(snap.concepts), -1, dtype=np.int64)
        leaf_of[node_arr] = node_leaf
        e_s = np.asarray(snap.e_s, dtype=np.int64)
        e_o = np.asarray(snap.e_o, dtype=np.int64)
        e_cnt = np.asarray(snap.e_cnt, dtype=np.int64)
        home = leaf_of[e_s]
        induced = np.nonzero((e_cnt != 0) & (home >= 0) & (leaf_of[e_o] == home))[0]  # live, both ends in one leaf
        ind_sum = np.asarray(snap.e_sum, dtype=np.float64)[induced]
        return cls(
            node_arr=node_arr,
            node_leaf=node_leaf,
            induced=induced,
            ind_home=home[induced],
            ind_s=e_s[induced],
            ind_l=np.asarray(snap.e_l, dtype=np.int64)[induced],
            ind_o=e_o[induced],
            ind_sum=ind_sum,
            ind_cnt=e_cnt[induced],
            ind_mag=np.abs(ind_sum),
        )


def _member_strength(edges: _LeafEdges, n_concepts: int) -> np.ndarray:
    """Each concept's summed |sum| over the induced edges it is an end of."""
    ind_s, ind_o, ind_mag = edges.ind_s, edges.ind_o, edges.ind_mag
    # Each induced edge's |sum| to its subject, then to its object unless it is a self-loop,
    # accumulated in edge id order (bincount keeps input order within a bin).
    if _safe_total(ind_mag):
        events = np.column_stack((ind_s, ind_o)).ravel()
        amounts = np.column_stack((ind_mag, np.where(ind_o != ind_s, ind_mag, 0.0))).ravel()
        strength: np.ndarray = np.bincount(events, weights=amounts, minlength=n_concepts)
        return strength
    strength = np.zeros(n_concepts, dtype=np.float64)
    for s, o, mag in zip(ind_s.tolist(), ind_o.tolist(), ind_mag.tolist(), strict=False):
        strength[s] = _sat(float(strength[s]) + mag)
        if o != s:
            strength[o] = _sat(float(strength[o]) + mag)
    return strength


def _name_ranks(snap: GraphSnapshot, nodes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Name-order ranks of the node concepts and of every label."""
    # Python str order is code-point order, i.e. UTF-8 byte order.
    concepts, labels = snap.concepts, snap.labels
    concept_rank = np.full(len(concepts), -1, dtype=np.int64)
    concept_rank[np.asarray(sorted(nodes, key=concepts.__getitem__), dtype=np.int64)] = np.arange(len(nodes))
    label_rank = np.zeros(max(len(labels), 1), dtype=np.int64)
    if labels:
        label_rank[np.asarray(sorted(range(len(labels)), key=labels.__getitem__), dtype=np.int64)] = np.arange(
            len(labels)
        )
    return concept_rank, label_rank


@attrs.frozen
class _LeafOrders:
    """Per leaf: members by strength, members by name, and induced-edge positions in two orders."""

    members: list[list[int]]
    names: list[list[int]]
    fingerprint_edges: list[list[int]]
    top_edges: list[list[int]]

    @classmethod
    def of(
        cls,
        edges: _LeafEdges,
        leaf_count: int,
        strength: np.ndarray,
        concept_rank: np.ndarray,
        label_rank: np.ndarray,
    ) -> _LeafOrders:
        """Sort members and induced edges within each leaf."""

        def grouped(order: np.ndarray, keys: np.ndarray, values: np.ndarray) -> list[list[int]]:
            """`values[order]` split by the (sorted) leaf in `keys[order]`."""
            flat = values[order].tolist()
            bounds = np.concatenate(([0], np.cumsum(np.bincount(keys[order], minlength=leaf_count)))).tolist()
            return [flat[bounds[c] : bounds[c + 1]] for c in range(leaf_count)]

        node_arr, node_leaf, ind_home = edges.node_arr, edges.node_leaf, edges.ind_home
        member_order = np.lexsort((concept_rank[node_arr], -strength[node_arr], node_leaf))
        name_order = np.lexsort((concept_rank[node_arr], node_leaf))
        positions = np.arange(len(edges.induced))
        fp_order = np.lexsort((concept_rank[edges.ind_o], label_rank[edges.ind_l], concept_rank[edges.ind_s], ind_home))
        top_order = np.lexsort((edges.induced, -edges.ind_mag, ind_home))
        return cls(
            members=grouped(member_order, node_leaf, node_arr),
            names=grouped(name_order, node_leaf, node_arr),
            fingerprint_edges=grouped(fp_order, ind_home, positions),
            top_edges=grouped(top_order, ind_home, positions),
        )


def _leaf_communities(
    snap: GraphSnapshot,
    nodes: list[int],
    levels: list[list[int]],
    edges: _LeafEdges,
    order: _LeafOrders,
    strength: np.ndarray,
    check: Check,
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The leaf communities (fingerprint still blank) and the byte stream each fingerprint hashes."""
    concepts, labels = snap.concepts, snap.labels
    s_list, l_list, o_list = edges.ind_s.tolist(), edges.ind_l.tolist(), edges.ind_o.tolist()
    sum_list, cnt_list = edges.ind_sum.tolist(), edges.ind_cnt.tolist()
    mag_list = edges.ind_mag.tolist()
    strength_list = strength.tolist()
    named_concept = {c: _named(concepts[c]) for c in nodes}
    named_label: dict[int, bytes] = {}
    has_parent = len(levels) > 1

    streams: list[bytes] = []
    out: list[dict[str, Any]] = []
    for cid in range(len(order.members)):
        if not cid & 255:
            check()
        parts = [named_concept[c] for c in order.names[cid]]
        for p in order.fingerprint_edges[cid]:
            lab = l_list[p]
            nl = named_label.get(lab)
            if nl is None:
                nl = named_label[lab] = _named(labels[lab])
            total = sum_list[p]
            if total == 0.0:
                total = 0.0  # -0.0 and 0.0 are one netted edge
            parts.append(
                named_concept[s_list[p]] + nl + named_concept[o_list[p]] + _SUM_COUNT.pack(total, cnt_list[p] & _MASK)
            )
        streams.append(b"".join(parts))
        community: dict[str, Any] = {"id": f"L0-{cid}", "level": 0}
        if has_parent:
            community["parent"] = f"L1-{levels[1][cid]}"
        community["fingerprint"] = ""
        community["concept_count"] = len(order.members[cid])
        community["members"] = [{"name": concepts[c], "strength": strength_list[c]} for c in order.members[cid]]
        associations: list[dict[str, Any]] = []
        for p in order.top_edges[cid]:
            if len(associations) == TOP_ASSOCIATIONS or mag_list[p] == 0.0:
                break
            associations.append(
                {
                    "subject": concepts[s_list[p]],
                    "label": labels[l_list[p]],
                    "object": concepts[o_list[p]],
                    "weight": sum_list[p] / cnt_list[p],
                    "count": cnt_list[p],
                }
            )
        if associations:
            community["top_associations"] = associations
        out.append(community)
    return out, streams


def _upper_communities(
    levels: list[list[int]], per_level: list[list[int]], leaf_fingerprints: list[int], check: Check
) -> list[dict[str, Any]]:
    """The communities of every level above the leaves, each fingerprinted from its children."""
    n_levels = len(levels)
    out: list[dict[str, Any]] = []
    fingerprints = leaf_fingerprints
    for level in range(1, n_levels):
        check()
        count = _community_count(per_level[level])
        below = _community_count(per_level[level - 1])
        assignment = levels[level]
        children: list[list[int]] = [[] for _ in range(count)]
        for child in range(below):
            children[assignment[child]].append(child)
        concept_counts = [0] * count
        for c in per_level[level]:
            concept_counts[c] += 1
        level_fingerprints = []
        for cid, kids in enumerate(children):
            digest = parent_fingerprint([fingerprints[k] for k in kids])
            level_fingerprints.append(digest)
            community: dict[str, Any] = {"id": f"L{level}-{cid}", "level": level}
            if level + 1 < n_levels:
                community["parent"] = f"L{level + 1}-{levels[level + 1][cid]}"
            community["fingerprint"] = hex16(digest)
            community["concept_count"] = concept_counts[cid]
            if kids:
                community["children"] = [f"L{level - 1}-{k}" for k in kids]
            out.append(community)
        fingerprints = level_fingerprints
    return out
