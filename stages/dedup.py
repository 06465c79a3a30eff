"""The dedup stage: merge candidates with the same candidate_id (exact-key dedup, §6.1)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import (
    ACTIVATE_HITS,
    COMMUNITY_HITS,
    DEDUP_DROPPED,
    GROUPS,
    PASSAGE_HITS,
    QUERY_HITS,
    Candidate,
    Fused,
)

RRF_K = 60


def merge_duplicates(pool: tuple[Candidate, ...]) -> tuple[tuple[Fused, ...], int]:
    """One Fused per candidate_id, in first-seen order, with best lane ranks and merged locators."""
    groups: dict[str, list[Candidate]] = {}
    for cand in pool:
        groups.setdefault(cand.candidate_id, []).append(cand)
    fused = []
    for members in groups.values():
        best: dict[str, int] = {}
        for m in members:
            if m.lane not in best or m.rank < best[m.lane]:
                best[m.lane] = m.rank
        representative = min(members, key=lambda m: (m.rank, m.lane))
        locators = tuple(sorted({loc for m in members for loc in m.locators}))
        lane_ranks = tuple(sorted(best.items()))
        score = 0.0
        for _lane, rank in lane_ranks:
            score += 1.0 / (RRF_K + rank)
        fused.append(Fused(representative, lane_ranks, locators, score))
    return tuple(fused), len(pool) - len(fused)


@attrs.frozen
class Dedup:
    """Merge query/activate copies of one edge (and any other exact repeats)."""

    name: ClassVar[str] = "dedup"
    requires: ClassVar[tuple[Key[Any], ...]] = (QUERY_HITS, ACTIVATE_HITS, PASSAGE_HITS, COMMUNITY_HITS)
    provides: ClassVar[tuple[Key[Any], ...]] = (GROUPS, DEDUP_DROPPED)

    async def run(self, ctx: StageContext) -> Outcome:
        pool = ctx[QUERY_HITS].value + ctx[ACTIVATE_HITS].value + ctx[PASSAGE_HITS].value + ctx[COMMUNITY_HITS].value
        groups, dropped = merge_duplicates(pool)
        return Outcome.ran(
            {GROUPS: groups, DEDUP_DROPPED: dropped}, detail={"in": len(pool), "out": len(groups), "dropped": dropped}
        )
