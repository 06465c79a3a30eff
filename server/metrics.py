"""Per-app Prometheus collectors and their text rendering."""

from __future__ import annotations

import re

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

    def stage_finished(self, stage: str, status: str, reason: str | None, seconds: float) -> None:
        """Record one evidence stage's duration and outcome."""
        self.stage_duration.labels(stage).observe(seconds)
        self.stage_outcomes.labels(stage, status, reason or "").inc()


_INTEGRAL_LE = re.compile(rb'le="(\d+)\.0"')


def render_metrics(registry: CollectorRegistry) -> bytes:
    """Prometheus text with integral bucket bounds written as the reference writes them (`1`, not `1.0`)."""
    return _INTEGRAL_LE.sub(rb'le="\1"', generate_latest(registry))
