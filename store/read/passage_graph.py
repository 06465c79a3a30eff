"""The graph-ranked passage lane: personalized PageRank over the concept–paragraph graph.

Nodes are the context's concepts and its attributed paragraphs. Every live association links its
subject and object (weight 1), and links both to every stored paragraph an attribution of it names.
A concept's link to a paragraph weighs the share of the paragraph's associations that name it: a
paragraph stating one fact about a concept is tied to it fully, a listing that names it among five
others a fifth as much (so pages that only repeat many names do not soak up the walk). The walk
restarts at the anchors (equal mass each) with probability `DAMPING` and otherwise moves to a
neighbour in proportion to the link weights.

The lane's order is the walk's and the question's together: the paragraphs of greatest mass (the
reach, `reach_size`) are ordered by mass × (1 + `BOOST` × the share of the asked terms' idf the
paragraph holds, in its text or in the labels of the facts it states). The asked terms are the
query's less the terms of the origins' and anchors' names: the walk already stands for the names,
the rest of the question says what it asks about them. A question whose words no paragraph of the
reach holds (another language, a paraphrase) keeps the mass order.

The mass is computed by forward push (Andersen, Chung and Lang), every node over the tolerance pushed
at once in each round and only the nodes a round touched looked at in the next, so the cost is bounded
by the tolerance (the nodes pushed have at most 1 / (DAMPING · TOLERANCE) weighted degree in all) and
by `MAX_ROUNDS`, whatever the graph's size; the estimate is the pushed mass plus the restart share of
the residual left. The order of every sum is fixed, so the result is the same on every run. The
sparse arrays are built once per read version.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from taguru_server.store.model.context import Context
from taguru_server.store.model.csr import owners
from taguru_server.store.model.schema_check import hidden_label
from taguru_server.store.read.cache import read_version
from taguru_server.store.text import query_terms, terms

DAMPING = 0.5  # the restart probability of the walk (HippoRAG's 0.5)
TOLERANCE = 1e-4  # a node is pushed while its residual exceeds TOLERANCE × its weighted degree
MAX_ROUNDS = 64  # a hard ceiling on push rounds, whatever the tolerance leaves
CACHE_NAME = "passage_graph"
BOOST = 20.0  # a paragraph holding every asked term weighs 21 times its mass (docs/evidence.md)
REACH_FLOOR, REACH_CEILING = 50, 400
TERM_CACHE_ENTRIES = 20_000  # paragraphs whose term sets are kept per read version


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

    __slots__ = (
        "n_concepts",
        "ptr",
        "nbr",
        "wt",
        "degree",
        "par_source",
        "par_index",
        "order",
        "terms",
        "stated_ptr",
        "stated",
        "threshold",
    )

    def __init__(self, ctx: Context) -> None:
        n = len(ctx.concepts)
        edges = ctx.edges
        hidden = hidden_label(ctx)
        passages = ctx.passages
        # every live association (its hidden label aside) links its subject and object; each paragraph its
        # live records cite is a node linked to their concepts (built with arrays, in the order of the loop
        # over edges and records that defines it: node numbers by first citation, links in edge order)
        subject = np.asarray(edges.subject, dtype=np.int64)
        obj = np.asarray(edges.object, dtype=np.int64)
        live = np.asarray(edges.count, dtype=np.int64) > 0
        if hidden is not None:
            live &= np.asarray(edges.label, dtype=np.int64) != hidden
        linked = live & (subject != obj)
        ptr, rsid, _rsum, rcount, rpar = edges.attributions.packed()
        rec_edge = owners(ptr)
        n_pars = np.zeros(max(len(ctx.sources), 1), dtype=np.int64)
        for sid, passage in passages.items():
            n_pars[sid] = len(passage.paragraphs)
        sid64 = rsid.astype(np.int64)
        cited = live[rec_edge] & (rcount > 0) & (rpar >= 0) & (rpar < n_pars[sid64])
        c_edge, c_sid, c_par = rec_edge[cited], sid64[cited], rpar[cited].astype(np.int64)
        span = int(c_par.max()) + 1 if len(c_par) else 1
        uniq, first, inverse = np.unique(c_sid * span + c_par, return_index=True, return_inverse=True)
        by_first = np.argsort(first, kind="stable")
        node_of = np.empty(len(uniq), dtype=np.int64)
        node_of[by_first] = np.arange(len(uniq), dtype=np.int64)
        node = node_of[inverse.reshape(-1)]
        grouped = np.argsort(node, kind="stable")
        s_node, s_edge = node[grouped], c_edge[grouped]
        fresh = np.ones(len(s_edge), dtype=bool)  # an edge once per paragraph
        fresh[1:] = (s_node[1:] != s_node[:-1]) | (s_edge[1:] != s_edge[:-1])
        s_node, s_edge = s_node[fresh], s_edge[fresh]
        n_nodes = len(uniq)
        said = np.bincount(s_node, minlength=n_nodes)
        share = 1.0 / np.maximum(said, 1)  # a concept's link to a paragraph: the share of its facts naming it
        es, eo = subject[s_edge], obj[s_edge]
        twice = (es != eo).astype(np.int64)
        entry = np.repeat(np.arange(len(s_edge), dtype=np.int64), 1 + twice)
        second = np.zeros(len(entry), dtype=bool)
        second[1:] = entry[1:] == entry[:-1]
        a = np.concatenate([subject[linked], np.where(second, eo[entry], es[entry])])
        b = np.concatenate([obj[linked], n + s_node[entry]])
        w = np.concatenate([np.ones(int(linked.sum()), dtype=np.float64), share[s_node[entry]]])
        keys_sid = (uniq[by_first] // span).tolist()
        keys_par = (uniq[by_first] % span).tolist()
        total = n + n_nodes
        src = np.concatenate([a, b])
        dst = np.concatenate([b, a])
        weights = np.concatenate([w, w])
        order = np.argsort(src, kind="stable")
        self.n_concepts = n
        self.nbr = dst[order]
        self.wt = weights[order]
        counts = np.bincount(src, minlength=total) if len(src) else np.zeros(total, np.int64)
        self.ptr = np.zeros(total + 1, dtype=np.int64)
        np.cumsum(counts, out=self.ptr[1:])
        self.degree = np.bincount(src, weights=weights, minlength=total) if len(src) else np.zeros(total)
        self.threshold = TOLERANCE * np.maximum(self.degree, 1.0)
        self.par_source = np.array(keys_sid, dtype=np.int64)
        self.par_index = np.array(keys_par, dtype=np.int64)
        # the deterministic tie order of equal masses: source name, then paragraph (code points)
        names = ctx.sources
        ranked = sorted(range(n_nodes), key=lambda i: (names[keys_sid[i]], keys_par[i]))
        self.order = np.empty(n_nodes, dtype=np.int64)
        self.order[np.array(ranked, dtype=np.int64)] = np.arange(n_nodes, dtype=np.int64)
        self.terms: dict[int, frozenset[str]] = {}
        self.stated_ptr = np.zeros(n_nodes + 1, dtype=np.int64)
        np.cumsum(said, out=self.stated_ptr[1:])
        self.stated = s_edge

    def mass(self, seeds: list[int]) -> np.ndarray:
        """The PageRank mass of every node for a walk restarting at `seeds` (equal shares): the pushed
        estimate plus the restart share of the residual left below the tolerance."""
        total = len(self.degree)
        p = np.zeros(total, dtype=np.float64)
        r = np.zeros(total, dtype=np.float64)
        for s in seeds:
            r[s] += 1.0 / len(seeds)
        frontier = np.unique(np.array(seeds, dtype=np.int64))
        ptr, nbr, wt, degree, threshold = self.ptr, self.nbr, self.wt, self.degree, self.threshold
        for _ in range(MAX_ROUNDS):
            active = frontier[r[frontier] > threshold[frontier]]
            if not len(active):
                break
            pushed = r[active]
            r[active] = 0.0
            p[active] += DAMPING * pushed
            linked = degree[active] > 0
            active, pushed = active[linked], pushed[linked]
            if not len(active):
                break
            share = (1.0 - DAMPING) * pushed / degree[active]
            starts = ptr[active]
            lengths = ptr[active + 1] - starts
            offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
            frontier, where = np.unique(nbr[offsets], return_inverse=True)
            r[frontier] += np.bincount(where, weights=np.repeat(share, lengths) * wt[offsets], minlength=len(frontier))
        return p + DAMPING * r

    def ranked(
        self, ctx: Context, anchors: tuple[str, ...], asked: list[str], limit: int
    ) -> tuple[GraphPassageHit, ...]:
        """The lane's `limit` paragraphs: the reach of the walk (greatest mass first, ties by source name,
        then paragraph), reordered by what the question asks of it (`asked`: query terms)."""
        seeds = [cid for cid in (ctx.concept_id.get(name) for name in anchors) if cid is not None]
        if not seeds or limit <= 0 or not len(self.par_source):
            return ()
        mass = self.mass(seeds)[self.n_concepts :]
        reach = self.top(mass, reach_size(limit))
        if not reach:
            return ()
        hits = []
        for rank, i in enumerate(self.asked_order(ctx, reach, mass, asked)[:limit], start=1):
            sid, par = int(self.par_source[i]), int(self.par_index[i])
            text = ctx.passages[sid].paragraphs[par]
            hits.append(GraphPassageHit(ctx.sources[sid], par, float(mass[i]), text, rank))
        return tuple(hits)

    def top(self, mass: np.ndarray, k: int) -> list[int]:
        """The `k` paragraph nodes of greatest positive mass, ties by source name then paragraph: found
        by partition (every node tied with the k-th is kept), then sorted."""
        found = np.flatnonzero(mass > 0)
        if len(found) > k:
            kth = np.partition(mass[found], len(found) - k)[len(found) - k]
            found = found[mass[found] >= kth]
        ordered = found[np.lexsort((self.order[found], -mass[found]))][:k]
        return [int(i) for i in ordered.tolist()]

    def asked_order(self, ctx: Context, reach: list[int], mass: np.ndarray, asked: list[str]) -> list[int]:
        """The reach reordered by mass × (1 + BOOST × the share of the asked terms' idf the paragraph holds);
        ties keep the mass order. A paragraph far from the anchors must hold much of the question to pass a
        near one that holds none of it."""
        weights = term_weights(ctx, asked)
        whole = sum(weights.values())
        if not whole:
            return reach
        scored = []
        for pos, i in enumerate(reach):
            held = self.terms_of(ctx, i)
            share = sum(w for t, w in weights.items() if t in held) / whole  # summed in query order
            scored.append((-float(mass[i]) * (1.0 + BOOST * share), pos))
        return [reach[pos] for _s, pos in sorted(scored)]

    def terms_of(self, ctx: Context, i: int) -> frozenset[str]:
        """The distinct terms of paragraph node `i`: its text's and the labels' of the associations it
        states (a paraphrase still states its fact under the label); kept for the read version, a bounded
        number of them."""
        found = self.terms.get(i)
        if found is None:
            if len(self.terms) >= TERM_CACHE_ENTRIES:
                self.terms.clear()
            sid, par = int(self.par_source[i]), int(self.par_index[i])
            words = set(terms(ctx.passages[sid].paragraphs[par]))
            labels = {ctx.edges.label[e] for e in self.stated[self.stated_ptr[i] : self.stated_ptr[i + 1]].tolist()}
            for lab in sorted(labels):
                words.update(terms(ctx.labels[lab]))
            found = self.terms[i] = frozenset(words)
        return found


def reach_size(limit: int) -> int:
    """How many paragraphs of greatest mass the question may reorder: four times the lane's limit, 50 to 400."""
    return min(max(4 * limit, REACH_FLOOR), REACH_CEILING)


def term_weights(ctx: Context, asked: list[str]) -> dict[str, float]:
    """Each asked term's BM25 idf over the context's live paragraphs (terms no paragraph holds are left out)."""
    index = ctx.bm25
    index.seal()  # the document frequencies count every stored paragraph
    n = max(index.n_live, 1)
    out: dict[str, float] = {}
    for t in asked:
        tid = index.term_id.get(t)
        df = int(index.df[tid]) if tid is not None and tid < len(index.df) else 0
        if df > 0:
            out[t] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    return out


def asked_terms(query: str, names: tuple[str, ...]) -> list[str]:
    """The query's terms less those of the names (origins, anchors): what the question asks about them."""
    known: set[str] = set()
    for name in names:
        known.update(terms(name))
    return [t for t in query_terms(query) if t not in known]


def passage_graph_built(ctx: Context) -> bool:
    """Whether the context's concept–paragraph graph for its current read version is built already."""
    hit = ctx.read_cache.get(CACHE_NAME)
    return hit is not None and hit[0] == read_version(ctx)


def passage_graph(ctx: Context) -> PassageGraph:
    """The context's concept–paragraph graph for its current read version (built on first use)."""
    version = read_version(ctx)
    hit = ctx.read_cache.get(CACHE_NAME)
    if hit is None or hit[0] != version:
        hit = (version, PassageGraph(ctx))
        ctx.read_cache[CACHE_NAME] = hit
    graph: PassageGraph = hit[1]
    return graph


def graph_passages(
    ctx: Context, anchors: tuple[str, ...], limit: int, query: str = "", origins: tuple[str, ...] = ()
) -> tuple[GraphPassageHit, ...]:
    """The paragraphs the walk from `anchors` reaches, at most `limit`, in the lane's order: greatest mass
    first, reordered by what `query` asks beyond the names of the origins and anchors."""
    return passage_graph(ctx).ranked(ctx, anchors, asked_terms(query, (*origins, *anchors)), limit)
