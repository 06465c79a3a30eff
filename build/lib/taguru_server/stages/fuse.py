"""The fuse stage: reciprocal-rank-fusion order over the merged candidates (§6.2-6.4)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import GROUPS, RANKED, Fused


def rrf_order(groups: tuple[Fused, ...]) -> tuple[Fused, ...]:
    """Score desc, then kind, then canonical key (code points); fused_rank numbered from 1."""
    ordered = sorted(groups, key=lambda f: (-f.score, f.candidate.kind, f.candidate.canonical_key))
    return tuple(attrs.evolve(f, fused_rank=i + 1) for i, f in enumerate(ordered))


@attrs.frozen
class Fuse:
    """Order candidates by reciprocal-rank fusion, never comparing raw lane scores."""

    name: ClassVar[str] = "fuse"
    requires: ClassVar[tuple[Key[Any], ...]] = (GROUPS,)
    provides: ClassVar[tuple[Key[Any], ...]] = (RANKED,)

    async def run(self, ctx: StageContext) -> Outcome:
        ranked = rrf_order(ctx[GROUPS])
        return Outcome.ran({RANKED: ranked}, detail={"out": len(ranked)})
