"""The graph-ranked passage lane: personalized PageRank over the concept–paragraph graph.

Nodes are the context's concepts and its attributed paragraphs. Every live association links its
subject and object, and links both to every paragraph an attribution of it names (a stored paragraph
only). Each link has weight 1 per association (an association attributed twice to one paragraph links
it once). The walk restarts at the anchors (equal mass each) with probability `DAMPING` and moves to
a neighbour in proportion to the link weights otherwise; the lane ranks paragraphs by their mass.

The mass is computed by forward push (Andersen, Chung and Lang), every node over the tolerance pushed
at once in each round, so the cost is bounded by the tolerance (at most 1 / (DAMPING · TOLERANCE) units
of edge work) and by `MAX_ROUNDS`, whatever the graph's size; the order of every sum is fixed, so the
result is the same on every run. The sparse arrays are built once per read version.
"""

from __future__ import annotations

import attrs
import numpy as np

from taguru_server.store.model.context import Context
from taguru_server.store.model.schema_check import hidden_label
from taguru_server.store.read.cache import read_version

DAMPING = 0.5  # the restart probability of the walk (HippoRAG's 0.5)
TOLERANCE = 1e-6  # a node is pushed while its residual exceeds TOLERANCE × its weighted degree
MAX_ROUNDS = 64  # a hard ceiling on push rounds (the residual halves at least every round)
CACHE_NAME = "passage_graph"


@attrs.frozen
class GraphPassageHit:
    """One paragraph the graph ranks: its stored text, its PageRank mass and its rank in the lane."""

    source: str
    paragraph: int
    score: float
    text: str
    rank: int


class PassageGraph:
    """The concept–paragraph graph of one read version as CSR arrays (concepts first, then paragraphs)."""

    __slots__ = ("n_concepts", "ptr", "nbr", "wt", "degree", "par_source", "par_index", "order")

    def __init__(self, ctx: Context) -> None:
        n = len(ctx.concepts)
        edges = ctx.edges
        hidden = hidden_label(ctx)
        passages = ctx.passages
        paragraph_node: dict[tuple[int, int], int] = {}
        a: list[int] = []
        b: list[int] = []
        for e in range(len(edges.subject)):
            if edges.count[e] <= 0 or (hidden is not None and edges.label[e] == hidden):
                continue
            s, o = edges.subject[e], edges.object[e]
            if s != o:
                a.append(s)
                b.append(o)
            linked: set[int] = set()
            for sid, _rsum, rcount, paragraph in edges.attributions[e]:
                if paragraph is None or rcount <= 0:
                    continue
                passage = passages.get(sid)
                if passage is None or not 0 <= paragraph < len(passage.paragraphs):
                    continue
                node = paragraph_node.setdefault((sid, paragraph), n + len(paragraph_node))
                if node in linked:
                    continue
                linked.add(node)
                a.append(s)
                b.append(node)
                if s != o:
                    a.append(o)
                    b.append(node)
        total = n + len(paragraph_node)
        src = np.array(a + b, dtype=np.int64)
        dst = np.array(b + a, dtype=np.int64)
        order = np.argsort(src, kind="stable")
        self.n_concepts = n
        self.nbr = dst[order]
        self.wt = np.ones(len(self.nbr), dtype=np.float64)
        counts = np.bincount(src, minlength=total) if len(src) else np.zeros(total, np.int64)
        self.ptr = np.zeros(total + 1, dtype=np.int64)
        np.cumsum(counts, out=self.ptr[1:])
        self.degree = counts.astype(np.float64)
        keys = list(paragraph_node)
        self.par_source = np.array([k[0] for k in keys], dtype=np.int64)
        self.par_index = np.array([k[1] for k in keys], dtype=np.int64)
        # the deterministic tie order of equal masses: source name, then paragraph (code points)
        names = ctx.sources
        ranked = sorted(range(len(keys)), key=lambda i: (names[keys[i][0]], keys[i][1]))
        self.order = np.empty(len(keys), dtype=np.int64)
        self.order[np.array(ranked, dtype=np.int64)] = np.arange(len(keys), dtype=np.int64)

    def mass(self, seeds: list[int]) -> np.ndarray:
        """The PageRank mass of every node for a walk restarting at `seeds` (equal shares)."""
        total = len(self.degree)
        p = np.zeros(total, dtype=np.float64)
        r = np.zeros(total, dtype=np.float64)
        for s in seeds:
            r[s] += 1.0 / len(seeds)
        threshold = TOLERANCE * np.maximum(self.degree, 1.0)
        ptr, nbr, degree = self.ptr, self.nbr, self.degree
        for _ in range(MAX_ROUNDS):
            active = np.flatnonzero(r > threshold)
            if not len(active):
                break
            mass = r[active]
            r[active] = 0.0
            p[active] += DAMPING * mass
            spread = active[degree[active] > 0]
            if not len(spread):
                continue
            share = (1.0 - DAMPING) * r_mass(mass, active, spread) / degree[spread]
            starts, stops = ptr[spread], ptr[spread + 1]
            lengths = stops - starts
            offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
            r += np.bincount(nbr[offsets], weights=np.repeat(share, lengths), minlength=total)
        return p

    def ranked(self, ctx: Context, anchors: tuple[str, ...], limit: int) -> tuple[GraphPassageHit, ...]:
        """The `limit` paragraphs of greatest mass (ties: source name, then paragraph), as lane hits."""
        seeds = [cid for cid in (ctx.concept_id.get(name) for name in anchors) if cid is not None]
        if not seeds or limit <= 0 or not len(self.par_source):
            return ()
        mass = self.mass(seeds)[self.n_concepts :]
        found = np.flatnonzero(mass > 0)
        if not len(found):
            return ()
        chosen = found[np.lexsort((self.order[found], -mass[found]))][:limit]
        hits = []
        for rank, i in enumerate(chosen.tolist(), start=1):
            sid, par = int(self.par_source[i]), int(self.par_index[i])
            text = ctx.passages[sid].paragraphs[par]
            hits.append(GraphPassageHit(ctx.sources[sid], par, float(mass[i]), text, rank))
        return tuple(hits)


def r_mass(mass: np.ndarray, active: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """The pushed residuals of the nodes that spread (active nodes with at least one link)."""
    if len(spread) == len(active):
        return mass
    return mass[np.isin(active, spread)]


def passage_graph(ctx: Context) -> PassageGraph:
    """The context's concept–paragraph graph for its current read version (built on first use)."""
    version = read_version(ctx)
    hit = ctx.read_cache.get(CACHE_NAME)
    if hit is None or hit[0] != version:
        hit = (version, PassageGraph(ctx))
        ctx.read_cache[CACHE_NAME] = hit
    graph: PassageGraph = hit[1]
    return graph


def graph_passages(ctx: Context, anchors: tuple[str, ...], limit: int) -> tuple[GraphPassageHit, ...]:
    """The paragraphs the walk from `anchors` reaches, greatest mass first, at most `limit`."""
    return passage_graph(ctx).ranked(ctx, anchors, limit)
