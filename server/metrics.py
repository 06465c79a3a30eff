"""Per-app Prometheus collectors and their text rendering."""

from __future__ import annotations

import re
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class Metrics:
    """Per-app Prometheus collectors."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "taguru_http_requests", "HTTP requests served", ["method", "route", "status"], registry=self.registry
        )
        self.duration = Histogram(
            "taguru_http_request_duration_seconds",
            "HTTP request duration",
            ["method", "route"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
            registry=self.registry,
        )
        self.stage_duration = Histogram(
            "taguru_evidence_stage_duration_seconds",
            "Evidence stage duration",
            ["stage"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
            registry=self.registry,
        )
        self.stage_outcomes = Counter(
            "taguru_evidence_stage_outcomes",
            "Evidence stage outcomes",
            ["stage", "status", "reason"],
            registry=self.registry,
        )

        self.resolves = Counter(
            "taguru_resolves", "Resolve answers by the tier that served them", ["tier"], registry=self.registry
        )
        for tier in ("lexical", "semantic", "weak_lexical", "miss"):
            self.resolves.labels(tier)
        self.lane_contributions = Counter(
            "taguru_passage_lane_contributions",
            "Served passage and community hits by the lanes that found them",
            ["lane"],
            registry=self.registry,
        )
        for lane in ("bm25_only", "both_lanes", "vector_only"):
            self.lane_contributions.labels(lane)
        self.width_rebuilds = Counter(
            "taguru_embedding_width_rebuilds",
            "Vector stores rebuilt because the provider's width changed",
            ["store"],
            registry=self.registry,
        )
        for store in ("gloss", "passages"):
            self.width_rebuilds.labels(store)
        self.searches = Counter(
            "taguru_searches",
            "Searches served, by operation and whether they found anything",
            ["op", "outcome"],
            registry=self.registry,
        )

    def resolved(self, served: list[dict[str, Any]]) -> None:
        """Count one resolve answer: semantic if any served candidate is, else lexical / weak_lexical / miss."""
        if any(c.get("tier") == "semantic" for c in served):
            tier = "semantic"
        elif served and served[0]["score"] >= 0.5:
            tier = "lexical"
        else:
            tier = "weak_lexical" if served else "miss"
        self.resolves.labels(tier).inc()

    def searched(self, op: str, empty: bool) -> None:
        """Count one search answer of an operation: `empty` when it found nothing."""
        self.searches.labels(op, "empty" if empty else "hit").inc()

    def hits_served(self, hits: list[dict[str, Any]]) -> None:
        """Count served passage (or community) hits by the lanes whose evidence they carry."""
        for hit in hits:
            lanes = hit.get("lanes") or {}
            if "vector" in lanes:
                lane = "both_lanes" if "bm25" in lanes else "vector_only"
            else:
                lane = "bm25_only"
            self.lane_contributions.labels(lane).inc()

    def stage_finished(self, stage: str, status: str, reason: str | None, seconds: float) -> None:
        """Record one evidence stage's duration and outcome."""
        self.stage_duration.labels(stage).observe(seconds)
        self.stage_outcomes.labels(stage, status, reason or "").inc()


_INTEGRAL_LE = re.compile(rb'le="(\d+)\.0"')


def render_metrics(registry: CollectorRegistry) -> bytes:
    """Prometheus text with integral bucket bounds written as the reference writes them (`1`, not `1.0`)."""
    return _INTEGRAL_LE.sub(rb'le="\1"', generate_latest(registry))
