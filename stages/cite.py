"""The cite stage: resolve the locators of the cited lanes' candidates to citation text."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.lanes import CITATIONS, CITED_KEYS
from taguru_server.stages.model import CONTEXT, Candidate, LaneResult, gate
from taguru_server.store.model.context import Context
from taguru_server.store.read import cache, citations
from taguru_server.store.read.citations import Citation

# looked-up locators kept per read version (`cache.read_version`): one evidence request over hub edges
# wants up to ~20k of them, so a smaller cache would be cleared by every such request
CITATION_CACHE_ENTRIES = 250_000


def resolve_citations(ctx: Context, candidates: tuple[Candidate, ...]) -> dict[tuple[str, int], Citation]:
    """Every wanted (source, paragraph) that exists, in first-wanted order; unknown ones are skipped."""
    found: dict[tuple[str, int], Citation] = {}
    missing: set[tuple[str, int]] = set()
    known = cache.versioned_cache(ctx, "citations", CITATION_CACHE_ENTRIES)
    for cand in candidates:
        for loc in cand.locators:
            if loc in found or loc in missing:
                continue
            citation = known.get(loc)
            if citation is None:
                citation = known[loc] = citations.find_citation(ctx, loc[0], loc[1])
            if isinstance(citation, Citation):
                found[loc] = citation
            else:
                missing.add(loc)
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
