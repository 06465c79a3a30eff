"""The dedup stage: query and activate copies of one edge merge."""

from __future__ import annotations

import pytest
from stage_support import cand, plain, run_stage

from taguru_server.stages.dedup import Dedup
from taguru_server.stages.fuse import rrf_score
from taguru_server.stages.lanes import ACTIVATE_HITS, COMMUNITY_HITS, PASSAGE_HITS, QUERY_HITS
from taguru_server.stages.model import DEDUP_DROPPED, GROUPS, LaneResult


@pytest.mark.anyio
async def test_dedup_merges_exact_keys(snapshot) -> None:
    q = (cand("association", "a\x00r\x00b", "graph_query", 1, locators=(("x.md", 0),)),)
    a = (
        cand("association", "a\x00r\x00b", "graph_activate", 1, locators=(("y.md", 2),)),
        cand("association", "a\x00r\x00c", "graph_activate", 2),
    )
    p = (cand("passage", "t\x00x.md\x000", "passage_bm25", 1),)
    out = await run_stage(
        Dedup(),
        {
            QUERY_HITS: LaneResult(q, True),
            ACTIVATE_HITS: LaneResult(a, True),
            PASSAGE_HITS: LaneResult(p, True),
            COMMUNITY_HITS: LaneResult((), False, "x"),
        },
    )
    groups = out.values[GROUPS]
    assert out.values[DEDUP_DROPPED] == 1 and len(groups) == 3
    merged = groups[0]
    assert merged.lane_ranks == (("graph_activate", 1), ("graph_query", 1))
    assert merged.candidate.lane == "graph_activate"  # equal rank: graph_activate < graph_query
    assert merged.locators == (("x.md", 0), ("y.md", 2))
    assert rrf_score(merged.lane_ranks) == 1 / 61 + 1 / 61  # the score is fuse's (stages/fuse.py)
    assert plain(out) == snapshot
