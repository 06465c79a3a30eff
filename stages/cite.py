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


# candidates whose resolved locators are kept per read version, as the edge cache of stages/candidates.py
CANDIDATE_CITATION_ENTRIES = 20_000


class Found(dict[tuple[str, int], Citation]):
    """The found citations by locator, and per association candidate the locators tuple it was
    resolved for with the count and summed source-id length of its found locators (the budget's
    refs floor reads them instead of walking a hub edge's locators again)."""

    __slots__ = ("floors",)

    def __init__(self) -> None:
        super().__init__()
        self.floors: dict[str, tuple[tuple[tuple[str, int], ...], int, int]] = {}


def _candidate_citations(
    ctx: Context, cand: Candidate, known: dict[tuple[str, int], Citation | str]
) -> tuple[tuple[tuple[str, int], ...], tuple[Citation, ...]]:
    """The candidate's locators that exist, in its order, and their citations."""
    locs: list[tuple[str, int]] = []
    cites: list[Citation] = []
    for loc in cand.locators:
        citation = known.get(loc)
        if citation is None:
            citation = known[loc] = citations.find_citation(ctx, loc[0], loc[1])
        if isinstance(citation, Citation):
            locs.append(loc)
            cites.append(citation)
    # every locator found (the usual case): keep the candidate's own tuple rather than a copy
    return (cand.locators if len(locs) == len(cand.locators) else tuple(locs)), tuple(cites)


def resolve_citations(ctx: Context, candidates: tuple[Candidate, ...]) -> Found:
    """Every wanted (source, paragraph) that exists, in first-wanted order; unknown ones are skipped.

    A candidate's resolution is kept per read version with the locators it was made for (the
    edge cache shares one tuple per edge, so the check is an identity test) and merged with
    one dict update: a hub edge carries thousands of locators."""
    found = Found()
    floors = found.floors
    known = cache.versioned_cache(ctx, "citations", CITATION_CACHE_ENTRIES)
    per_candidate = cache.versioned_cache(ctx, "candidate_citations", CANDIDATE_CITATION_ENTRIES)
    for cand in candidates:
        if not cand.locators:
            continue
        key = cand.candidate_id
        hit = per_candidate.get(key)
        if hit is None or (hit[0] is not cand.locators and hit[0] != cand.locators):
            locs, cites = _candidate_citations(ctx, cand, known)
            hit = per_candidate[key] = (cand.locators, locs, cites, len(locs), sum(len(s) for s, _p in locs))
        found.update(zip(hit[1], hit[2], strict=True))
        floors[key] = (cand.locators, hit[3], hit[4])
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
