"""POST /contexts/{name}/evidence: request decoding, the stage-graph run, the package."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from taguru_server.pipeline import Graph, RunResult, run_graph
from taguru_server.server.call import Call
from taguru_server.server.logging import note_request
from taguru_server.server.metrics import Metrics
from taguru_server.server.offload import decode_body
from taguru_server.server.reply import Reply
from taguru_server.server.semantic import passage_vector_query, semantic_tier
from taguru_server.server.state import (
    EMBEDDER_KEY,
    METRICS_KEY,
    RERANK_OBSERVER_KEY,
    RERANKER_KEY,
    passage_lane_enabled,
)
from taguru_server.server.tracing import TRACING_KEY
from taguru_server.server.wire.specs import BUDGET, EVIDENCE
from taguru_server.stages.lanes import ACTIVATE_HITS, ANCHORS, PASSAGE_HITS, QUERY_HITS
from taguru_server.stages.model import (
    CONTEXT,
    REQUEST,
    SERVICES,
    EvidenceRequest,
    NoReranker,
    Reranker,
    Services,
    gate,
)
from taguru_server.stages.package import render_package, server_timing
from taguru_server.stages.wiring import evidence_graph
from taguru_server.store.errors import ApiError, Code, no_context
from taguru_server.store.model.context import CONCEPT

if TYPE_CHECKING:
    from taguru_server.server.otel import Tracing

log = structlog.get_logger("taguru.evidence")

GRAPH: Graph = evidence_graph()


def parse_request(call: Call) -> tuple[EvidenceRequest, bool]:
    """Decode the body with the published EvidenceRequest spec; returns the request and whether `explain` was asked."""
    args = EVIDENCE.read(call.headers.get("Content-Type"), call.body)
    budget = args["budget"] or BUDGET.decode_at({}, ())
    rerank = args["rerank"]
    query = args["text_fallback_query"]
    request = EvidenceRequest(
        origins=tuple(args["origins"]),
        labels=tuple(args["labels"]),
        dice_floor=args["dice_floor"],
        semantic_floor=args["semantic_floor"],
        resolve_limit=args["resolve_limit"],
        activate_decay=args["activate_decay"],
        activate_limit=args["activate_limit"],
        query=query if query is not None else "; ".join(args["origins"]),
        search_limit=args["search_limit"],
        include_communities=args["include_communities"],
        max_items=budget["max_items"],
        max_bytes=budget["max_bytes"],
        max_tokens=budget["max_tokens"],
        rerank_requested=rerank is not None,
        rerank_model=None if rerank is None else rerank["model"],
    )
    return request, args["explain"]


def stage_summary(durations: Any, entries: Any) -> dict[str, Any]:
    """The `request.finished` fields of an evidence run: every stage's ms, the slowest, the total, failures."""
    stage_ms = {name: round(seconds * 1000, 3) for name, seconds in durations.items()}
    slowest = max(stage_ms, key=lambda name: stage_ms[name]) if stage_ms else None
    summary: dict[str, Any] = {
        "stages_ms": stage_ms,
        "stages_total_ms": round(sum(stage_ms.values()), 3),
        "slowest_stage": slowest,
    }
    failed = [e.stage for e in entries if e.status == "failed"]
    if failed:
        summary["failed_stages"] = failed
    return summary


def count_evidence_searches(metrics: Metrics, values: Mapping[Any, Any], origins: int) -> None:
    """An evidence run's searches in `taguru_searches_total`: `resolve` once per origin (an origin whose
    anchor another origin already gave counts as empty: the stage keeps anchors, not origins), and
    `query`, `activate` and `search_passages` once each when the lane ran."""
    anchors = values.get(ANCHORS)
    if anchors is not None and anchors.ran:
        hits = min(len(anchors.value), origins)
        for found in range(origins):
            metrics.searched("resolve", found >= hits)
    for op, key in (("query", QUERY_HITS), ("activate", ACTIVATE_HITS), ("search_passages", PASSAGE_HITS)):
        lane = values.get(key)
        if lane is not None and lane.ran:
            metrics.searched(op, not lane.value)


async def evidence(call: Call) -> Any:
    # a multi-megabyte body takes hundreds of ms to decode; the loop keeps serving meanwhile
    request, explain = await decode_body(call.body, lambda: parse_request(call))
    tracing = call.app_state.get(TRACING_KEY)
    if tracing is None:
        package, run = await assemble(call, request, explain)
        return Reply(package, {"Server-Timing": server_timing(run, GRAPH)})
    with tracing.evidence_span(len(request.origins), len(request.labels)) as span:
        package, run = await assemble(call, request, explain, tracing)
        span.set_attribute("taguru.anchor.count", len(run.output(ANCHORS).value))
        span.set_attribute("taguru.association.count", len(run.output(QUERY_HITS).value))
        span.set_attribute("taguru.citation.returned", len(package["citations"]))
    return Reply(package, {"Server-Timing": server_timing(run, GRAPH)})


async def assemble(
    call: Call, request: EvidenceRequest, explain: bool, tracing: Tracing | None = None
) -> tuple[dict[str, Any], RunResult]:
    """Run the stage graph for one decoded request (one span per stage when tracing); the package and the run."""
    gate(call.deadline - time.monotonic())
    assert call.name is not None
    ctx = call.registry.get(call.name)
    if ctx is None:
        raise no_context(call.name)
    configured: Reranker | None = call.app_state.get(RERANKER_KEY)
    if configured is not None and tracing is not None:
        configured = tracing.reranker(configured)
    embedder = call.app_state.get(EMBEDDER_KEY)
    passages_on = passage_lane_enabled(call.app_state)

    async def vector_query(c: Any, text: str, floor: float | None) -> Any:
        floors = (floor, c.meta.semantic_floor, call.settings.semantic_floor)
        return await passage_vector_query(embedder, passages_on, text, floors, call.deadline)

    async def tier(c: Any, cue: str, served: list[Any], found: list[Any], floor: float | None) -> Any:
        floors = (floor, c.meta.semantic_floor, call.settings.semantic_floor)
        return await semantic_tier(embedder, c, CONCEPT, cue, served, found, floors, call.deadline)

    services = Services(
        registry=call.registry,
        may_access=call.principal.may_access,
        reranker=configured if configured is not None else NoReranker(),
        observe_rerank=call.app_state.get(RERANK_OBSERVER_KEY),
        vector_query=vector_query if embedder is not None else None,
        semantic_tier=tier if embedder is not None else None,
    )
    run = await run_graph(
        GRAPH,
        {REQUEST: request, CONTEXT: ctx, SERVICES: services},
        deadline=call.deadline,
        hooks=call.app_state.get(METRICS_KEY),
        spans=None
        if tracing is None
        else tracing.stage_spans(request.search_limit, getattr(configured, "model", None)),
    )
    note_request(**stage_summary(run.durations, run.entries))
    if run.failure is not None:
        if isinstance(run.failure, ApiError):
            raise run.failure
        log.error("evidence.stage_failed", stage=run.failed_stage, error_type=type(run.failure).__name__)
        raise ApiError(
            Code.INTERNAL, f"evidence assembly failed in stage '{run.failed_stage}'; the server log has details"
        )
    package = render_package(run, explain, serialized=True)
    ctx.meta.record_read(not package["items"])
    metrics = call.app_state.get(METRICS_KEY)
    if metrics is not None:
        count_evidence_searches(metrics, run.values, len(request.origins))
    return package, run
