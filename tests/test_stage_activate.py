"""The activate stage: strongest activated edges as candidates."""

from __future__ import annotations

import pytest
from stage_support import make_context, plain, request, run_stage

from taguru_server.stages.activate import Activate
from taguru_server.stages.lanes import ACTIVATE_HITS, ANCHORS
from taguru_server.stages.model import CONTEXT, REQUEST, LaneResult

CTX = [
    ("a", "r", "b", 2.0, "x.md", 0),
    ("b", "r", "c", 1.0, "y.md", 1),
    ("c", "r", "d", 1.0, None, None),
    ("a", "q", "e", -1.0, "x.md", 0),
]


@pytest.mark.anyio
async def test_activate_candidates(snapshot) -> None:
    values = {
        REQUEST: request(origins=("a",), activate_limit=3),
        CONTEXT: make_context(associations=CTX),
        ANCHORS: LaneResult(("a",), True),
    }
    out = await run_stage(Activate(), values)
    hits = out.values[ACTIVATE_HITS].value
    assert len(hits) == 3 and [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].canonical_key == "a\x00r\x00b"
    assert plain(out) == snapshot


@pytest.mark.anyio
async def test_activate_without_anchors_is_skipped() -> None:
    values = {REQUEST: request(origins=("zz",)), CONTEXT: make_context(associations=CTX), ANCHORS: LaneResult((), True)}
    out = await run_stage(Activate(), values)
    assert out.values[ACTIVATE_HITS].plan() == {"ran": False, "reason": "no anchors resolved from 'origins'"}
