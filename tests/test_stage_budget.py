"""The budget stage: hard ceilings, skip-not-stop, citations billed once, groups whole."""

from __future__ import annotations

import pytest
from stage_support import cand, fused, plain, request, run_stage

from taguru_server.stages.accounting import cost, overhead, tokens
from taguru_server.stages.budget import Budget, admit
from taguru_server.stages.lanes import CITATIONS
from taguru_server.stages.model import NEAR_DUP_OMITTED, REQUEST, SELECTION, TIERED, LaneResult, Unit
from taguru_server.store.read.citations import Citation, Locator

CITE = {("s.md", 0): Citation("猫は哺乳類である。", "s.md", None, None)}


def _assoc(o, rank, locators=(("s.md", 0),), corroborating=("s.md",)):
    payload = {"subject": "猫", "label": "is_a", "object": o, "weight": 1.0, "count": 1, "attributions": []}
    return fused(
        cand(
            "association",
            f"猫\x00is_a\x00{o}",
            "graph_activate",
            rank,
            payload=payload,
            locators=locators,
            corroborating=corroborating,
            relation=("猫", "is_a"),
        ),
        rank,
    )


def _passage(i, text="x" * 10):
    payload = {"source": f"p{i}.md", "paragraph": 0, "text": text, "lanes": {}}
    return fused(cand("passage", f"t\x00p{i}.md\x000", "passage_bm25", i, payload=payload), i)


def test_token_estimator() -> None:
    assert tokens(4) == 1 and tokens(5) == 2 and tokens(0) == 0
    assert cost("abcd") == (6, 6) and cost("日") == (5, 6)


@pytest.mark.anyio
async def test_budget_admits_and_bills_shared_citation_once(snapshot) -> None:
    units = (Unit((_assoc("哺乳類", 1),)), Unit((_assoc("動物", 2),)), Unit((_passage(3),)))
    out = await run_stage(
        Budget(),
        {REQUEST: request(max_items=40), TIERED: units, CITATIONS: LaneResult(CITE, True), NEAR_DUP_OMITTED: ()},
    )
    sel = out.values[SELECTION]
    assert len(sel.items) == 3 and len(sel.citations) == 1
    assert sel.budget["items_used"] == 3
    cite_bytes, _q = cost(sel.citations[0])
    assert sel.budget["bytes_used"] == overhead(3) + sum(i["bytes"] for i in sel.items) + overhead(1) + cite_bytes
    assert plain(out) == snapshot


def test_zero_and_tiny_budgets_omit_everything() -> None:
    units = (Unit((_passage(1),)), Unit((_passage(2),)))
    for limits in ((0, 65536, 4000), (40, 1, 4000), (40, 65536, 0)):
        sel = admit(units, {}, (), *limits)
        assert sel.items == () and sel.budget["bytes_used"] == 4 and sel.budget["tokens_used"] == 1
        assert [o.reason for o in sel.omitted] == ["budget_exceeded", "budget_exceeded"]


def test_over_budget_unit_is_skipped_and_a_later_smaller_one_admitted() -> None:
    units = (Unit((_passage(1, "y" * 500),)), Unit((_passage(2, "z"),)))
    sel = admit(units, {}, (), 40, 400, 4000)
    assert [i["candidate_id"] for i in sel.items] == ["passage\x00t\x00p2.md\x000"]
    assert sel.budget["bytes_used"] <= 400


def test_contradiction_group_is_omitted_whole() -> None:
    group = Unit((_assoc("哺乳類", 1), _assoc("爬虫類", 2)))
    sel = admit((group,), CITE, (), 1, 65536, 4000)
    assert sel.items == ()
    assert [o.reason for o in sel.omitted] == ["contradiction_group_exceeds_budget"] * 2
    sel = admit((group,), CITE, (), 2, 65536, 4000)
    assert [i["contradicts"] for i in sel.items] == [
        ["association\x00猫\x00is_a\x00爬虫類"],
        ["association\x00猫\x00is_a\x00哺乳類"],
    ]


def test_citation_json_is_the_wire_serialization() -> None:
    from taguru_server.stages.budget import citation_entry, citation_json
    from taguru_server.store.wire import dumps

    for citation in (
        CITE[("s.md", 0)],
        Citation('q"\\\n\x01é', "s", "章", Locator("page", "3")),
    ):
        assert citation_json(("s.md", 7), citation) == dumps(citation_entry(("s.md", 7), citation))


@pytest.mark.parametrize("seed", range(8))
def test_the_refs_floor_never_exceeds_an_items_bytes_and_the_shortcut_changes_no_outcome(seed: int) -> None:
    """A unit refused on its citation_refs alone (never built) is one the built-item floor check would
    refuse too: the floor is below the built bytes, and the walk's outcome equals one without it."""
    import random

    from taguru_server.stages import budget

    rng = random.Random(seed)
    sources = ["s.md", "長い名前の資料/第三章.md", "a", "x/" * 20 + "y.md", 'q"\\\t.md']
    found = {(s, p): Citation(f"{s}:{p}", s, None, None) for s in sources for p in range(40) if rng.random() < 0.7}
    units = []
    for rank in range(1, 40):
        n = rng.choice([0, 1, 3, 30, 200, 2000])
        locs = tuple(sorted({(rng.choice(sources), rng.randrange(45)) for _ in range(n)}))
        corroborating = ("s.md",) if rank % 2 else ()  # with corroboration the refs are carried twice
        units.append(Unit((_assoc(f"o{rank}", rank, locators=locs, corroborating=corroborating),)))
        built = budget._built_unit(units[-1], found)
        assert budget.refs_floor(units[-1], found) <= built[2]
    for max_bytes in (300, 2_000, 20_000, 200_000):
        got = admit(tuple(units), found, (), 40, max_bytes, 10**9)
        floor = budget.refs_floor
        try:
            budget.refs_floor = lambda unit, found: 0  # the walk without the shortcut
            want = admit(tuple(units), found, (), 40, max_bytes, 10**9)
        finally:
            budget.refs_floor = floor
        assert got == want
