"""The activation graph of a loaded context as a mapped file beside its edge image.

Building the activation graph (every live edge in visit order, its concept totals summed in
that order, the entries sorted by |sum| level) is the largest part of a warm-up after the
edge image was taken. The graph is a function of the edge table, the concept count and the
label the installed schema hides, so it is kept under the edge image's identity
(`Context.image_state`: the store, the context, its last change-log position) in
`ctx-{id}.activation` (`store.index.index_file`: checksummed, written atomically, mapped
read-only). A warm-up whose context is still as its edge image left it — same identity, no
graph change since, same concept and edge counts and hidden label — takes the graph's
arrays from the file as they are (no copy: every process mapping the file shares its pages);
any other file is ignored and rewritten from the graph the warm-up built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from taguru_server.store.index.index_file import IndexFileRejected, read_arrays, write_arrays
from taguru_server.store.model.context import Context
from taguru_server.store.model.schema_check import hidden_label
from taguru_server.store.read.activation_graph import (
    ARRAYS,
    ActivationGraph,
    activation_graph,
    cached_graph,
    graph_arrays,
    graph_of_arrays,
    keep_graph,
)

KIND = "activation"
FORMAT = 1


def activation_image_path(index_dir: Path, cid: int) -> Path:
    return index_dir / f"ctx-{cid}.{KIND}"


def _expected(ctx: Context, identity: dict[str, Any], hidden: int | None) -> dict[str, Any]:
    return {
        "kind": KIND,
        "format": FORMAT,
        "identity": identity,
        "sizes": {"concepts": len(ctx.concepts), "edges": len(ctx.edges)},
        "hidden": hidden,
    }


def _unchanged(ctx: Context) -> tuple[Path, dict[str, Any]] | None:
    """The edge image's directory and identity while the context is as that image left it, else None."""
    state = ctx.image_state
    if state is None or state[2] != ctx.graph_version:
        return None
    return state[0], state[1]


def warm_activation(ctx: Context) -> ActivationGraph:
    """The context's activation graph for the warm-up: from its file where that holds, else built (and the
    file written when the context is as its edge image left it). `ctx.activation_restored` says which."""
    hidden = hidden_label(ctx)
    cached = cached_graph(ctx, hidden)
    if cached is not None:
        return cached
    at = _unchanged(ctx)
    got = "no edge image" if at is None else _restore(ctx, at[0], at[1], hidden)
    if isinstance(got, ActivationGraph):
        ctx.activation_restored = ("image", None)
        keep_graph(ctx, hidden, got)
        return got
    graph = ActivationGraph(ctx, hidden=hidden)
    keep_graph(ctx, hidden, graph)
    ctx.activation_restored = ("built", got)
    if at is not None:
        try:
            _write(ctx, at[0], at[1], hidden, graph)
        except (OSError, ValueError) as exc:
            ctx.activation_restored = ("built", f"{got}; not saved ({type(exc).__name__})")
    return graph


def save_activation_image(ctx: Context) -> bool:
    """Write the file for the context's current activation graph (built if need be) under its edge image's
    identity; False when the context is not as an edge image left it (nothing to key the file on)."""
    at = _unchanged(ctx)
    if at is None:
        return False
    _write(ctx, at[0], at[1], hidden_label(ctx), activation_graph(ctx))
    return True


def _restore(ctx: Context, index_dir: Path, identity: dict[str, Any], hidden: int | None) -> ActivationGraph | str:
    """The graph from the file, or why not."""
    try:
        header, arrays = read_arrays(activation_image_path(index_dir, ctx.cid))
    except IndexFileRejected as exc:
        return str(exc)
    scalars = header.pop("scalars", None)
    if header.get("kind") != KIND or header.get("format") != FORMAT:
        return "another format"
    if header.get("identity") != identity:
        return "stale"
    if header != _expected(ctx, identity, hidden):
        return "sizes differ from the context"
    if set(arrays) != set(ARRAYS) or not isinstance(scalars, dict):
        return "damaged (fields)"
    if not _consistent(arrays, scalars, len(ctx.concepts), len(ctx.edges)):
        return "damaged (array lengths)"
    try:
        return graph_of_arrays(arrays, int(scalars["n_levels"]), float(scalars["min_abs"]))
    except (KeyError, TypeError, ValueError) as exc:
        return f"damaged ({type(exc).__name__})"


def _consistent(arrays: dict[str, np.ndarray], scalars: dict[str, Any], n: int, m: int) -> bool:
    """The arrays' lengths agree with each other, the concept count `n` and the edge count `m`."""
    entries = len(arrays["edge"])
    used = len(arrays["use_s"])
    return (
        len(arrays["ptr"]) == n + 1
        and int(arrays["ptr"][-1]) == entries
        and len(arrays["other"]) == len(arrays["abs"]) == len(arrays["key"]) == entries
        and len(arrays["total"]) == len(arrays["total_nz"]) == len(arrays["maxabs"]) == n
        and used == len(arrays["use_o"]) == len(arrays["use_abs"]) == len(arrays["heavy"]) == len(arrays["heavy_abs"])
        and used <= m
        and len(arrays["levels"]) == scalars.get("n_levels")
        and (entries == 0 or int(arrays["edge"].max()) < m)
    )


def _write(ctx: Context, index_dir: Path, identity: dict[str, Any], hidden: int | None, graph: ActivationGraph) -> int:
    header = _expected(ctx, identity, hidden) | {"scalars": {"n_levels": graph.n_levels, "min_abs": graph.min_abs}}
    arrays = {name: np.asarray(value) for name, value in graph_arrays(graph).items()}
    return write_arrays(activation_image_path(index_dir, ctx.cid), header, arrays)
