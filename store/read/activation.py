"""The activate lane: spreading activation from origins (cached per read version), also inside a time window."""

from __future__ import annotations

from taguru_server.store.model.context import Context
from taguru_server.store.read.banded import activate_banded
from taguru_server.store.read.cache import versioned_cache
from taguru_server.store.read.spread import Activation, activation_plain, seed_ids
from taguru_server.store.read.window import WindowView

# Banded activation is exact when a flow can never reach its producer's activation; with
# decay this close to 1 rounding could break that, so the plain heap walk runs instead.
BANDED_DECAY_MAX = 1.0 - 1e-9


ACTIVATION_CACHE_ENTRIES = 4096


def activation(ctx: Context, origins: list[str], decay: float, limit: int, total: bool = True) -> Activation:
    """Spreading activation from the origins; edges ranked by the strength that reached them.

    A result depends on the graph, the origins' concept ids, decay (to the bit) and limit
    only, so it is kept per read version: popular origins are walked once per change.
    With `total=False` (evidence reads only the matches) the banded walk stops once scoring
    is done and `total` is −1: counting every edge the origins reach costs a pass over all
    edges (12 ms at 4M edges) that the matches do not need."""
    key = (tuple(seed_ids(ctx, origins)), float(decay).hex(), limit)
    memo = versioned_cache(ctx, "activations", ACTIVATION_CACHE_ENTRIES)
    found = memo.get(key)
    if found is None and not total:
        found = memo.get((*key, "matches"))
    if found is None:
        if 0.0 < decay < BANDED_DECAY_MAX:
            found = activate_banded(ctx, origins, decay, limit, total)
        else:
            found = activation_plain(ctx, origins, decay, limit)
        memo[key if found.total >= 0 else (*key, "matches")] = found
    return found


def windowed_activation(ctx: Context, view: WindowView, origins: list[str], decay: float, limit: int) -> Activation:
    """Spreading activation inside a window: eligibility, fan totals and scores on the windowed
    counts and sums at every hop (the same walks as `activation`, over the window's graph). Not cached."""
    if 0.0 < decay < BANDED_DECAY_MAX:
        return activate_banded(ctx, origins, decay, limit, True, view.activation_graph())
    counts, sums = view.arrays()
    return activation_plain(ctx, origins, decay, limit, counts.tolist(), sums.tolist())
