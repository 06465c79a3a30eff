"""The diversify stage: within each tier, novel sources before repeats (and, in the graph-passages mode,
every unit that adds a paragraph before every unit whose paragraphs earlier units carry already)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.lanes import CITATIONS
from taguru_server.stages.model import REQUEST, TIER_WIDTH, TIERED, UNITS, Unit
from taguru_server.store.read.citations import Citation


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


def carried(unit: Unit, found: dict[tuple[str, int], Citation]) -> set[tuple[str, int]]:
    """The paragraphs a unit's items would put in the package: a passage its own, any other item the
    paragraphs of its `citation_refs` (its locators the citations lane found)."""
    out: set[tuple[str, int]] = set()
    for member in unit.members:
        cand = member.candidate
        if cand.kind == "passage":
            out.add((cand.payload["source"], cand.payload["paragraph"]))
        else:
            out.update(loc for loc in member.locators if loc in found)
    return out


def carrying_first(units: tuple[Unit, ...], found: dict[tuple[str, int], Citation]) -> tuple[Unit, ...]:
    """The units that carry a paragraph no earlier unit carries, in order, then the units all of whose
    paragraphs an earlier unit carries, in order; a unit that carries no paragraph counts as new."""
    have: set[tuple[str, int]] = set()
    front: list[Unit] = []
    back: list[Unit] = []
    for unit in units:
        paragraphs = carried(unit, found)
        if paragraphs and paragraphs <= have:
            back.append(unit)
        else:
            have |= paragraphs
            front.append(unit)
    return (*front, *back)


@attrs.frozen
class GraphDiversify:
    """Diversify in the graph-passages mode: the tiers as always, then every unit that adds no paragraph
    to what the units before it carry after every unit that adds one (docs/evidence.md, "Graph passages")."""

    name: ClassVar[str] = "diversify"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, UNITS, CITATIONS)
    provides: ClassVar[tuple[Key[Any], ...]] = (TIERED, TIER_WIDTH)

    async def run(self, ctx: StageContext) -> Outcome:
        width = tier_width(ctx[REQUEST].max_items)
        tiered = carrying_first(diversify(ctx[UNITS], width), ctx[CITATIONS].value)
        return Outcome.ran({TIERED: tiered, TIER_WIDTH: width}, detail={"units": len(tiered), "width": width})
