"""The rerank stage: an optional provider may only permute the survivors (§7.2, §9.2)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import (
    REORDERED,
    REQUEST,
    RERANK_PLAN,
    SERVICES,
    SURVIVORS,
    EvidenceRequest,
    Fused,
    Reranker,
)

# Time kept back from the provider so the stages after it finish inside the request deadline.
POST_RERANK_RESERVE_SECS = 0.05


def is_permutation(order: tuple[int, ...] | None, n: int) -> bool:
    return order is not None and len(order) == n and sorted(order) == list(range(n))


async def decide(
    request: EvidenceRequest, reranker: Reranker, survivors: tuple[Fused, ...], remaining: Any
) -> tuple[tuple[Fused, ...], dict[str, Any]]:
    """Apply the decision sequence; any degrade keeps the deterministic order."""
    if not request.rerank_requested:
        return survivors, {"configured": reranker.configured, "ran": False}
    if not reranker.configured:
        return survivors, {"configured": False, "ran": False, "reason": "not_configured"}
    if request.rerank_model is not None and request.rerank_model != reranker.model:
        return survivors, {"configured": True, "ran": False, "reason": "model_mismatch"}
    if len(survivors) < 2:
        return survivors, {"configured": True, "ran": False, "reason": "empty_pool"}
    documents = [f.candidate.text for f in survivors]
    verdict = await reranker.rerank(request.query, documents, remaining)
    if verdict.reason is not None:
        return survivors, {"configured": True, "ran": False, "reason": verdict.reason}
    if not is_permutation(verdict.permutation, len(survivors)):
        return survivors, {"configured": True, "ran": False, "reason": "invalid_permutation"}
    assert verdict.permutation is not None
    return tuple(survivors[i] for i in verdict.permutation), {"configured": True, "ran": True, "model": reranker.model}


@attrs.frozen
class Rerank:
    """Let a configured reranker reorder (never add, drop or edit) the surviving candidates."""

    name: ClassVar[str] = "rerank"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, SERVICES, SURVIVORS)
    provides: ClassVar[tuple[Key[Any], ...]] = (REORDERED, RERANK_PLAN)

    async def run(self, ctx: StageContext) -> Outcome:
        survivors = ctx[SURVIVORS]
        request, services = ctx[REQUEST], ctx[SERVICES]
        started = ctx.clock()

        def remaining() -> float | None:
            left = ctx.remaining()
            return None if left is None else left - POST_RERANK_RESERVE_SECS

        order, plan = await decide(request, services.reranker, survivors, remaining)
        if request.rerank_requested and services.observe_rerank is not None:
            services.observe_rerank("ok" if plan["ran"] else plan["reason"], ctx.clock() - started)
        values = {REORDERED: order, RERANK_PLAN: plan}
        if plan["ran"]:
            return Outcome.ran(values, detail={"in": len(survivors)})
        reason = plan.get("reason")
        if reason is None:
            return Outcome.skipped("not_requested", values)
        if reason == "not_configured":
            return Outcome.skipped(reason, values)
        return Outcome.degraded(reason, values, detail={"in": len(survivors)})
