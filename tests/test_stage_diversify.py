"""The diversify stage: the §7.4 examples."""

from __future__ import annotations

import pytest
from stage_support import cand, fused, plain, request, run_stage

from taguru_server.stages.diversify import Diversify, GraphDiversify
from taguru_server.stages.lanes import CITATIONS
from taguru_server.stages.model import REQUEST, TIER_WIDTH, TIERED, UNITS, Fused, LaneResult, Unit
from taguru_server.store.read.citations import Citation


def _units(*sources):
    return tuple(
        Unit((fused(cand("passage", f"t\x00{s}\x00{i}", "passage_bm25", i + 1, source=s), i + 1),))
        for i, s in enumerate(sources)
    )


@pytest.mark.anyio
async def test_width_three(snapshot) -> None:
    out = await run_stage(Diversify(), {REQUEST: request(max_items=12), UNITS: _units("dominant", "dominant", "other")})
    assert [u.representative.candidate.source for u in out.values[TIERED]] == ["dominant", "other", "dominant"]
    assert out.values[TIER_WIDTH] == 3
    assert plain(out) == snapshot


@pytest.mark.anyio
async def test_width_two_never_crosses_tiers() -> None:
    out = await run_stage(
        Diversify(), {REQUEST: request(max_items=8), UNITS: _units("alpha", "beta", "alpha", "gamma")}
    )
    assert [u.representative.candidate.source for u in out.values[TIERED]] == ["alpha", "beta", "gamma", "alpha"]


@pytest.mark.anyio
async def test_unsourced_is_always_novel() -> None:
    out = await run_stage(Diversify(), {REQUEST: request(max_items=40), UNITS: _units(None, "a", None, "a")})
    assert [u.representative.candidate.source for u in out.values[TIERED]] == [None, "a", None, "a"]
    assert out.values[TIER_WIDTH] == 10


# ----- the graph-passages mode: units that add no paragraph go last ------------------------------------


def _passage(source: str, paragraph: int, rank: int) -> Unit:
    key = f"t\x00{source}\x00{paragraph}"
    payload = {"source": source, "paragraph": paragraph}
    return Unit((fused(cand("passage", key, "passage_graph", rank, source=source, payload=payload), rank),))


def _association(key: str, rank: int, *locators: tuple[str, int], relation: tuple[str, str] | None = None) -> Fused:
    c = cand("association", key, "graph_activate", rank, source=locators[0][0], locators=locators, relation=relation)
    return fused(c, rank)


def _cited(*locs: tuple[str, int]) -> LaneResult:
    return LaneResult({loc: Citation(f"{loc[0]}:{loc[1]}", loc[0], None, None) for loc in locs}, True)


def _keys(out) -> list[str]:
    return [u.representative.candidate.canonical_key for u in out.values[TIERED]]


@pytest.mark.anyio
async def test_the_mode_puts_a_unit_that_adds_no_paragraph_last() -> None:
    """An association citing only a paragraph a passage before it carries waits behind every unit that
    adds a paragraph; the units keep their order on either side (max_items 4: tiers of one, so only the
    new rule moves anything)."""
    units = (
        _passage("a.md", 0, 1),
        Unit((_association("a-fact", 2, ("a.md", 0)),)),
        _passage("b.md", 0, 3),
        Unit((_association("a-and-c", 4, ("a.md", 0), ("c.md", 1)),)),
        Unit((_association("b-fact", 5, ("b.md", 0)),)),
        _passage("a.md", 1, 6),
    )
    found = _cited(("a.md", 0), ("b.md", 0), ("c.md", 1))
    out = await run_stage(GraphDiversify(), {REQUEST: request(max_items=4), UNITS: units, CITATIONS: found})
    assert _keys(out) == ["t\x00a.md\x000", "t\x00b.md\x000", "a-and-c", "t\x00a.md\x001", "a-fact", "b-fact"]
    assert out.values[TIER_WIDTH] == 1
    # the plain graph's stage keeps the fused order (tiers of one)
    plain_out = await run_stage(Diversify(), {REQUEST: request(max_items=4), UNITS: units})
    assert _keys(plain_out) == [u.representative.candidate.canonical_key for u in units]


@pytest.mark.anyio
async def test_only_found_citations_count_and_an_item_citing_nothing_stays() -> None:
    """A locator the citations lane did not find puts no paragraph in the package: an association whose
    only locator is unfound carries nothing, and a unit carrying nothing is never moved."""
    units = (
        _passage("a.md", 0, 1),
        Unit((_association("unfound", 2, ("a.md", 0)),)),
        _passage("b.md", 0, 3),
    )
    out = await run_stage(GraphDiversify(), {REQUEST: request(max_items=4), UNITS: units, CITATIONS: _cited()})
    assert _keys(out) == ["t\x00a.md\x000", "unfound", "t\x00b.md\x000"]


@pytest.mark.anyio
async def test_a_contradiction_group_moves_whole_and_only_when_every_paragraph_is_carried() -> None:
    group_new = Unit(
        (
            _association("x=1", 2, ("a.md", 0), relation=("x", "値")),
            _association("x=2", 3, ("d.md", 0), relation=("x", "値")),
        )
    )
    group_old = Unit(
        (
            _association("y=1", 4, ("a.md", 0), relation=("y", "値")),
            _association("y=2", 5, ("d.md", 0), relation=("y", "値")),
        )
    )
    units = (_passage("a.md", 0, 1), group_new, group_old, _passage("e.md", 0, 6))
    found = _cited(("a.md", 0), ("d.md", 0))
    out = await run_stage(GraphDiversify(), {REQUEST: request(max_items=4), UNITS: units, CITATIONS: found})
    assert _keys(out) == ["t\x00a.md\x000", "x=1", "t\x00e.md\x000", "y=1"]
    assert [len(u.members) for u in out.values[TIERED]] == [1, 2, 1, 2]


@pytest.mark.anyio
async def test_the_mode_moves_after_the_tiers() -> None:
    """The tiers first (novel sources before repeats inside each), then the units adding no paragraph last,
    out of whatever tier they were in."""
    units = (
        _passage("a.md", 0, 1),
        _passage("a.md", 1, 2),
        Unit((_association("a-fact", 3, ("a.md", 0)),)),
        _passage("b.md", 0, 4),
        _passage("c.md", 0, 5),
        _passage("d.md", 0, 6),
    )
    found = _cited(("a.md", 0))
    out = await run_stage(GraphDiversify(), {REQUEST: request(max_items=12), UNITS: units, CITATIONS: found})
    assert out.values[TIER_WIDTH] == 3
    tiers_only = await run_stage(Diversify(), {REQUEST: request(max_items=12), UNITS: units})
    a0, a1, b0, c0, d0 = (f"t\x00{s}.md\x00{p}" for s, p in (("a", 0), ("a", 1), ("b", 0), ("c", 0), ("d", 0)))
    assert _keys(tiers_only) == [a0, a1, "a-fact", b0, c0, d0]
    assert _keys(out) == [a0, a1, b0, c0, d0, "a-fact"]
