"""Banded spreading activation: the heap walk's exact results, settling a band of final activations at a time."""

from __future__ import annotations

import numpy as np

from taguru_server.store.model.context import Context
from taguru_server.store.read.activation_graph import ActivationGraph, activation_graph
from taguru_server.store.read.spread import FLOW_FLOOR, Activated, Activation, seed_ids

# Any flow out of a node with activation at most M is at most M·decay·(1 + 3·2⁻⁵³).
BAND_SLACK = 1.0 + 1e-12


def _ragged(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ranges [starts[i], starts[i] + lens[i])."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lens) - lens
    return np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lens)


def _outflows(g: ActivationGraph, nodes: np.ndarray, ad: np.ndarray, reach: float) -> tuple[np.ndarray, np.ndarray]:
    """(neighbour, flow) for every entry of `nodes` whose flow can reach the floor.

    A node whose strongest edge carries no flow to the floor propagates nothing (flow grows with
    |sum|), and only its entries with |sum| >= floor·total/(a·decay) can; the flow is computed
    with the heap walk's operations in its order.
    """
    carries = (ad * g.maxabs[nodes]) / g.total_nz[nodes] >= FLOW_FLOOR
    if not carries.all():
        nodes, ad = nodes[carries], ad[carries]
    lvl = g.levels.searchsorted(reach * g.total[nodes] / ad)
    starts = g.ptr[nodes]
    lens = g.key.searchsorted(nodes * g.n_levels + (g.n_levels - 1 - lvl), side="right") - starts
    idx = _ragged(starts, lens)
    flow = (np.repeat(ad, lens) * g.abs[idx]) / np.repeat(g.total[nodes], lens)
    return g.other[idx], flow


class _Bands:
    """The banded walk's state: activations, settle rounds, the frontier and the scored edges."""

    __slots__ = (
        "best",
        "round_of",
        "queued",
        "stamp",
        "frontier",
        "cand_e",
        "cand_s",
        "cand_p",
        "heavy_at",
        "rnd",
        "top",
        "kth",
    )

    def __init__(self, n: int, seeds: list[int]) -> None:
        self.best = np.zeros(n, dtype=np.float64)
        self.round_of = np.full(n, -1, dtype=np.int64)  # settle round, −1 while unsettled
        self.queued = np.zeros(n, dtype=bool)  # ever reached
        self.stamp = np.zeros(n, dtype=np.int64)
        self.frontier = np.array(sorted(seeds), dtype=np.int64)  # reached, not settled
        self.best[self.frontier] = 1.0
        self.queued[self.frontier] = True
        self.cand_e: list[np.ndarray] = []
        self.cand_s: list[np.ndarray] = []
        self.cand_p: list[np.ndarray] = []
        self.heavy_at = 0
        self.rnd = 0
        self.top = np.zeros(0, dtype=np.float64)  # the `limit` strongest scores so far
        self.kth = 0.0  # the limit-th strongest score so far; 0 while fewer are scored (scores are > 0)


def _next_band(st: _Bands, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """Take from the frontier every node whose activation is final, and stamp its settle round."""
    frontier = st.frontier
    vals = st.best[frontier]
    tau = float(vals.max()) * decay * BAND_SLACK
    in_band = vals > tau
    if in_band.all():
        band, a_band, st.frontier = frontier, vals, frontier[:0]
    else:
        band, a_band, st.frontier = frontier[in_band], vals[in_band], frontier[~in_band]
    st.round_of[band] = st.rnd
    return band, a_band


def _run_prefixes(prod: np.ndarray, scored: np.ndarray, lens: np.ndarray, limit: int) -> np.ndarray:
    """The first `limit` scored entries of each node's run: they hold the run's `limit` strongest scores.

    A run is in |sum| descending order and its scores are one activation times |sum|, so the scored
    entries of a run descend and the `limit` strongest scores of the band lie in these prefixes.
    Selecting the top of the band from the prefixes keeps np.partition off a hub's whole run: a
    long descending run with few distinct values is introselect's slow case (74 ms for 538k entries
    with 564 distinct values, against 10 ms for 1M random values)."""
    if len(prod) <= limit:
        return prod[scored]
    if len(lens) == 1:  # a band of one node: its run is already in order
        return prod[scored][:limit]
    counted = np.cumsum(scored)
    before = np.concatenate((np.zeros(1, dtype=counted.dtype), counted))[np.cumsum(lens) - lens]
    return prod[scored & (counted - np.repeat(before, lens) <= limit)]


def _score_band(
    g: ActivationGraph, st: _Bands, band: np.ndarray, a_band: np.ndarray, ad: np.ndarray, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """Score every edge of the band where a band node is its first-settled endpoint; (neighbour, flow).

    Once `limit` edges are scored, an entry whose score cannot reach the limit-th strongest so far
    (which only grows) and whose flow cannot reach the floor changes nothing: a node's entries are
    in |sum| descending order, so only a prefix of each is read (a hub's is usually short)."""
    starts = g.ptr[band]
    if st.kth > 0.0:
        need = np.minimum(st.kth / ad, (FLOW_FLOOR * g.total[band]) / ad) * (1.0 - 1e-9)
        lvl = g.levels.searchsorted(need)
        lens = g.key.searchsorted(band * g.n_levels + (g.n_levels - 1 - lvl), side="right") - starts
    else:
        lens = g.ptr[band + 1] - starts
    idx = _ragged(starts, lens)
    nodes = np.repeat(band, lens)
    other = g.other[idx]
    r_o = st.round_of[other]
    a_c = np.repeat(a_band, lens)
    a_o = st.best[other]
    mine = (r_o < 0) | ((r_o == st.rnd) & ((a_c > a_o) | ((a_c == a_o) & (nodes <= other))))
    prod = np.repeat(ad, lens) * g.abs[idx]
    scored = mine & (prod > 0)
    st.cand_e.append(g.edge[idx][scored])
    st.cand_s.append(prod[scored])
    st.cand_p.append(nodes[scored])
    merged = np.concatenate((st.top, _run_prefixes(prod, scored, lens, limit)))
    if len(merged) > limit:
        merged = np.partition(merged, len(merged) - limit)[len(merged) - limit :]
    st.top = merged
    if len(merged) >= limit:
        st.kth = float(merged.min())
    return other, prod / np.repeat(g.total[band], lens)


def _relax(st: _Bands, other: np.ndarray, flow: np.ndarray) -> None:
    """Raise unsettled neighbours to the flows that improve them; newly reached ones join the frontier."""
    ok = (flow >= FLOW_FLOOR) & (st.round_of[other] < 0)
    other, flow = other[ok], flow[ok]
    ok = flow > st.best[other]
    other, flow = other[ok], flow[ok]
    if other.size:
        np.maximum.at(st.best, other, flow)
        new = other[~st.queued[other]]
        if new.size:
            order = np.arange(len(new))
            st.stamp[new] = order
            new = new[st.stamp[new] == order]  # one of each
            st.queued[new] = True
            st.frontier = np.concatenate((st.frontier, new))


def _scoring_done(ctx: Context, g: ActivationGraph, st: _Bands, decay: float, limit: int) -> bool:
    """Whether no later producer can reach the limit-th strength scored so far.

    Later activations are at most the frontier's max; unscored edges have no settled end."""
    if len(st.top) < limit:
        return False
    kth = st.kth
    heavy, round_of = g.heavy, st.round_of
    while st.heavy_at < len(heavy):
        e = int(heavy[st.heavy_at])
        if round_of[ctx.edges.subject[e]] < 0 and round_of[ctx.edges.object[e]] < 0:
            break
        st.heavy_at += 1
    top_abs = float(g.heavy_abs[st.heavy_at]) if st.heavy_at < len(heavy) else 0.0
    # a waiting node ends at most at max(its value, what others can still send it); a node
    # not reached yet at most at the latter
    fv = st.best[st.frontier]
    later = float(fv.max()) * decay * BAND_SLACK
    bound = max(float(((np.maximum(fv, later) * decay) * g.maxabs[st.frontier]).max()), (later * decay) * top_abs)
    return bound < kth


def _reach_rest(g: ActivationGraph, st: _Bands, decay: float, reach: float) -> None:
    """Mark every node the waiting frontier still reaches (scoring is closed).

    Flow never amplifies (decay < 1), so relaxing every waiting node with its current value and
    re-relaxing whatever improves reaches the same fixpoint as the heap walk, in fewer rounds."""
    best, stamp = st.best, st.stamp
    active = st.frontier
    while active.size:
        other, flow = _outflows(g, active, best[active] * decay, reach)
        ok = (flow >= FLOW_FLOOR) & (flow > best[other])
        other, flow = other[ok], flow[ok]
        if not other.size:
            break
        np.maximum.at(best, other, flow)
        order = np.arange(len(other))
        stamp[other] = order
        active = other[stamp[other] == order]  # each improved node once
        st.queued[active] = True


def _scored_total(g: ActivationGraph, settled: np.ndarray, best: np.ndarray, decay: float) -> int:
    """Live non-zero edges with a settled endpoint whose score is not zero."""
    if (FLOW_FLOOR * decay) * g.min_abs > 0:
        return _touching(g, settled)
    # scores may underflow to zero: count them one by one
    s_in, o_in = settled[g.use_s], settled[g.use_o]
    hit = s_in | o_in
    es, eo = g.use_s[hit], g.use_o[hit]
    a_hi = np.maximum(np.where(s_in[hit], best[es], -1.0), np.where(o_in[hit], best[eo], -1.0))
    return int(np.count_nonzero((a_hi * decay) * g.use_abs[hit] > 0))


def _touching(g: ActivationGraph, settled: np.ndarray) -> int:
    """Live non-zero edges with at least one settled endpoint.

    Read from the settled nodes' adjacency when that is smaller than the edge list: every such
    edge is listed once per settled endpoint (a self-loop once), so the edges listed twice, those
    whose other end is settled too, are counted once."""
    nodes = np.flatnonzero(settled)
    deg = g.ptr[nodes + 1] - g.ptr[nodes]
    listed = int(deg.sum())
    if 3 * listed >= len(g.use_s):  # an adjacency entry costs about three edge-list entries
        return int(np.count_nonzero(settled[g.use_s] | settled[g.use_o]))
    idx = _ragged(g.ptr[nodes], deg)
    other = g.other[idx]
    twice = int(np.count_nonzero(settled[other] & (other != np.repeat(nodes, deg))))
    return listed - twice // 2


def _strongest_matches(
    g: ActivationGraph, st: _Bands, seeds: list[int], decay: float, limit: int
) -> tuple[Activated, ...]:
    """The `limit` strongest scored edges (ties: lower edge id) with each producer's path from a seed."""
    edges = np.concatenate(st.cand_e)
    score = np.concatenate(st.cand_s)
    producer = np.concatenate(st.cand_p)
    if len(edges) > limit:
        cut = np.partition(-score, limit - 1)[limit - 1]
        keep = -score <= cut
        edges, producer, score = edges[keep], producer[keep], score[keep]
    pick = np.lexsort((edges, -score))[:limit]
    parents: dict[int, int] = {}
    seed_set = set(seeds)
    best, round_of, ptr, adj_other, adj_abs, total = st.best, st.round_of, g.ptr, g.other, g.abs, g.total

    def parent_of(c: int) -> int:
        p = parents.get(c)
        if p is None:
            lo, hi = int(ptr[c]), int(ptr[c + 1])
            nb = adj_other[lo:hi]
            ok = round_of[nb] >= 0
            nb = nb[ok]
            flows = ((best[nb] * decay) * adj_abs[lo:hi][ok]) / total[nb]
            cands = nb[flows == best[c]]
            top = best[cands].max()
            p = int(cands[best[cands] == top].min())
            parents[c] = p
        return p

    matches = []
    for e, c, st_e in zip(edges[pick].tolist(), producer[pick].tolist(), score[pick].tolist(), strict=False):
        chain = [c]
        while chain[-1] not in seed_set:
            chain.append(parent_of(chain[-1]))
        chain.reverse()
        matches.append(Activated(e, float(st_e), tuple(chain)))
    return tuple(matches)


def activate_banded(
    ctx: Context, origins: list[str], decay: float, limit: int, total: bool = True, graph: ActivationGraph | None = None
) -> Activation:
    """The heap walk's results, settling a whole band of final activations at a time.

    A node's activation is final once it exceeds every flow the unsettled nodes can still
    send (at most max-unsettled·decay, plus rounding slack), so all such nodes are settled
    together and relax their edges with array operations. Each node still propagates once,
    with its final activation and the same f64 operations as the heap walk, so every
    activation is bit-identical; only edges whose flow can reach the floor are visited
    (found by |sum|, in which flow grows). Settle order is activation desc, concept id asc
    (heap ties pop the lower id, and a flow is always below its producer), which fixes each
    edge's producer (its first-settled endpoint) and each concept's parent (the first
    settled neighbour whose flow equals its activation). Edges are scored band by band
    until no later producer can reach the current `limit`-th strength; `total` is then the
    count of live non-zero edges with a settled endpoint. `graph` (a window's) replaces the
    context's activation graph when given.
    """
    g = activation_graph(ctx) if graph is None else graph
    seeds = seed_ids(ctx, origins)
    if not seeds:
        return Activation(0, ())
    st = _Bands(len(ctx.concepts), seeds)
    reach = FLOW_FLOOR * (1.0 - 1e-9)  # |sum| cut-off margin, far above rounding error
    scoring = limit > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        while st.frontier.size:
            band, a_band = _next_band(st, decay)
            ad = a_band * decay
            if scoring:
                other, flow = _score_band(g, st, band, a_band, ad, limit)
            else:
                other, flow = _outflows(g, band, ad, reach)
            _relax(st, other, flow)
            st.rnd += 1
            if scoring and st.frontier.size and _scoring_done(ctx, g, st, decay, limit):
                break
        if not total:  # the matches are final: only the count needs the rest of the reach
            return Activation(-1, _strongest_matches(g, st, seeds, decay, limit) if scoring and st.cand_e else ())
        _reach_rest(g, st, decay, reach)
    scored_total = _scored_total(g, st.queued, st.best, decay)  # every reached node settles
    if limit <= 0 or not st.cand_e:
        return Activation(scored_total, ())
    return Activation(scored_total, _strongest_matches(g, st, seeds, decay, limit))
