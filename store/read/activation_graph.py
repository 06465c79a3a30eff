"""The activation graph: per graph version, each concept's live, non-zero edges in |sum| order.

Once a schema is installed the `schema:type` edges are left out (`schema_check.hidden_label`): they
neither score, nor count toward a fan total, nor carry flow. The graph is kept per graph version and
hidden label, so an install (which moves no graph revision) builds a new one.
"""

from __future__ import annotations

import numpy as np

from taguru_server.store.model.context import Context
from taguru_server.store.model.schema_check import hidden_label


def current_graph(ctx: Context) -> ActivationGraph | None:
    """The activation graph of every live edge if it is built for the current graph version (never builds it).

    A graph leaving the `schema:type` edges out is not returned: the glosses read every edge."""
    return cached_graph(ctx, None)


def cached_graph(ctx: Context, hidden: int | None) -> ActivationGraph | None:
    """The cached activation graph for the current graph version, concept count and hidden label, or None."""
    cached = ctx.read_cache.get("activation")
    if cached is not None and cached[0] == ctx.graph_version and cached[1] == len(ctx.concepts) and cached[2] == hidden:
        graph: ActivationGraph = cached[3]
        return graph
    return None


ARRAYS = (
    "ptr",
    "other",
    "abs",
    "edge",
    "total",
    "total_nz",
    "maxabs",
    "key",
    "levels",
    "use_s",
    "use_o",
    "use_abs",
    "heavy",
    "heavy_abs",
)
"""The graph's array fields, in the order an image of it stores them (the scalars travel beside them)."""


class ActivationGraph:
    """Per graph version: each concept's live, non-zero edges, its total, and search keys.

    A concept's entries are kept in |sum| descending order (propagation and scoring do not
    depend on the visit order); only its total is summed in visit order, as the reference does.
    """

    __slots__ = (*ARRAYS, "n_levels", "min_abs")

    def __init__(
        self,
        ctx: Context,
        window_counts: np.ndarray | None = None,
        window_sums: np.ndarray | None = None,
        hidden: int | None = None,
    ) -> None:
        """The graph of the context's edges; `window_counts` and `window_sums` (a window's, by edge
        id) replace the edges' own counts and sums when given; edges labelled `hidden` are left out."""
        n = len(ctx.concepts)
        m = len(ctx.edges.subject)
        e_s = np.array(ctx.edges.subject, dtype=np.int64) if m else np.zeros(0, np.int64)
        e_o = np.array(ctx.edges.object, dtype=np.int64) if m else np.zeros(0, np.int64)
        if window_counts is not None and window_sums is not None:
            cnt, absum = window_counts, np.abs(window_sums)
        else:
            cnt = np.array(ctx.edges.count, dtype=np.int64) if m else np.zeros(0, np.int64)
            absum = np.abs(np.array(ctx.edges.weight, dtype=np.float64)) if m else np.zeros(0)
        use = (cnt > 0) & (absum > 0)  # dead or zero-sum edges neither score nor carry flow
        if hidden is not None:
            use &= np.array(ctx.edges.label, dtype=np.int64) != hidden
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


def graph_arrays(graph: ActivationGraph) -> dict[str, np.ndarray]:
    """The graph's arrays by field name (what `graph_of_arrays` takes back)."""
    return {name: getattr(graph, name) for name in ARRAYS}


def graph_of_arrays(arrays: dict[str, np.ndarray], n_levels: int, min_abs: float) -> ActivationGraph:
    """A graph whose fields are the given arrays as they are (e.g. read-only views of a mapped file)."""
    graph = ActivationGraph.__new__(ActivationGraph)
    for name in ARRAYS:
        setattr(graph, name, arrays[name])
    graph.n_levels = n_levels
    graph.min_abs = min_abs
    return graph


def keep_graph(ctx: Context, hidden: int | None, graph: ActivationGraph) -> None:
    """Cache `graph` as the context's activation graph for its current graph version and hidden label."""
    ctx.read_cache["activation"] = (ctx.graph_version, len(ctx.concepts), hidden, graph)


def activation_graph(ctx: Context) -> ActivationGraph:
    """The activation walk's graph for the current graph version and hidden label (built on first use)."""
    hidden = hidden_label(ctx)
    graph = cached_graph(ctx, hidden)
    if graph is not None:
        return graph
    graph = ActivationGraph(ctx, hidden=hidden)
    keep_graph(ctx, hidden, graph)
    return graph
