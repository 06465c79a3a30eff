"""The fuse stage: reciprocal-rank-fusion score and order over the merged candidates (docs/stages.md)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import GROUPS, RANKED, Fused, Group

RRF_K = 60


# The graph-passages mode's lane weights (docs/evidence.md, "Graph passages"): a rank in the graph lane
# counts ten times a rank in any other lane. Ranks only: no lane's raw score meets another's.
GRAPH_LANE_WEIGHTS: dict[str, float] = {"passage_graph": 10.0}


def rrf_score(lane_ranks: tuple[tuple[str, int], ...]) -> float:
    """Σ 1/(k + rank) over the lane ranks, summed in their (sorted-lane) order."""
    score = 0.0
    for _lane, rank in lane_ranks:
        score += 1.0 / (RRF_K + rank)
    return score


def weighted_rrf_score(lane_ranks: tuple[tuple[str, int], ...], weights: dict[str, float]) -> float:
    """Σ w(lane)/(k + rank) over the lane ranks (w 1 for a lane not named), in their (sorted-lane) order."""
    score = 0.0
    for lane, rank in lane_ranks:
        score += weights.get(lane, 1.0) / (RRF_K + rank)
    return score


def rrf_order(groups: tuple[Group, ...], weights: dict[str, float] | None = None) -> tuple[Fused, ...]:
    """Score desc, then kind, then canonical key (code points); fused_rank numbered from 1. With
    `weights`, each lane's reciprocal ranks are weighted."""
    if weights is None:
        scored = [(rrf_score(g.lane_ranks), g) for g in groups]
    else:
        scored = [(weighted_rrf_score(g.lane_ranks, weights), g) for g in groups]
    scored.sort(key=lambda sg: (-sg[0], sg[1].candidate.kind, sg[1].candidate.canonical_key))
    return tuple(Fused(g.candidate, g.lane_ranks, g.locators, score, i + 1) for i, (score, g) in enumerate(scored))


@attrs.frozen
class Fuse:
    """Order candidates by reciprocal-rank fusion, never comparing raw lane scores."""

    name: ClassVar[str] = "fuse"
    requires: ClassVar[tuple[Key[Any], ...]] = (GROUPS,)
    provides: ClassVar[tuple[Key[Any], ...]] = (RANKED,)

    async def run(self, ctx: StageContext) -> Outcome:
        ranked = rrf_order(ctx[GROUPS])
        return Outcome.ran({RANKED: ranked}, detail={"out": len(ranked)})


@attrs.frozen
class GraphFuse:
    """Fusion in the graph-passages mode: reciprocal-rank fusion with the graph lane's ranks weighted."""

    name: ClassVar[str] = "fuse"
    requires: ClassVar[tuple[Key[Any], ...]] = (GROUPS,)
    provides: ClassVar[tuple[Key[Any], ...]] = (RANKED,)

    async def run(self, ctx: StageContext) -> Outcome:
        ranked = rrf_order(ctx[GROUPS], GRAPH_LANE_WEIGHTS)
        return Outcome.ran({RANKED: ranked}, detail={"out": len(ranked)})
