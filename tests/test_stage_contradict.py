"""The contradict stage: (subject, label) groups become atomic units."""

from __future__ import annotations

import pytest
from stage_support import cand, fused, plain, run_stage

from taguru_server.stages.contradict import Contradict
from taguru_server.stages.model import CONTRADICTION_GROUPS, REORDERED, UNITS


def _assoc(s, lab, o, rank):
    return fused(cand("association", f"{s}\x00{lab}\x00{o}", "graph_activate", rank, relation=(s, lab)), rank)


@pytest.mark.anyio
async def test_contradiction_units(snapshot) -> None:
    survivors = (
        _assoc("猫", "is_a", "哺乳類", 1),
        fused(cand("passage", "t\x00a.md\x000", "passage_bm25", 1), 2),
        _assoc("猫", "is_a", "爬虫類", 3),
        _assoc("猫", "likes", "魚", 4),
        _assoc("猫", "is_a", "両生類", 5),
    )
    out = await run_stage(Contradict(), {REORDERED: survivors})
    units = out.values[UNITS]
    assert [[m.fused_rank for m in u.members] for u in units] == [[1, 3, 5], [2], [4]]
    assert out.values[CONTRADICTION_GROUPS] == 1
    assert plain(out) == snapshot
