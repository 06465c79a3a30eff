"""The diversify stage: within each tier, novel sources before repeats."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import REQUEST, TIER_WIDTH, TIERED, UNITS, Unit


def tier_width(max_items: int) -> int:
    return max(1, max_items // 4)


def diversify(units: tuple[Unit, ...], width: int) -> tuple[Unit, ...]:
    """Reorder inside consecutive tiers only; 'seen' counts every earlier unit, admitted or not."""
    seen: set[str] = set()
    out: list[Unit] = []
    for start in range(0, len(units), width):
        novel: list[Unit] = []
        repeats: list[Unit] = []
        for unit in units[start : start + width]:
            source = unit.representative.candidate.source
            if source is None:
                novel.append(unit)
            elif source not in seen:
                seen.add(source)
                novel.append(unit)
            else:
                repeats.append(unit)
        out.extend(novel)
        out.extend(repeats)
    return tuple(out)


@attrs.frozen
class Diversify:
    """Prefer a not-yet-seen primary source inside each tier, never across tiers."""

    name: ClassVar[str] = "diversify"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, UNITS)
    provides: ClassVar[tuple[Key[Any], ...]] = (TIERED, TIER_WIDTH)

    async def run(self, ctx: StageContext) -> Outcome:
        width = tier_width(ctx[REQUEST].max_items)
        tiered = diversify(ctx[UNITS], width)
        return Outcome.ran({TIERED: tiered, TIER_WIDTH: width}, detail={"units": len(tiered), "width": width})
