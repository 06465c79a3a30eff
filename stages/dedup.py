"""The dedup stage: merge candidates with the same candidate_id (exact-key dedup)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.lanes import CANDIDATE_KEYS, GRAPH_CANDIDATE_KEYS
from taguru_server.stages.model import DEDUP_DROPPED, GROUPS, Candidate, Group


def merge_duplicates(pool: tuple[Candidate, ...]) -> tuple[tuple[Group, ...], int]:
    """One Group per candidate_id, in first-seen order, with best lane ranks and merged locators."""
    groups: dict[str, list[Candidate]] = {}
    for cand in pool:
        groups.setdefault(cand.candidate_id, []).append(cand)
    merged = []
    for members in groups.values():
        if len(members) == 1:  # the common case; a candidate's locators are sorted and distinct already
            only = members[0]
            merged.append(Group(only, ((only.lane, only.rank),), only.locators))
            continue
        best: dict[str, int] = {}
        for m in members:
            if m.lane not in best or m.rank < best[m.lane]:
                best[m.lane] = m.rank
        representative = min(members, key=lambda m: (m.rank, m.lane))
        locators = tuple(sorted({loc for m in members for loc in m.locators}))
        merged.append(Group(representative, tuple(sorted(best.items())), locators))
    return tuple(merged), len(pool) - len(merged)


@attrs.frozen
class Dedup:
    """Merge the copies of one candidate that several lanes (or one lane twice) produced."""

    name: ClassVar[str] = "dedup"
    requires: ClassVar[tuple[Key[Any], ...]] = CANDIDATE_KEYS
    provides: ClassVar[tuple[Key[Any], ...]] = (GROUPS, DEDUP_DROPPED)

    async def run(self, ctx: StageContext) -> Outcome:
        pool: tuple[Candidate, ...] = ()
        for key in self.requires:  # registry order
            pool += ctx[key].value
        groups, dropped = merge_duplicates(pool)
        return Outcome.ran(
            {GROUPS: groups, DEDUP_DROPPED: dropped}, detail={"in": len(pool), "out": len(groups), "dropped": dropped}
        )


@attrs.frozen
class GraphDedup(Dedup):
    """Dedup in the graph-passages mode: the mode's registry's candidate lanes, the graph lane among them."""

    requires: ClassVar[tuple[Key[Any], ...]] = GRAPH_CANDIDATE_KEYS
