"""The cite stage: resolve the locators of the cited lanes' candidates to citation text."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.lanes import CITATIONS, CITED_KEYS
from taguru_server.stages.model import CONTEXT, Candidate, LaneResult, gate
from taguru_server.store import lanes
from taguru_server.store.context import Context
from taguru_server.store.lanes import Citation

CITATION_CACHE_ENTRIES = 20_000  # looked-up locators kept per read version (`lanes.read_version`)


def resolve_citations(ctx: Context, candidates: tuple[Candidate, ...]) -> dict[tuple[str, int], Citation]:
    """Every wanted (source, paragraph) that exists, visited sorted; unknown ones are skipped."""
    wanted = sorted({loc for c in candidates for loc in c.locators})
    found: dict[tuple[str, int], Citation] = {}
    known = lanes.versioned_cache(ctx, "citations", CITATION_CACHE_ENTRIES)
    for loc in wanted:
        citation = known.get(loc)
        if citation is None:
            citation = known[loc] = lanes.find_citation(ctx, loc[0], loc[1])
        if isinstance(citation, Citation):
            found[loc] = citation
    return found


@attrs.frozen
class Cite:
    """Look up the paragraphs that the candidates of the cited lanes point at."""

    name: ClassVar[str] = "cite"
    requires: ClassVar[tuple[Key[Any], ...]] = (CONTEXT, *CITED_KEYS)
    provides: ClassVar[tuple[Key[Any], ...]] = (CITATIONS,)

    async def run(self, ctx: StageContext) -> Outcome:
        gate(ctx.remaining())
        pool: tuple[Candidate, ...] = ()
        for key in CITED_KEYS:
            pool += ctx[key].value
        found = resolve_citations(ctx[CONTEXT], pool)
        return Outcome.ran({CITATIONS: LaneResult(found, True)}, detail={"out": len(found)})
