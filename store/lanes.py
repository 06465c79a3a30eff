"""The read lanes over one context: resolve, describe, query/recall, activate, search, citations."""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import attrs
import numpy as np

from taguru_server.store.context import CONCEPT, LABEL, Context, Passage
from taguru_server.store.text import normalize, query_terms
from taguru_server.store.vector_lane import FusedHit, LaneState, VectorQuery, classify, fuse, sweep
from taguru_server.store.wire import F32

NO_EMBEDDINGS = "no embedding provider is configured"
GLOSSED_CANDIDATES = 8
SEMANTIC_TIER_BELOW = 0.5
FLOW_FLOOR = 1e-6


def warm(ctx: Context) -> None:
    """Build the read-side indexes (BM25 segments, activation graph, lexicon views) up front."""
    ctx.bm25.seal()
    _activation_graph(ctx)
    for lexicon in ctx.lexicons:
        lexicon._views()


def read_version(ctx: Context) -> tuple[int, ...]:
    """What a cached read result may depend on: edges and their attributions, passages, names.

    Every edge or attribution change bumps `graph_version`, every passage store or removal
    bumps `rev_passages` and the BM25 index version; a rebuilt context is a new object with
    its own `read_cache`."""
    return (
        ctx.graph_version,
        ctx.meta.rev_passages,
        ctx.bm25.version,
        len(ctx.e_s),
        len(ctx.concepts),
        len(ctx.labels),
        len(ctx.sources),
    )


def versioned_cache(ctx: Context, name: str, max_entries: int = 100_000) -> dict[Any, Any]:
    """A dict in the context's read cache that starts empty whenever `read_version` changes
    (and when it grows past `max_entries`)."""
    version = read_version(ctx)
    hit = ctx.read_cache.get(name)
    if hit is None or hit[0] != version or len(hit[1]) >= max_entries:
        hit = (version, {})
        ctx.read_cache[name] = hit
    return hit[1]


# ----- resolve -------------------------------------------------------------------


@attrs.frozen
class ResolveMatch:
    """One resolve candidate: the concept (or label) record, its name, Dice score and hit kind."""

    record: int
    name: str
    score: float
    kind: str


def resolve_matches(ctx: Context, kind: int, cue: str, dice_floor: float, limit: int) -> list[ResolveMatch]:
    """Lexical resolve of a cue to canonical concept (or label) names, best first."""
    names = ctx.concepts if kind == CONCEPT else ctx.labels
    lexicon = ctx.lexicons[kind]
    found = lexicon.lookup(cue, dice_floor)
    if not found:
        return []
    q = normalize(cue)
    rows = []
    for record, score, hit_kind in found:
        name = names[record]
        if hit_kind == "exact" and normalize(name) != q:
            hit_kind = "alias"
        rows.append(ResolveMatch(record, name, float(score), hit_kind))
    rows.sort(key=lambda r: (-r.score, r.name))
    return rows[:limit]


def resolve(ctx: Context, kind: int, cue: str, dice_floor: float, limit: int) -> list[dict[str, Any]]:
    """The resolve lane's wire candidates: `resolve_matches`, the first few with a gloss."""
    out = []
    for i, m in enumerate(resolve_matches(ctx, kind, cue, dice_floor, limit)):
        item: dict[str, Any] = {"name": m.name, "score": m.score, "tier": "lexical", "kind": m.kind}
        if i < GLOSSED_CANDIDATES:
            item["gloss"] = concept_gloss(ctx, m.record) if kind == CONCEPT else label_gloss(ctx, m.record)
        out.append(item)
    return out


def _fact(ctx: Context, e: int, omit_subject: bool) -> str:
    subject = "" if omit_subject else ctx.concepts[ctx.e_s[e]] + "の"
    neg = "ではない" if ctx.e_sum[e] < 0 else ""
    return f"{subject}{ctx.labels[ctx.e_l[e]]}は{ctx.concepts[ctx.e_o[e]]}{neg}。"


def _strongest(ctx: Context, edges: list[int], n: int) -> list[int]:
    live = [e for e in edges if ctx.e_cnt[e] > 0]
    return heapq.nsmallest(n, live, key=lambda e: (-abs(ctx.e_sum[e]), e))


def _concept_edges(ctx: Context, c: int) -> list[int]:
    return ctx.out_edges[c] + [e for e in ctx.in_edges[c] if ctx.e_s[e] != ctx.e_o[e]]


def _current_graph(ctx: Context) -> _ActivationGraph | None:
    """The activation graph if it is built for the current graph version (never builds it)."""
    cached = ctx.read_cache.get("activation")
    if cached is not None and cached[0] == ctx.graph_version and cached[1] == len(ctx.concepts):
        return cached[2]
    return None


def _zero_sum_live(ctx: Context, edges: list[int]) -> list[int]:
    """The live edges whose sum is zero (the activation graph leaves them out), by edge id."""
    return sorted(e for e in edges if ctx.e_cnt[e] > 0 and ctx.e_sum[e] == 0)


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
    g = _current_graph(ctx)
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
            labels = memo["edge_labels"] = np.array(ctx.e_l, dtype=np.int64)
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
        s = ctx.e_s[e]
        parts.append(_fact(ctx, e, s == c or s == prev))
        prev = s
    return "".join(parts)


def label_gloss(ctx: Context, lab: int) -> str:
    """`{label}。` then up to three of the label's strongest live facts."""
    parts = [ctx.labels[lab] + "。"]
    prev: int | None = None
    for e in gloss_edges(ctx, LABEL, lab):
        s = ctx.e_s[e]
        parts.append(_fact(ctx, e, s == prev))
        prev = s
    return "".join(parts)


# ----- describe, query, recall ---------------------------------------------------


def describe(ctx: Context, concept: str) -> dict[str, Any] | None:
    c = ctx.find_concept(concept)
    if c is None:
        return None

    def tally(edges: list[int]) -> list[dict[str, Any]]:
        counts: dict[int, int] = {}
        for e in edges:
            if ctx.e_cnt[e] > 0:
                counts[ctx.e_l[e]] = counts.get(ctx.e_l[e], 0) + 1
        return [
            {"label": ctx.labels[lab], "count": n} for lab, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    as_object = ctx.in_edges[c] + [e for e in ctx.out_edges[c] if ctx.e_o[e] == c]
    return {"concept": ctx.concepts[c], "as_subject": tally(ctx.out_edges[c]), "as_object": tally(as_object)}


def _sort_key(ctx: Context, e: int) -> tuple[float, str, str, str]:
    return (-abs(ctx.weight(e)), ctx.concepts[ctx.e_s[e]], ctx.labels[ctx.e_l[e]], ctx.concepts[ctx.e_o[e]])


def ranked_edges(ctx: Context, edges: list[int], limit: int) -> list[int]:
    """The first `limit` edges in /query order: |weight| desc, then subject, label, object names."""
    keyed = [(_sort_key(ctx, e), e) for e in edges]
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
                grouped.setdefault(ctx.e_l[e], []).append(e)
            labels = by_label[c] = {k: tuple(v) for k, v in grouped.items()}
        found = memo[(c, lab)] = tuple(sorted((_sort_key(ctx, e), e) for e in labels.get(lab, ())))
    return found


def ranked_facets(ctx: Context, subjects: list[str], labels: list[str], limit: int) -> list[int]:
    """`ranked_edges(ctx, query_edges(ctx, subjects, labels, None), limit)`, merged from the per
    (subject, label) lists: every edge sits in exactly one of them, and /query order is total."""
    cs = {c for c in map(ctx.find_concept, subjects) if c is not None}
    ls = {lab for lab in map(ctx.find_label, labels) if lab is not None}
    lists = [_facet(ctx, c, lab) for c in cs for lab in ls]
    return [e for _k, e in itertools.islice(heapq.merge(*lists), max(limit, 0))]


def page_matches(ctx: Context, edges: list[int], limit: int, after: dict[str, Any] | None) -> dict[str, Any]:
    """Order matching edges, apply the cursor and limit, and shape the page."""
    total = len(edges)
    keyed = [(_sort_key(ctx, e), e) for e in edges]
    if after is not None:
        bound = (-abs(float(after["weight"])), after["subject"], after["label"], after["object"])
        keyed = [ke for ke in keyed if ke[0] > bound]
    page = heapq.nsmallest(limit, keyed) if limit < len(keyed) else sorted(keyed)
    return {
        "total": total,
        "matches": [ctx.association_out(e) for _k, e in page],
        "plan": {"contexts": [ctx.name]},
    }


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
                out.extend(e for e in ctx.out_edges[i] if ctx.e_o[e] == i)
        return out

    sizes = []
    for pos, ids in sets:
        lists = ctx.out_edges if pos == "s" else ctx.label_edges if pos == "l" else ctx.in_edges
        sizes.append((sum(len(lists[i]) for i in ids), pos, ids))
    sizes.sort(key=lambda t: t[0])
    _n, pos0, ids0 = sizes[0]
    arrays = {"s": ctx.e_s, "l": ctx.e_l, "o": ctx.e_o}
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
        ctx.concepts[ctx.e_s[e]],
        ctx.labels[ctx.e_l[e]],
        ctx.concepts[ctx.e_o[e]],
        tuple(Attribution(sources[sid], float(rsum), paragraph) for sid, rsum, _count, paragraph in ctx.e_attr[e]),
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


# ----- activate ------------------------------------------------------------------


# Banded activation is exact when a flow can never reach its producer's activation; with
# decay this close to 1 rounding could break that, so the plain heap walk runs instead.
BANDED_DECAY_MAX = 1.0 - 1e-9
# Any flow out of a node with activation at most M is at most M·decay·(1 + 3·2⁻⁵³).
BAND_SLACK = 1.0 + 1e-12


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


ACTIVATION_CACHE_ENTRIES = 4096


def activation(ctx: Context, origins: list[str], decay: float, limit: int, total: bool = True) -> Activation:
    """Spreading activation from the origins; edges ranked by the strength that reached them.

    A result depends on the graph, the origins' concept ids, decay (to the bit) and limit
    only, so it is kept per read version: popular origins are walked once per change.
    With `total=False` (evidence reads only the matches) the banded walk stops once scoring
    is done and `total` is −1: counting every edge the origins reach costs a pass over all
    edges (12 ms at 4M edges) that the matches do not need."""
    key = (tuple(_seed_ids(ctx, origins)), float(decay).hex(), limit)
    memo = versioned_cache(ctx, "activations", ACTIVATION_CACHE_ENTRIES)
    found = memo.get(key)
    if found is None and not total:
        found = memo.get((*key, "matches"))
    if found is None:
        if 0.0 < decay < BANDED_DECAY_MAX:
            found = _activate_banded(ctx, origins, decay, limit, total)
        else:
            found = activation_plain(ctx, origins, decay, limit)
        memo[key if found.total >= 0 else (*key, "matches")] = found
    return found


def activate(ctx: Context, origins: list[str], decay: float, limit: int) -> dict[str, Any]:
    """The activate lane's wire result (`activation`, rendered)."""
    return render_activation(ctx, activation(ctx, origins, decay, limit))


def render_activation(ctx: Context, found: Activation) -> dict[str, Any]:
    """An Activation as the wire's {total, matches: [{strength, path, association}]}."""
    concepts = ctx.concepts
    return {
        "total": found.total,
        "matches": [
            {"strength": m.strength, "path": [concepts[c] for c in m.path], "association": ctx.association_out(m.edge)}
            for m in found.matches
        ],
    }


def activation_plain(ctx: Context, origins: list[str], decay: float, limit: int) -> Activation:
    """Spreading activation as the reference defines it: a max-heap walk over every reachable concept."""
    strength, source, parent, scored_total = spread(ctx, origins, decay)
    ranked = heapq.nsmallest(limit, strength, key=lambda e: (-strength[e], e))
    matches = tuple(Activated(e, float(strength[e]), tuple(_path(parent, source[e]))) for e in ranked)
    return Activation(scored_total, matches)


def spread(
    ctx: Context, origins: list[str], decay: float
) -> tuple[dict[int, float], dict[int, int], dict[int, int], int]:
    """Run activation; returns per-edge strength, producing concept, parent links, scored count."""
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
    e_sum, e_cnt, e_s, e_o = ctx.e_sum, ctx.e_cnt, ctx.e_s, ctx.e_o
    while heap:
        neg_a, c = heapq.heappop(heap)
        if c in settled:
            continue
        settled.add(c)
        a = -neg_a
        edges = [e for e in ctx.out_edges[c] if e_cnt[e] > 0] + [e for e in ctx.in_edges[c] if e_cnt[e] > 0]
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


class _ActivationGraph:
    """Per graph version: each concept's live, non-zero edges, its total, and search keys.

    A concept's entries are kept in |sum| descending order (propagation and scoring do not
    depend on the visit order); only its total is summed in visit order, as the reference does.
    """

    __slots__ = (
        "ptr",
        "other",
        "abs",
        "edge",
        "total",
        "total_nz",
        "maxabs",
        "key",
        "levels",
        "n_levels",
        "use_s",
        "use_o",
        "use_abs",
        "min_abs",
        "heavy",
        "heavy_abs",
    )

    def __init__(self, ctx: Context) -> None:
        n = len(ctx.concepts)
        m = len(ctx.e_s)
        e_s = np.array(ctx.e_s, dtype=np.int64) if m else np.zeros(0, np.int64)
        e_o = np.array(ctx.e_o, dtype=np.int64) if m else np.zeros(0, np.int64)
        cnt = np.array(ctx.e_cnt, dtype=np.int64) if m else np.zeros(0, np.int64)
        absum = np.abs(np.array(ctx.e_sum, dtype=np.float64)) if m else np.zeros(0)
        use = (cnt > 0) & (absum > 0)  # dead or zero-sum edges neither score nor carry flow
        ids = np.flatnonzero(use)
        inward = ids[e_s[ids] != e_o[ids]]  # a self-loop is visited once, as outgoing
        node = np.concatenate((e_s[ids], e_o[inward]))
        other = np.concatenate((e_o[ids], e_s[inward]))
        edge = np.concatenate((ids, inward))
        side = np.concatenate((np.zeros(len(ids), np.int64), np.ones(len(inward), np.int64)))
        counts = np.bincount(node, minlength=n) if len(node) else np.zeros(n, np.int64)
        self.ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=self.ptr[1:])
        # step 3: the total of |sum| in visit order (outgoing then incoming, creation order)
        visit = np.lexsort((edge, side, node))
        vals = absum[edge[visit]].tolist()
        ptr = self.ptr.tolist()
        total = [0.0] * n
        for c in np.flatnonzero(counts).tolist():
            t = 0.0
            for v in vals[ptr[c] : ptr[c + 1]]:
                t += v
            total[c] = t
        self.total = np.array(total, dtype=np.float64)
        self.total_nz = np.where(self.total > 0, self.total, 1.0)
        # entries by concept, then |sum| descending: key = concept·L + (L−1−level(|sum|))
        self.levels = np.unique(absum[ids]) if len(ids) else np.zeros(1)
        self.n_levels = len(self.levels)
        level = np.searchsorted(self.levels, absum[edge])
        key = node * self.n_levels + (self.n_levels - 1 - level)
        order = np.lexsort((edge, key))
        self.key = key[order]
        self.edge = edge[order]
        self.other = other[order]
        self.abs = absum[self.edge]
        self.maxabs = np.zeros(n, dtype=np.float64)
        has = counts > 0
        self.maxabs[has] = self.abs[self.ptr[:-1][has]]
        self.use_s = e_s[ids]
        self.use_o = e_o[ids]
        self.use_abs = absum[ids]
        self.min_abs = float(absum[ids].min()) if len(ids) else 0.0
        self.heavy = ids[np.argsort(-absum[ids], kind="stable")]  # edges by |sum| descending
        self.heavy_abs = absum[self.heavy]


def _activation_graph(ctx: Context) -> _ActivationGraph:
    cached = ctx.read_cache.get("activation")
    if cached is not None and cached[0] == ctx.graph_version and cached[1] == len(ctx.concepts):
        return cached[2]
    graph = _ActivationGraph(ctx)
    ctx.read_cache["activation"] = (ctx.graph_version, len(ctx.concepts), graph)
    return graph


def _ragged(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ranges [starts[i], starts[i] + lens[i])."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lens) - lens
    return np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lens)


def _outflows(g: _ActivationGraph, nodes: np.ndarray, ad: np.ndarray, reach: float) -> tuple[np.ndarray, np.ndarray]:
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


def _seed_ids(ctx: Context, origins: list[str]) -> list[int]:
    """The origins' concept ids, first-seen order, unknown names dropped."""
    seeds: list[int] = []
    for name in origins:
        c = ctx.find_concept(name)
        if c is not None and c not in seeds:
            seeds.append(c)
    return seeds


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


def _score_band(
    g: _ActivationGraph, st: _Bands, band: np.ndarray, a_band: np.ndarray, ad: np.ndarray, limit: int
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
    sc = prod[mine]
    keep = sc > 0
    st.cand_e.append(g.edge[idx][mine][keep])
    st.cand_s.append(sc[keep])
    st.cand_p.append(nodes[mine][keep])
    merged = np.concatenate((st.top, st.cand_s[-1]))
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


def _scoring_done(ctx: Context, g: _ActivationGraph, st: _Bands, decay: float, limit: int) -> bool:
    """Whether no later producer can reach the limit-th strength scored so far.

    Later activations are at most the frontier's max; unscored edges have no settled end."""
    if len(st.top) < limit:
        return False
    kth = st.kth
    heavy, round_of = g.heavy, st.round_of
    while st.heavy_at < len(heavy):
        e = int(heavy[st.heavy_at])
        if round_of[ctx.e_s[e]] < 0 and round_of[ctx.e_o[e]] < 0:
            break
        st.heavy_at += 1
    top_abs = float(g.heavy_abs[st.heavy_at]) if st.heavy_at < len(heavy) else 0.0
    # a waiting node ends at most at max(its value, what others can still send it); a node
    # not reached yet at most at the latter
    fv = st.best[st.frontier]
    later = float(fv.max()) * decay * BAND_SLACK
    bound = max(float(((np.maximum(fv, later) * decay) * g.maxabs[st.frontier]).max()), (later * decay) * top_abs)
    return bound < kth


def _reach_rest(g: _ActivationGraph, st: _Bands, decay: float, reach: float) -> None:
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


def _scored_total(g: _ActivationGraph, settled: np.ndarray, best: np.ndarray, decay: float) -> int:
    """Live non-zero edges with a settled endpoint whose score is not zero."""
    if (FLOW_FLOOR * decay) * g.min_abs > 0:
        return _touching(g, settled)
    # scores may underflow to zero: count them one by one
    s_in, o_in = settled[g.use_s], settled[g.use_o]
    hit = s_in | o_in
    es, eo = g.use_s[hit], g.use_o[hit]
    a_hi = np.maximum(np.where(s_in[hit], best[es], -1.0), np.where(o_in[hit], best[eo], -1.0))
    return int(np.count_nonzero((a_hi * decay) * g.use_abs[hit] > 0))


def _touching(g: _ActivationGraph, settled: np.ndarray) -> int:
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
    g: _ActivationGraph, st: _Bands, seeds: list[int], decay: float, limit: int
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


def _activate_banded(ctx: Context, origins: list[str], decay: float, limit: int, total: bool = True) -> Activation:
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
    count of live non-zero edges with a settled endpoint.
    """
    g = _activation_graph(ctx)
    seeds = _seed_ids(ctx, origins)
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


# ----- passage search ------------------------------------------------------------


@attrs.frozen
class Skip:
    """Why a lane did not run: a stable token and the plan's text."""

    token: str
    text: str


ZERO_LIMIT = Skip("zero_limit", "the requested limit is 0")
NO_QUERY_TERMS = Skip("no_query_terms", "the query yields no searchable terms")


@attrs.frozen
class PassageHit:
    """One BM25 hit: the paragraph, its f32 score and its rank in the lane."""

    source: str
    paragraph: int
    score: float
    text: str
    rank: int

    def to_wire(self) -> dict[str, Any]:
        s = self.score
        return {
            "source": self.source,
            "paragraph": self.paragraph,
            "score": s,
            "text": self.text,
            "lanes": {"bm25": {"rank": self.rank, "score": s}},
        }


@attrs.frozen
class PassageSearch:
    """The passage lanes over one context: BM25 hits, or why BM25 did not run; the filter's counts."""

    hits: tuple[PassageHit, ...]
    skipped: Skip | None = None
    eligible_sources: int | None = None
    total_sources: int | None = None


def passage_search(
    ctx: Context,
    query: str,
    limit: int,
    tags: list[str] | None = None,
    since: int | None = None,
    until: int | None = None,
) -> PassageSearch:
    """BM25 over paragraphs, optionally restricted to sources by tag and date."""
    filtered = tags is not None or since is not None or until is not None
    allowed = None
    eligible = total = None
    if filtered:
        allowed, eligible = eligible_sources(ctx, tags or [], since, until)
        total = len(ctx.passages)
    if limit == 0:
        return PassageSearch((), ZERO_LIMIT, eligible, total)
    q_terms = query_terms(query)
    if not q_terms:
        return PassageSearch((), NO_QUERY_TERMS, eligible, total)
    doc_source, doc_par = ctx.bm25.doc_source, ctx.bm25.doc_par
    sources, passages = ctx.sources, ctx.passages
    make = float.__new__
    hits = []
    for rank, (doc, score) in enumerate(top_documents(ctx, q_terms, limit, allowed), start=1):
        sid = doc_source[doc]
        par = doc_par[doc]
        s = make(F32, score)  # already an f32 value: F32() would round it to itself
        hits.append(PassageHit(sources[sid], par, s, passages[sid].paragraphs[par], rank))
    return PassageSearch(tuple(hits), None, eligible, total)


def search_passages(
    ctx: Context,
    query: str,
    limit: int,
    tags: list[str] | None = None,
    since: int | None = None,
    until: int | None = None,
    vector: VectorQuery | None = None,
) -> dict[str, Any]:
    """The search wire result: BM25, and the vector lane fused in by rank when it runs (`store/vector_lane.py`)."""
    found, state, hits = searched(ctx, query, limit, tags, since, until, vector)
    entry: dict[str, Any] = {"context": ctx.name, "lanes": search_lanes(found, state)}
    if found.eligible_sources is not None:
        entry["filter"] = {"eligible_sources": found.eligible_sources, "total_sources": found.total_sources}
    return {"plan": {"contexts": [entry]}, "hits": [hit.to_wire() for hit in hits]}


def searched(
    ctx: Context,
    query: str,
    limit: int,
    tags: list[str] | None = None,
    since: int | None = None,
    until: int | None = None,
    vector: VectorQuery | None = None,
) -> tuple[PassageSearch, LaneState | None, list[PassageHit | FusedHit]]:
    """The passage lanes: BM25's search, the vector lane's state (None when both lanes were skipped), the hits."""
    vq = vector or VectorQuery()
    state = None if limit == 0 or not query_terms(query) else classify(ctx, vq)
    pool = max(4 * limit, 50)
    found = passage_search(ctx, query, pool if state is not None and state.ran else limit, tags, since, until)
    if state is None or not state.ran:
        return found, state, list[PassageHit | FusedHit](found.hits)
    store = ctx.vectors.passages
    assert store is not None and vq.vector is not None and state.floor is not None
    allowed = None
    if tags is not None or since is not None or until is not None:
        mask, _n = eligible_sources(ctx, tags or [], since, until)
        allowed = {ctx.sources[sid] for sid in np.nonzero(mask)[0].tolist() if sid < len(ctx.sources)}
    rows = sweep(store, vq.vector, pool, state.floor, allowed)
    bm25 = [(h.source, h.paragraph, h.score) for h in found.hits]
    return found, state, list[PassageHit | FusedHit](fuse(ctx, bm25, rows, True, limit))


def search_lanes(found: PassageSearch, state: LaneState | None = None) -> dict[str, Any]:
    """The wire `lanes` block of a passage search: BM25 ran or why not; the vector lane's state."""
    if found.skipped is not None:
        reason = found.skipped.text
        return {"bm25": {"ran": False, "reason": reason}, "vector": {"ran": False, "reason": reason}}
    vector = state.to_wire() if state is not None else {"ran": False, "reason": NO_EMBEDDINGS}
    return {"bm25": {"ran": True}, "vector": vector}


def top_documents(ctx: Context, q_terms: list[str], limit: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
    """The best `limit` paragraphs by score desc, source name asc, paragraph asc."""
    if limit <= 0:
        return []
    return ctx.bm25.top(q_terms, limit, allowed, ctx.source_rank())


def passes_filter(passage: Passage, wanted: set[str], since: int | None, until: int | None) -> bool:
    """Whether a source is eligible: any of the wanted tags (none wanted: any), its date in [since, until)."""
    if wanted and not wanted.intersection(passage.tags):
        return False
    when = passage.date if passage.date is not None else passage.stored_at
    if since is not None and (when is None or when < since):
        return False
    return until is None or (when is not None and when < until)


def eligible_sources(ctx: Context, tags: list[str], since: int | None, until: int | None) -> tuple[np.ndarray, int]:
    """The source-id mask the filter admits, and how many sources with passages it admits."""
    wanted = set(tags)
    allowed = np.zeros(max(len(ctx.sources), 1), dtype=bool)
    eligible = 0
    for sid, passage in ctx.passages.items():
        if passes_filter(passage, wanted, since, until):
            allowed[sid] = True
            eligible += 1
    return allowed, eligible


# ----- citations -----------------------------------------------------------------


@attrs.frozen
class Locator:
    """Where a paragraph sits in its original (e.g. a page), as given at import."""

    kind: str
    value: str


@attrs.frozen
class Citation:
    """A paragraph's text with its source, section and locator."""

    text: str
    source: str
    section: str | None
    locator: Locator | None

    def to_wire(self) -> dict[str, Any]:
        loc = self.locator
        return {
            "text": self.text,
            "source": self.source,
            "section": self.section,
            "locator": None if loc is None else {"kind": loc.kind, "value": loc.value},
        }


def find_citation(ctx: Context, source: str, paragraph: int) -> Citation | str:
    """The paragraph's citation, or why there is none: 'no_source' / 'no_paragraph'."""
    sid = ctx.find_source(source)
    passage = ctx.passages.get(sid) if sid is not None else None
    if passage is None:
        return "no_source"
    if paragraph >= len(passage.paragraphs):
        return "no_paragraph"
    loc = passage.locators.get(paragraph)
    return Citation(
        passage.paragraphs[paragraph],
        source,
        passage.section_for(paragraph),
        None if not loc else Locator(loc[0], loc[1]),
    )


def citation(ctx: Context, source: str, paragraph: int) -> dict[str, Any] | str:
    """The citation's wire shape, or 'no_source' / 'no_paragraph'."""
    found = find_citation(ctx, source, paragraph)
    return found if isinstance(found, str) else found.to_wire()
