"""The resolve stage: anchors from origins."""

from __future__ import annotations

import attrs
import pytest
from stage_support import make_context, plain, request, run_stage, services

from taguru_server.stages.lanes import ANCHORS
from taguru_server.stages.model import CONTEXT, REQUEST, SERVICES
from taguru_server.stages.resolve import Resolve
from taguru_server.store.errors import ApiError

CTX = [("青嶺酒造", "杜氏", "高瀬", 1.0, "kura.md", 0), ("高瀬", "出身", "霧沢町", 1.0, None, None)]


@pytest.mark.anyio
async def test_resolve_anchors(snapshot) -> None:
    ctx = make_context(associations=CTX)
    out = await run_stage(
        Resolve(),
        {REQUEST: request(origins=("青嶺酒蔵", "高瀬", "高瀬", "unknown")), CONTEXT: ctx, SERVICES: services()},
    )
    assert out.values[ANCHORS].value == ("青嶺酒造", "高瀬")
    assert plain(out) == snapshot


@pytest.mark.anyio
async def test_resolve_empty_origins_is_skipped(snapshot) -> None:
    out = await run_stage(
        Resolve(), {REQUEST: request(origins=()), CONTEXT: make_context(associations=CTX), SERVICES: services()}
    )
    assert out.status == "skipped" and out.values[ANCHORS].plan() == {"ran": False, "reason": "origins was empty"}
    assert plain(out) == snapshot


@pytest.mark.anyio
async def test_resolve_limit_zero_and_dice_floor() -> None:
    ctx = make_context(associations=CTX)
    out = await run_stage(
        Resolve(), {REQUEST: request(origins=("青嶺酒造",), resolve_limit=0), CONTEXT: ctx, SERVICES: services()}
    )
    assert out.values[ANCHORS].value == () and out.values[ANCHORS].ran
    out = await run_stage(
        Resolve(), {REQUEST: request(origins=("青嶺酒蔵",), dice_floor=0.9), CONTEXT: ctx, SERVICES: services()}
    )
    assert out.values[ANCHORS].value == ()


@pytest.mark.anyio
async def test_resolve_gate_refuses_a_spent_deadline() -> None:
    with pytest.raises(ApiError) as err:
        await run_stage(
            Resolve(), {REQUEST: request(origins=("x",)), CONTEXT: make_context(), SERVICES: services()}, remaining=0.0
        )
    assert err.value.code == "timeout"


@pytest.mark.anyio
async def test_a_weak_origin_takes_the_semantic_tier() -> None:
    ctx = make_context(associations=CTX)
    asked: list[tuple[str, int]] = []

    async def tier(c, cue, served, found, floor):  # type: ignore[no-untyped-def]
        asked.append((cue, len(served)))
        return [("高瀬", 0.9)] if cue == "brewmaster" else []

    svc = attrs.evolve(services(), semantic_tier=tier)
    out = await run_stage(
        Resolve(), {REQUEST: request(origins=("brewmaster", "青嶺酒造")), CONTEXT: ctx, SERVICES: svc}
    )
    assert out.values[ANCHORS].value == ("高瀬", "青嶺酒造")
    assert asked == [("brewmaster", 0), ("青嶺酒造", 1)]
