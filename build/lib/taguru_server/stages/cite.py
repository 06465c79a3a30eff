"""The cite stage: resolve every association candidate's locators to citation text."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import ACTIVATE_HITS, CITATIONS, CONTEXT, QUERY_HITS, Candidate, LaneResult, gate
from taguru_server.store import lanes
from taguru_server.store.context import Context


def resolve_citations(ctx: Context, candidates: tuple[Candidate, ...]) -> dict[tuple[str, int], dict[str, Any]]:
    """Every wanted (source, paragraph) that exists, visited sorted; unknown ones are skipped."""
    wanted = sorted({loc for c in candidates if c.kind == "association" for loc in c.locators})
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for source, paragraph in wanted:
        citation = lanes.citation(ctx, source, paragraph)
        if isinstance(citation, dict):
            found[(source, paragraph)] = citation
    return found


@attrs.frozen
class Cite:
    """Look up the paragraphs the association candidates point at."""

    name: ClassVar[str] = "cite"
    requires: ClassVar[tuple[Key[Any], ...]] = (CONTEXT, QUERY_HITS, ACTIVATE_HITS)
    provides: ClassVar[tuple[Key[Any], ...]] = (CITATIONS,)

    async def run(self, ctx: StageContext) -> Outcome:
        gate(ctx.remaining())
        pool = ctx[QUERY_HITS].value + ctx[ACTIVATE_HITS].value
        found = resolve_citations(ctx[CONTEXT], pool)
        return Outcome.ran({CITATIONS: LaneResult(found, True)}, detail={"out": len(found)})
