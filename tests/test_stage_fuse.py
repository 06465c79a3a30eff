"""The fuse stage: RRF score, then kind, then canonical key as text."""

from __future__ import annotations

import pytest
from stage_support import cand, plain, run_stage

from taguru_server.stages.dedup import merge_duplicates
from taguru_server.stages.fuse import Fuse
from taguru_server.stages.model import GROUPS, RANKED


@pytest.mark.anyio
async def test_fuse_orders_ties_by_kind_then_key(snapshot) -> None:
    pool = (
        cand("passage", "t\x00p.md\x0010", "passage_bm25", 1),
        cand("passage", "t\x00p.md\x009", "passage_bm25", 2),
        cand("association", "a\x00r\x00b", "graph_activate", 1),
        cand("community", "t\x00community:L0-0\x000", "community", 1),
    )
    groups, _dropped = merge_duplicates(pool)
    out = await run_stage(Fuse(), {GROUPS: groups})
    ranked = out.values[RANKED]
    assert [f.candidate.kind for f in ranked] == ["association", "community", "passage", "passage"]
    assert [f.fused_rank for f in ranked] == [1, 2, 3, 4]
    assert ranked[2].candidate.canonical_key.endswith("\x0010")  # "10" < "9" as text
    assert plain(out) == snapshot
