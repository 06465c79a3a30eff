"""The rerank stage: an optional provider may only permute the survivors (docs/evidence.md, "Using a reranker")."""

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
POST_RERANK_RESERVE_SECS = 0.15


def is_permutation(order: tuple[int, ...] | None, n: int) -> bool:
    return order is not None and len(order) == n and sorted(order) == list(range(n))


@attrs.frozen
class RerankDecision:
    """What the rerank stage decided: whether a provider is configured, ran, and why not (or which model)."""

    configured: bool
    ran: bool = False
    reason: str | None = None
    model: str | None = None

    def plan(self) -> dict[str, Any]:
        """The package's `plan.reranker` entry."""
        out: dict[str, Any] = {"configured": self.configured, "ran": self.ran}
        if self.ran:
            out["model"] = self.model
        elif self.reason is not None:
            out["reason"] = self.reason
        return out


async def decide(
    request: EvidenceRequest, reranker: Reranker, survivors: tuple[Fused, ...], remaining: Any
) -> tuple[tuple[Fused, ...], RerankDecision]:
    """Apply the decision sequence; any degrade keeps the deterministic order."""
    if not request.rerank_requested:
        return survivors, RerankDecision(reranker.configured)
    if not reranker.configured:
        return survivors, RerankDecision(False, reason="not_configured")
    if request.rerank_model is not None and request.rerank_model != reranker.model:
        return survivors, RerankDecision(True, reason="model_mismatch")
    if len(survivors) < 2:
        return survivors, RerankDecision(True, reason="empty_pool")
    documents = [f.candidate.text for f in survivors]
    verdict = await reranker.rerank(request.query, documents, remaining)
    if verdict.reason is not None:
        return survivors, RerankDecision(True, reason=verdict.reason)
    if verdict.permutation is None or not is_permutation(verdict.permutation, len(survivors)):
        return survivors, RerankDecision(True, reason="invalid_permutation")
    return tuple(survivors[i] for i in verdict.permutation), RerankDecision(True, ran=True, model=reranker.model)


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

        order, decision = await decide(request, services.reranker, survivors, remaining)
        if request.rerank_requested and services.observe_rerank is not None:
            services.observe_rerank("ok" if decision.ran else str(decision.reason), ctx.clock() - started)
        values: dict[Key[Any], Any] = {REORDERED: order, RERANK_PLAN: decision.plan()}
        if decision.ran:
            return Outcome.ran(values, detail={"in": len(survivors)})
        reason = decision.reason
        if reason is None:
            return Outcome.skipped("not_requested", values)
        if reason == "not_configured":
            return Outcome.skipped(reason, values)
        return Outcome.degraded(reason, values, detail={"in": len(survivors)})
