"""The rerank stage: the decision sequence; reorder only, never membership."""

from __future__ import annotations

import attrs
import pytest
from stage_support import cand, fused, plain, request, run_stage, services

from taguru_server.stages.model import REORDERED, REQUEST, RERANK_PLAN, SERVICES, SURVIVORS, RerankVerdict
from taguru_server.stages.rerank import Rerank

POOL = tuple(
    fused(cand("passage", f"t\x00{i}.md\x000", "passage_bm25", i + 1, text=f"text {i}"), i + 1) for i in range(3)
)


@attrs.frozen
class Stub:
    configured: bool = True
    model: str | None = "stub"
    permutation: tuple[int, ...] | None = (2, 1, 0)
    reason: str | None = None

    async def rerank(self, query, documents, remaining):
        assert documents == ["text 0", "text 1", "text 2"]
        return RerankVerdict(self.permutation, self.reason)


def _values(reranker, **req):
    svc = attrs.evolve(services(), reranker=reranker)
    return {REQUEST: request(origins=("q",), **req), SERVICES: svc, SURVIVORS: POOL}


@pytest.mark.anyio
async def test_rerank_not_requested_not_configured(snapshot) -> None:
    out = await run_stage(Rerank(), {REQUEST: request(origins=("q",)), SERVICES: services(), SURVIVORS: POOL})
    assert out.values[REORDERED] == POOL and out.values[RERANK_PLAN] == {"configured": False, "ran": False}
    asked = await run_stage(
        Rerank(), {REQUEST: request(origins=("q",), rerank_requested=True), SERVICES: services(), SURVIVORS: POOL}
    )
    assert asked.values[RERANK_PLAN] == {"configured": False, "ran": False, "reason": "not_configured"}
    assert plain([out, asked]) == snapshot


@pytest.mark.anyio
async def test_rerank_applies_a_permutation() -> None:
    out = await run_stage(Rerank(), _values(Stub(), rerank_requested=True))
    assert [f.fused_rank for f in out.values[REORDERED]] == [3, 2, 1]
    assert out.values[RERANK_PLAN] == {"configured": True, "ran": True, "model": "stub"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("stub", "req", "reason"),
    [
        (Stub(), {"rerank_model": "other"}, "model_mismatch"),
        (Stub(permutation=(0, 0, 1)), {}, "invalid_permutation"),
        (Stub(permutation=(0, 1)), {}, "invalid_permutation"),
        (Stub(permutation=None, reason="timeout"), {}, "timeout"),
    ],
)
async def test_rerank_degrades_keep_the_order(stub, req, reason) -> None:
    out = await run_stage(Rerank(), _values(stub, rerank_requested=True, **req))
    assert out.values[REORDERED] == POOL
    assert out.values[RERANK_PLAN] == {"configured": True, "ran": False, "reason": reason}
    assert sorted(f.fused_rank for f in out.values[REORDERED]) == [1, 2, 3]


@pytest.mark.anyio
async def test_rerank_small_pool_is_empty_pool() -> None:
    values = _values(Stub(), rerank_requested=True)
    values[SURVIVORS] = POOL[:1]
    out = await run_stage(Rerank(), values)
    assert out.values[RERANK_PLAN]["reason"] == "empty_pool"
