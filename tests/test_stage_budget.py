"""The budget stage: hard ceilings, skip-not-stop, citations billed once, groups whole."""

from __future__ import annotations

import pytest
from stage_support import cand, fused, plain, request, run_stage

from taguru_server.stages.accounting import cost, overhead, tokens
from taguru_server.stages.budget import Budget, admit
from taguru_server.stages.lanes import CITATIONS
from taguru_server.stages.model import NEAR_DUP_OMITTED, REQUEST, SELECTION, TIERED, LaneResult, Unit
from taguru_server.store.lanes import Citation, Locator

CITE = {("s.md", 0): Citation("猫は哺乳類である。", "s.md", None, None)}


def _assoc(o, rank, locators=(("s.md", 0),)):
    payload = {"subject": "猫", "label": "is_a", "object": o, "weight": 1.0, "count": 1, "attributions": []}
    return fused(
        cand(
            "association",
            f"猫\x00is_a\x00{o}",
            "graph_activate",
            rank,
            payload=payload,
            locators=locators,
            corroborating=("s.md",),
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
