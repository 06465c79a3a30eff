"""The diversify stage: the §7.4 examples."""

from __future__ import annotations

import pytest
from stage_support import cand, fused, plain, request, run_stage

from taguru_server.stages.diversify import Diversify
from taguru_server.stages.model import REQUEST, TIER_WIDTH, TIERED, UNITS, Unit


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
