"""POST /contexts/{name}/evidence: request decoding, the stage-graph run, the package."""

from __future__ import annotations

import time
from typing import Any

import structlog

from taguru_server.pipeline import Graph, RunResult, run_graph
from taguru_server.server.call import Call
from taguru_server.server.decode import BUDGET, EVIDENCE
from taguru_server.server.reply import Reply
from taguru_server.stages.budget import omitted_summary
from taguru_server.stages.model import (
    ACTIVATE_HITS,
    ANCHORS,
    CITATIONS,
    COMMUNITY_HITS,
    CONTEXT,
    CONTRADICTION_GROUPS,
    DEDUP_DROPPED,
    PASSAGE_HITS,
    QUERY_HITS,
    REQUEST,
    RERANK_PLAN,
    SELECTION,
    SERVICES,
    TIER_WIDTH,
    EvidenceRequest,
    NoReranker,
    Services,
    gate,
)
from taguru_server.stages.wiring import evidence_graph
from taguru_server.store.errors import ApiError, no_context

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


def render_package(run: RunResult, explain: bool, serialized: bool = False) -> dict[str, Any]:
    """The EvidencePackage in wire order, from the stage values and plan entries.

    With `serialized`, items and citations are the JSON texts the budget stage measured, so
    the body is exactly what was counted and nothing is encoded twice."""
    v = run.values
    selection = v[SELECTION]
    listed, total, by_reason = omitted_summary(selection.omitted)
    plan: dict[str, Any] = {
        "lanes": {
            "resolve": v[ANCHORS].plan(),
            "query": v[QUERY_HITS].plan(),
            "activate": v[ACTIVATE_HITS].plan(),
            "passages": v[PASSAGE_HITS].plan(),
            "communities": v[COMMUNITY_HITS].plan(),
            "citations": v[CITATIONS].plan(),
        },
        "selection": {
            "dedup_dropped": v[DEDUP_DROPPED],
            "contradiction_groups": v[CONTRADICTION_GROUPS],
            "diversity_tier_width": v[TIER_WIDTH],
        },
        "reranker": v[RERANK_PLAN],
    }
    if explain:
        stages = []
        for entry in run.entries:
            row: dict[str, Any] = {"stage": entry.stage, "status": entry.status}
            if entry.reason is not None:
                row["reason"] = entry.reason
            row.update(entry.detail)
            stages.append(row)
        plan["stages"] = stages
    return {
        "items": list(selection.items_json if serialized else selection.items),
        "citations": list(selection.citations_json if serialized else selection.citations),
        "budget": selection.budget,
        "omitted": listed,
        "omitted_total": total,
        "omitted_by_reason": by_reason,
        "plan": plan,
    }


def server_timing(run: RunResult, graph: Graph) -> str:
    return ", ".join(f"{name};dur={run.durations.get(name, 0.0) * 1000:.3f}" for name in graph.plan_order)


async def evidence(call: Call) -> Any:
    request, explain = parse_request(call)
    gate(call.deadline - time.monotonic())
    assert call.name is not None
    ctx = call.registry.get(call.name)
    if ctx is None:
        raise no_context(call.name)
    services = Services(
        registry=call.registry,
        may_access=call.principal.may_access,
        reranker=call.app_state.get("reranker") or NoReranker(),
        observe_rerank=call.app_state.get("observe_rerank"),
    )
    run = await run_graph(
        GRAPH,
        {REQUEST: request, CONTEXT: ctx, SERVICES: services},
        deadline=call.deadline,
        hooks=call.app_state.get("metrics"),
    )
    if run.failure is not None:
        if isinstance(run.failure, ApiError):
            raise run.failure
        log.error("evidence.stage_failed", stage=run.failed_stage, error_type=type(run.failure).__name__)
        raise ApiError(
            "internal", f"evidence assembly failed in stage '{run.failed_stage}'; the server log has details"
        )
    package = render_package(run, explain, serialized=True)
    ctx.meta.record_read(not package["items"])
    return Reply(package, {"Server-Timing": server_timing(run, GRAPH)})
