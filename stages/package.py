"""The EvidencePackage body and the Server-Timing value, rendered from a finished run's declared outputs."""

from __future__ import annotations

from typing import Any

from taguru_server.pipeline import Graph, Key, RunResult
from taguru_server.stages.lanes import ANCHORS, GRAPH_LANE_KEYS, LANE_KEYS, LANES, Lane
from taguru_server.stages.model import (
    CONTRADICTION_GROUPS,
    DEDUP_DROPPED,
    RERANK_PLAN,
    SELECTION,
    TIER_WIDTH,
    Omission,
    OriginAnchor,
)

MAX_LISTED_OMISSIONS = 20

# What render_package reads: the evidence graph declares exactly these as its outputs.
OUTPUTS: tuple[Key[Any], ...] = (*LANE_KEYS, DEDUP_DROPPED, CONTRADICTION_GROUPS, TIER_WIDTH, RERANK_PLAN, SELECTION)
# The graph-passages mode's graph declares its registry's lane keys instead.
GRAPH_OUTPUTS: tuple[Key[Any], ...] = (
    *GRAPH_LANE_KEYS,
    DEDUP_DROPPED,
    CONTRADICTION_GROUPS,
    TIER_WIDTH,
    RERANK_PLAN,
    SELECTION,
)


def omitted_summary(omitted: tuple[Omission, ...]) -> tuple[list[dict[str, Any]], int, dict[str, int]]:
    """The listed omissions (first 20), the true total, and counts per reason (keys sorted)."""
    counts: dict[str, int] = {}
    for o in omitted:
        counts[o.reason] = counts.get(o.reason, 0) + 1
    return [o.to_wire() for o in omitted[:MAX_LISTED_OMISSIONS]], len(omitted), dict(sorted(counts.items()))


def anchors_out(detail: tuple[OriginAnchor, ...] | None) -> list[dict[str, Any]]:
    """`plan.anchors`: per origin in request order, the anchor it resolved to (name, tier, score), or null."""
    out: list[dict[str, Any]] = []
    for found in detail or ():
        anchor = None
        if found.name is not None:
            anchor = {"name": found.name, "tier": found.tier, "score": found.score}
        out.append({"origin": found.origin, "anchor": anchor})
    return out


def render_package(
    run: RunResult, explain: bool, serialized: bool = False, lanes: tuple[Lane, ...] = LANES
) -> dict[str, Any]:
    """The EvidencePackage in wire order, from the graph's outputs and plan entries.

    With `serialized`, items and citations are the JSON texts the budget stage measured, so
    the body is exactly what was counted and nothing is encoded twice. `lanes` is the registry
    of the graph that ran (the graph-passages mode's has one lane more). With `explain`, the plan
    also names each origin's anchor (`plan.anchors`) and every stage (`plan.stages`)."""
    selection = run.output(SELECTION)
    listed, total, by_reason = omitted_summary(selection.omitted)
    plan: dict[str, Any] = {
        "lanes": {lane.plan_name: run.output(lane.key).plan() for lane in lanes},
        "selection": {
            "dedup_dropped": run.output(DEDUP_DROPPED),
            "contradiction_groups": run.output(CONTRADICTION_GROUPS),
            "diversity_tier_width": run.output(TIER_WIDTH),
        },
        "reranker": run.output(RERANK_PLAN),
    }
    if explain:
        plan["anchors"] = anchors_out(run.output(ANCHORS).detail)
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
    """Every stage's duration in plan order, as a Server-Timing header value."""
    return ", ".join(f"{name};dur={run.durations.get(name, 0.0) * 1000:.3f}" for name in graph.plan_order)
