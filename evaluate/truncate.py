"""Baseline truncation under a budget (docs/evaluate.md, "How it works"): each hit is measured as the server measures an
evidence item, with the server's own accounting functions (stages.accounting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taguru_server.stages.accounting import cost, overhead, tokens
from taguru_server.store.wire import F32


@dataclass(frozen=True)
class Limits:
    max_items: int
    max_bytes: int
    max_tokens: int

    def as_dict(self) -> dict[str, int]:
        return {"max_items": self.max_items, "max_bytes": self.max_bytes, "max_tokens": self.max_tokens}


def _lane_evidence(v: Any) -> dict[str, Any]:
    return {"rank": v["rank"], "score": F32(v["score"])}


def envelope(context: str, i: int, hit: dict[str, Any]) -> dict[str, Any]:
    """The evidence item a passage hit at rank `i` (1-based) would be, in wire key order."""
    lanes = hit.get("lanes") or {}
    wire_lanes: dict[str, Any] = {}
    if "bm25" in lanes:
        wire_lanes["bm25"] = _lane_evidence(lanes["bm25"])
    if "vector" in lanes:
        wire_lanes["vector"] = _lane_evidence(lanes["vector"])
    if "bm25" in lanes and "vector" in lanes:
        lane = "passage_fused"
    elif "vector" in lanes:
        lane = "passage_vector"
    else:
        lane = "passage_bm25"
    source, paragraph = hit["source"], hit["paragraph"]
    return {
        "candidate_id": f"passage\u0000{context}\u0000{source}\u0000{paragraph}",
        "kind": "passage",
        "fused_rank": i,
        "lane_ranks": [{"lane": lane, "rank": i}],
        "citation_refs": [],
        "passage": {
            "source": source,
            "paragraph": paragraph,
            "score": F32(hit.get("score", 0.0)),
            "text": hit.get("text", ""),
            "lanes": wire_lanes,
        },
    }


def measure(context: str, i: int, hit: dict[str, Any]) -> tuple[int, int]:
    """(bytes, quarters) of the hit's evidence-item envelope."""
    return cost(envelope(context, i, hit))


def truncate(context: str, hits: list[dict[str, Any]], limits: Limits) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Greedy skip-not-stop admission of hits in server order; returns (admitted hits, case budget)."""
    admitted: list[dict[str, Any]] = []
    sum_bytes = sum_quarters = 0
    omitted = 0
    for i, hit in enumerate(hits, start=1):
        b, q = measure(context, i, hit)
        n = len(admitted) + 1
        total_bytes = overhead(n) + sum_bytes + b + overhead(0)
        total_quarters = overhead(n) + sum_quarters + q + overhead(0)
        if n <= limits.max_items and total_bytes <= limits.max_bytes and tokens(total_quarters) <= limits.max_tokens:
            admitted.append(hit)
            sum_bytes += b
            sum_quarters += q
        else:
            omitted += 1
    n = len(admitted)
    budget = {
        "items_used": n,
        "bytes_used": overhead(n) + sum_bytes + overhead(0),
        "tokens_used": tokens(overhead(n) + sum_quarters + overhead(0)),
        "limits": limits.as_dict(),
        "omitted_total": omitted,
    }
    return admitted, budget
