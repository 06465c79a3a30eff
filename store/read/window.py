"""Time windows on the graph reads: the eligible sources of `[since, until)` and each edge's windowed view.

A window selects facts by assertion time. A source's effective time is `date ?? stored_at` of its
stored passage (the passage lanes' own eligibility, `passages.eligible_sources`); a source without a
passage, and unsourced weight, is invisible to every window. Inside a window an edge counts only its
eligible attribution records: its windowed count and sum are theirs alone (the sum saturates at
±f64::MAX as the global sum does), its weight their mean, and it is alive while that count is
above 0 (a dead edge never is). Recall and query keep their alive candidates; explore walks and
activate spreads over the windowed graph (`windowed_walk_graph`, `WindowView.activation_graph`).

A view is kept per read version and window (`versioned_cache`), so it is rebuilt whenever an edge,
an attribution or a passage changes: re-storing a passage can move a source in or out of a window.
Unwindowed reads never touch it.
"""

from __future__ import annotations

import copy
import heapq
from typing import Any

import attrs
import numpy as np

from taguru_server.store.model.context import Context, _saturate
from taguru_server.store.model.csr import owners
from taguru_server.store.model.schema_check import hidden_label
from taguru_server.store.read.activation_graph import ActivationGraph
from taguru_server.store.read.cache import versioned_cache
from taguru_server.store.read.passages import SourceFilter, eligible_sources
from taguru_server.store.read.walks import WalkGraph, walk_graph

WINDOW_VIEWS = 8  # windows kept per read version


@attrs.frozen
class Window:
    """The half-open assertion-time window `[since, until)`; either bound may be None (unbounded)."""

    since: int | None
    until: int | None


def window_of(since: int | None, until: int | None) -> Window | None:
    """The window the two bounds ask for, or None when neither is given (an unwindowed read)."""
    if since is None and until is None:
        return None
    return Window(since, until)


def attribution_columns(ctx: Context) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every live attribution record as columns (edge id, source id, sum, count), in edge-id then
    first-assertion order; kept per graph version (every edge or attribution change bumps it)."""
    key = (ctx.graph_version, len(ctx.edges.subject), len(ctx.sources))
    cached = ctx.read_cache.get("attribution_columns")
    if cached is not None and cached[0] == key:
        found: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = cached[1]
    else:
        ptr, sid, rsum, rcount, _paragraph = ctx.edges.attributions.packed()
        found = (
            owners(ptr),
            sid.astype(np.int64),
            rsum.astype(np.float64),
            rcount.astype(np.float64),
        )
        ctx.read_cache["attribution_columns"] = (key, found)
    return found


class WindowView:
    """One window over one read version: the eligible source ids and every edge's windowed totals.

    Per-edge totals are computed on demand (recall and query read only their candidates); the
    whole-graph arrays and the windowed activation graph are built once, when a walk needs them."""

    __slots__ = ("ctx", "window", "mask", "ok", "_totals", "_arrays", "_activation", "_walks")

    def __init__(self, ctx: Context, window: Window) -> None:
        self.ctx = ctx
        self.window = window
        self.mask, _eligible = eligible_sources(ctx, SourceFilter(since=window.since, until=window.until))
        self.ok: list[bool] = self.mask.tolist()
        self._totals: dict[int, tuple[int, float]] = {}
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None
        self._activation: ActivationGraph | None = None
        self._walks: WalkGraph | None = None

    def records(self, e: int) -> list[list[Any]]:
        """Edge `e`'s eligible attribution records, in their first-assertion order."""
        ok = self.ok
        return [rec for rec in self.ctx.edges.attributions[e] if ok[rec[0]]]

    def totals(self, e: int) -> tuple[int, float]:
        """Edge `e`'s windowed (count, sum): its eligible records' counts and saturating sum."""
        found = self._totals.get(e)
        if found is None:
            count, s = 0, 0.0
            ok = self.ok
            for sid, rsum, rcount, _paragraph in self.ctx.edges.attributions[e]:
                if ok[sid]:
                    count += rcount
                    s = _saturate(s + rsum)
            found = self._totals[e] = (count, s)
        return found

    def alive(self, e: int) -> bool:
        """Whether edge `e` is alive in the window (windowed count above 0)."""
        return self.totals(e)[0] > 0

    def weight(self, e: int) -> float:
        """Edge `e`'s in-window mean weight (0.0 when it is not alive in the window)."""
        count, s = self.totals(e)
        return s / count if count else 0.0

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge's windowed count (int64) and sum (float64), by edge id.

        The sums add each edge's eligible records in their order, as `totals` does; an edge whose
        plain sum overflowed (not finite) is summed again with saturation."""
        if self._arrays is None:
            m = len(self.ctx.edges.subject)
            rec_edge, rec_src, rec_sum, rec_cnt = attribution_columns(self.ctx)
            keep = self.mask[rec_src] if len(rec_src) else np.zeros(0, dtype=bool)
            edges = rec_edge[keep]
            counts = np.bincount(edges, weights=rec_cnt[keep], minlength=m).astype(np.int64)
            sums = np.bincount(edges, weights=rec_sum[keep], minlength=m).astype(np.float64)
            with np.errstate(invalid="ignore"):
                for e in np.flatnonzero(~np.isfinite(sums)).tolist():
                    sums[e] = self.totals(e)[1]
            self._arrays = (counts[:m], sums[:m])
        return self._arrays

    def activation_graph(self) -> ActivationGraph:
        """The activation graph of the windowed edges: windowed counts and sums in place of the global ones."""
        if self._activation is None:
            counts, sums = self.arrays()
            self._activation = ActivationGraph(self.ctx, counts, sums, hidden=hidden_label(self.ctx))
        return self._activation

    def walk_graph(self) -> WalkGraph:
        """The walk graph of the edges alive in the window (`windowed_walk_graph`)."""
        if self._walks is None:
            self._walks = windowed_walk_graph(walk_graph(self.ctx), self.arrays()[0] > 0)
        return self._walks


def window_view(ctx: Context, window: Window) -> WindowView:
    """The context's view of `window` for its current read version (built on first use)."""
    memo = versioned_cache(ctx, "windows", WINDOW_VIEWS)
    view = memo.get(window)
    if view is None:
        view = memo[window] = WindowView(ctx, window)
    return view


def windowed_walk_graph(g: WalkGraph, alive: np.ndarray) -> WalkGraph:
    """The walk graph `g` with only the edges alive in a window: its adjacency keeps their entries in
    visit order, `live` is theirs, and their averaged weights are left as they are (explore does not
    rank by weight)."""
    w = copy.copy(g)
    keep = alive[g.edge]
    w.edge = g.edge[keep]
    w.other = g.other[keep]
    kept = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept[1:])
    w.ptr = kept[g.ptr]
    w.live = g.live & alive
    w.trail_adj = {}
    return w


def windowed_page(view: WindowView, edges: list[int], limit: int, after: dict[str, Any] | None) -> list[int]:
    """The page of edges alive in the window, in /query order on their windowed weights: those after the
    cursor (never the cursor's own triple, whatever weight it carries), the first `limit` of them."""
    ctx = view.ctx
    concepts, labels = ctx.concepts, ctx.labels
    e_s, e_l, e_o = ctx.edges.subject, ctx.edges.label, ctx.edges.object
    keyed = [((-abs(view.weight(e)), concepts[e_s[e]], labels[e_l[e]], concepts[e_o[e]]), e) for e in edges]
    if after is not None:
        own = (after["subject"], after["label"], after["object"])
        bound = (-abs(float(after["weight"])), *own)
        keyed = [ke for ke in keyed if ke[0] > bound and ke[0][1:] != own]
    page = heapq.nsmallest(limit, keyed) if limit < len(keyed) else sorted(keyed)
    return [e for _k, e in page]
