"""The contradict stage: group associations sharing (subject, label) into admission units."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import CONTRADICTION_GROUPS, REORDERED, UNITS, Fused, Unit


def admission_units(survivors: tuple[Fused, ...]) -> tuple[Unit, ...]:
    """At a group's first member emit the whole group in survivor order; others are single units."""
    groups: dict[tuple[str, str], list[Fused]] = {}
    for f in survivors:
        if f.candidate.kind == "association" and f.candidate.relation is not None:
            groups.setdefault(f.candidate.relation, []).append(f)
    units: list[Unit] = []
    emitted: set[tuple[str, str]] = set()
    for f in survivors:
        rel = f.candidate.relation if f.candidate.kind == "association" else None
        if rel is None:
            units.append(Unit((f,)))
        elif rel not in emitted:
            emitted.add(rel)
            units.append(Unit(tuple(groups[rel])))
    return tuple(units)


@attrs.frozen
class Contradict:
    """Make each contradiction group (or multi-valued relation) one all-or-nothing unit."""

    name: ClassVar[str] = "contradict"
    requires: ClassVar[tuple[Key[Any], ...]] = (REORDERED,)
    provides: ClassVar[tuple[Key[Any], ...]] = (UNITS, CONTRADICTION_GROUPS)

    async def run(self, ctx: StageContext) -> Outcome:
        units = admission_units(ctx[REORDERED])
        groups = sum(1 for u in units if len(u.members) > 1)
        return Outcome.ran({UNITS: units, CONTRADICTION_GROUPS: groups}, detail={"units": len(units), "groups": groups})
