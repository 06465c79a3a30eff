"""The query stage: anchors × labels."""

from __future__ import annotations

import pytest
from stage_support import make_context, plain, request, run_stage

from taguru_server.stages.lanes import ANCHORS, QUERY_HITS
from taguru_server.stages.model import CONTEXT, REQUEST, LaneResult
from taguru_server.stages.query import Query

CTX = [
    ("猫", "is_a", "哺乳類", 2.0, "s1.md", 0),
    ("猫", "is_a", "動物", -3.0, None, None),
    ("猫", "likes", "魚", 1.0, "s2.md", None),
    ("犬", "is_a", "哺乳類", 1.0, None, None),
]


@pytest.mark.anyio
async def test_query_orders_by_weight_magnitude(snapshot) -> None:
    values = {
        REQUEST: request(origins=("猫",), labels=("is_a",)),
        CONTEXT: make_context(associations=CTX),
        ANCHORS: LaneResult(("猫",), True),
    }
    out = await run_stage(Query(), values)
    keys = [c.canonical_key for c in out.values[QUERY_HITS].value]
    assert keys == ["猫\x00is_a\x00動物", "猫\x00is_a\x00哺乳類"]
    assert [c.rank for c in out.values[QUERY_HITS].value] == [1, 2]
    assert plain(out) == snapshot


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("anchors", "labels", "reason"),
    [
        ((), ("is_a",), "no anchors resolved from 'origins'"),
        (("猫",), (), "no 'labels' given"),
    ],
)
async def test_query_skips(anchors, labels, reason) -> None:
    values = {
        REQUEST: request(origins=("猫",), labels=labels),
        CONTEXT: make_context(associations=CTX),
        ANCHORS: LaneResult(anchors, True),
    }
    out = await run_stage(Query(), values)
    assert out.status == "skipped"
    assert out.values[QUERY_HITS].plan() == {"ran": False, "reason": reason}
