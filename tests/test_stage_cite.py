"""The cite stage: found locators only, unknown ones skipped silently."""

from __future__ import annotations

import pytest
from stage_support import make_context, plain, run_stage

from taguru_server.stages.candidates import association_candidate
from taguru_server.stages.cite import Cite
from taguru_server.stages.lanes import ACTIVATE_HITS, CITATIONS, QUERY_HITS
from taguru_server.stages.model import CONTEXT, LaneResult


@pytest.mark.anyio
async def test_cite_resolves_found_locators(snapshot) -> None:
    ctx = make_context(
        passages={"s1.md": "猫は哺乳類である。\n\n二段落目。"},
        locators={"s1.md": [(0, "page", "1")]},
        associations=[
            ("猫", "is_a", "哺乳類", 1.0, "s1.md", 0),
            ("猫", "is_a", "爬虫類", 1.0, "ghost.md", 0),
            ("猫", "has", "尾", 1.0, "s1.md", 1),
        ],
    )
    pool = tuple(association_candidate(ctx, e, "graph_activate", e + 1) for e in range(3))
    out = await run_stage(
        Cite(), {CONTEXT: ctx, QUERY_HITS: LaneResult((), False, "x"), ACTIVATE_HITS: LaneResult(pool, True)}
    )
    found = out.values[CITATIONS].value
    assert sorted(found) == [("s1.md", 0), ("s1.md", 1)]
    assert out.values[CITATIONS].plan() == {"ran": True}
    assert plain(out) == snapshot
