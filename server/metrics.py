"""Per-app Prometheus collectors and their text rendering."""

from __future__ import annotations

import platform
import re
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from taguru_server.server.version import VERSION

# The reference's bounds for the families it specifies (docs/operations.md, "Metrics").
SPEC_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
# Evidence stages mostly take 0.02-0.35 ms: their own family starts at 10 µs, then the reference's bounds.
STAGE_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, *SPEC_BUCKETS)


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
            buckets=SPEC_BUCKETS,
            registry=self.registry,
        )
        self.stage_duration = Histogram(
            "taguru_evidence_stage_duration_seconds",
            "Evidence stage duration",
            ["stage"],
            buckets=STAGE_BUCKETS,
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
        self.schema_checks = Counter(
            "taguru_schema_checks",
            "Schema checks that gated a real write, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in ("ok", "warned", "refused"):
            self.schema_checks.labels(outcome)
        self.schema_violations: dict[str, int] = {}  # context → violations its counted checks found, since boot
        self.retrieval_cache = Counter(
            "taguru_retrieval_cache",
            "Retrieval cache consultations, by operation and outcome",
            ["op", "outcome"],
            registry=self.registry,
        )
        for op in ("recall", "query", "search_passages", "search_communities"):
            for outcome in ("hit", "miss"):
                self.retrieval_cache.labels(op, outcome)
        self.semantic_cache = Counter(
            "taguru_semantic_cache",
            "Paraphrase-tier probes of passage search, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in ("hit", "stale", "guarded", "miss"):
            self.semantic_cache.labels(outcome)
        self.semantic_cache_entries = Gauge(
            "taguru_semantic_cache_entries", "Claims in this process's paraphrase tier", registry=self.registry
        )
        self.retrieval_cache_entries = Gauge(
            "taguru_retrieval_cache_entries", "Entries in this process's retrieval cache", registry=self.registry
        )
        self.retrieval_cache_bytes = Gauge(
            "taguru_retrieval_cache_bytes", "Bytes this process's retrieval cache accounts for", registry=self.registry
        )
        self.storage_quota_refusals = Counter(
            "taguru_storage_quota_refusals", "Growth writes refused at a storage quota (507)", registry=self.registry
        )
        self.auto_compactions = Counter(
            "taguru_auto_compactions", "Background compactions, by outcome", ["outcome"], registry=self.registry
        )
        for outcome in ("ok", "failed"):
            self.auto_compactions.labels(outcome)
        self.auto_compact_reclaimed = Counter(
            "taguru_auto_compact_reclaimed_bytes",
            "Store bytes background compactions gave back",
            registry=self.registry,
        )
        self.auto_compact_last_success = Gauge(
            "taguru_auto_compact_last_success_timestamp_seconds",
            "When a background compaction last succeeded (0: none since boot)",
            registry=self.registry,
        )
        build = Gauge("taguru_build_info", "The running build (value 1)", ["version", "python"], registry=self.registry)
        build.labels(VERSION, platform.python_version()).set(1)
        self.inflight = Gauge("taguru_inflight_requests", "Requests in flight (holding a slot)", registry=self.registry)
        self.contexts_loaded = Gauge(
            "taguru_contexts_loaded", "Contexts held in memory by this process", registry=self.registry
        )
        self.ready = Gauge(
            "taguru_ready",
            "1 once the contexts to preload are in memory (GET /ready answers 200)",
            registry=self.registry,
        )
        # the standard process (memory, CPU, open files), platform and garbage-collector families;
        # each worker process of `serve --workers N` reports its own
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(standard)

    def watch(
        self, inflight: Callable[[], float], contexts_loaded: Callable[[], float], ready: Callable[[], float]
    ) -> None:
        """Read the in-flight, loaded-context and readiness gauges from the app's state when scraped."""
        self.inflight.set_function(inflight)
        self.contexts_loaded.set_function(contexts_loaded)
        self.ready.set_function(ready)

    def resolved(self, served: list[dict[str, Any]]) -> None:
        """Count one resolve answer: semantic if any served candidate is, else lexical / weak_lexical / miss."""
        self.resolves.labels(resolve_tier(served)).inc()

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

    def schema_checked(self, context: str, outcome: str, violations: int) -> None:
        """Count one schema check that gated a real write, and the violations it found."""
        self.schema_checks.labels(outcome).inc()
        self.schema_violations[context] = self.schema_violations.get(context, 0) + violations

    def stage_finished(self, stage: str, status: str, reason: str | None, seconds: float) -> None:
        """Record one evidence stage's duration and outcome."""
        self.stage_duration.labels(stage).observe(seconds)
        self.stage_outcomes.labels(stage, status, reason or "").inc()


def resolve_tier(served: list[dict[str, Any]]) -> str:
    """The tier of a resolve answer: semantic if any served candidate is, else lexical / weak_lexical / miss."""
    if any(c.get("tier") == "semantic" for c in served):
        return "semantic"
    if served and served[0]["score"] >= 0.5:
        return "lexical"
    return "weak_lexical" if served else "miss"


_INTEGRAL_LE = re.compile(rb'le="(\d+)\.0"')


def render_metrics(registry: CollectorRegistry) -> bytes:
    """Prometheus text with integral bucket bounds written as the reference writes them (`1`, not `1.0`)."""
    return _INTEGRAL_LE.sub(rb'le="\1"', generate_latest(registry))


DISK_FILES = ("image", "passages", "passages_wal", "sidecars", "wal")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def disk_rows(sizes: dict[str, dict[str, int]]) -> list[str]:
    """`taguru_context_disk_bytes{context, file}`: five rows per context, from the sizes kept for the quotas."""
    lines = [
        "# HELP taguru_context_disk_bytes A context's bytes in the store, by part",
        "# TYPE taguru_context_disk_bytes gauge",
    ]
    for name in sorted(sizes):
        parts = sizes[name]
        for file in DISK_FILES:
            lines.append(f'taguru_context_disk_bytes{{context="{_label(name)}",file="{file}"}} {parts.get(file, 0)}.0')
    return lines


def context_rows(metrics: Metrics, contexts: list[str], sizes: dict[str, dict[str, int]] | None = None) -> bytes:
    """The per-context families (`TAGURU_METRICS_PER_CONTEXT`): one row per selected context, zeros included."""
    lines = [] if sizes is None else disk_rows({name: sizes.get(name, {}) for name in contexts})
    lines += [
        "# HELP taguru_context_schema_violations_total Schema violations found by the checks that gated real writes",
        "# TYPE taguru_context_schema_violations_total counter",
    ]
    for name in contexts:
        label = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        count = metrics.schema_violations.get(name, 0)
        lines.append(f'taguru_context_schema_violations_total{{context="{label}"}} {count}.0')
    return ("\n".join(lines) + "\n").encode("utf-8")
