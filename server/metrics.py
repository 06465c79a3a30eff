"""Per-app Prometheus collectors and their text rendering.

One process (the in-process test servers, `taguru serve` with one worker) keeps its values in the
app's own registry, as it always did. With `serve --workers N` the supervisor gives its workers one
private directory (`PROMETHEUS_MULTIPROC_DIR`, server/metrics_shared.py): every worker writes its
values to memory-mapped files there, and a scrape of any worker reads all of them, so one scrape
shows the whole server (counters and histograms summed over every worker that ever ran, gauges
aggregated by the rule each declares).
"""

from __future__ import annotations

import asyncio
import contextvars
import platform
import re
import weakref
from collections.abc import Callable, Generator
from typing import Any, Literal

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

# the reference's search operations (`taguru_searches_total{op}`) and its error kinds (`taguru_errors_total{kind}`)
SEARCH_OPS = (
    "resolve",
    "resolve_label",
    "recall",
    "query",
    "activate",
    "search_passages",
    "search_communities",
    "explore",
    "paths",
)
ERROR_KINDS = ("io", "load", "panic", "wal_refused")
VIOLATIONS_FAMILY = "taguru_shared_schema_violations"  # kept in the workers' files only, never rendered
# how a gauge aggregates over the live workers of `serve --workers N`
Aggregate = Literal["livesum", "livemin", "livemax"]

# the cause of the current request's failure, when a handler knows it (a list: shared with the tasks it starts)
_ERROR_NOTE: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("error_note", default=None)


def start_error_note() -> list[str]:
    """A fresh failure note for the current request (the metrics middleware reads it when it ends)."""
    note: list[str] = []
    _ERROR_NOTE.set(note)
    return note


def note_error(kind: str) -> None:
    """Say why the current request is failing (an ERROR_KINDS member), for `taguru_errors_total`."""
    note = _ERROR_NOTE.get()
    if note is not None:
        note.append(kind)


def error_kind(status: int, note: list[str]) -> str | None:
    """The `taguru_errors_total` kind of a finished request: the noted cause (a refused durable write
    counts as `wal_refused` although it answers 503), else `panic` for any other 500; None when not counted."""
    if note and (status == 500 or (note[-1] == "wal_refused" and status == 503)):
        return note[-1]
    return "panic" if status == 500 else None


class Metrics:
    """Per-app Prometheus collectors."""

    def __init__(self, shared_dir: str | None = None) -> None:
        self.shared_dir = shared_dir  # the workers' metric files, or None: this process's values alone
        self.registry = CollectorRegistry()
        self.refreshers: list[Callable[[], None]] = []  # the gauges read from app state, for the shared files
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
        for op in SEARCH_OPS:
            for outcome in ("hit", "empty"):
                self.searches.labels(op, outcome)
        self.errors = Counter(
            "taguru_errors",
            "Requests answered 500 (and refused durable writes), by cause",
            ["kind"],
            registry=self.registry,
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        self.shed = Counter(
            "taguru_requests_shed",
            "Requests refused at the in-flight ceiling (TAGURU_MAX_CONCURRENT_REQUESTS)",
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
        # each worker keeps its own caches: their sizes add up over the workers
        self.retrieval_cache_entries = self._gauge(
            "taguru_retrieval_cache_entries", "Entries in the retrieval caches", "livesum"
        )
        self.retrieval_cache_bytes = self._gauge(
            "taguru_retrieval_cache_bytes", "Bytes the retrieval caches account for", "livesum"
        )
        self.semantic_cache_entries = self._gauge(
            "taguru_semantic_cache_entries", "Claims in the paraphrase tiers", "livesum"
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
        self.auto_compact_last_success = self._gauge(
            "taguru_auto_compact_last_success_timestamp_seconds",
            "When a background compaction last succeeded (0: none since boot)",
            "livemax",
        )
        # with the workers' shared files the same counts are kept there too, summed at a scrape (never
        # rendered as such: `context_rows` renders them for the contexts TAGURU_METRICS_PER_CONTEXT selects)
        self.shared_violations = (
            Counter(
                VIOLATIONS_FAMILY,
                "Schema violations by context (the per-context rows' source)",
                ["context"],
                registry=None,
            )
            if shared_dir is not None
            else None
        )
        build = Gauge(
            "taguru_build_info",
            "The running build (value 1)",
            ["version", "python"],
            registry=self.registry,
            multiprocess_mode="livemax",
        )
        build.labels(VERSION, platform.python_version()).set(1)
        self.keyring_reloads = Counter(
            "taguru_keyring_reloads", "Key reloads that applied a new table or found no change", registry=self.registry
        )
        self.keyring_reload_refusals = Counter(
            "taguru_keyring_reload_refusals",
            "Key reloads refused (the previous table stays armed)",
            registry=self.registry,
        )
        # with several workers: in-flight requests add up; readiness and the contexts in memory are the
        # least any live worker has (the server is ready when every worker is); the store's counts are one
        self.inflight = self._gauge("taguru_inflight_requests", "Requests in flight (holding a slot)", "livesum")
        self.contexts_loaded = self._gauge(
            "taguru_contexts_loaded", "Contexts held in memory by this process", "livemin"
        )
        self.ready = self._gauge(
            "taguru_ready", "1 once the contexts to preload are in memory (GET /ready answers 200)", "livemin"
        )
        self.contexts_registered = self._gauge("taguru_contexts_registered", "Contexts in the store", "livemax")
        self.groups_registered = self._gauge("taguru_groups_registered", "Context groups in the store", "livemax")
        self.contexts_resident = self._gauge(
            "taguru_contexts_resident", "Contexts held in memory (as taguru_contexts_loaded)", "livemin"
        )
        # sums over the contexts in memory (the same in every worker: the largest is shown)
        self.resident_bytes = self._gauge(
            "taguru_resident_bytes", "Estimated bytes of the contexts' own data in memory", "livemax"
        )
        self.dead_edges = self._gauge("taguru_dead_edges", "Retracted associations compaction would drop", "livemax")
        self.dead_attributions = self._gauge(
            "taguru_dead_attributions", "Unlinked attribution records compaction would drop", "livemax"
        )
        self.unsourced_edges = self._gauge(
            "taguru_unsourced_edges", "Live associations whose weight no source fully covers", "livemax"
        )
        self.unsourced_weight = self._gauge(
            "taguru_unsourced_weight", "The weight of live associations no source covers", "livemax"
        )
        if shared_dir is None:
            # the standard process (memory, CPU, open files), platform and garbage-collector families;
            # with several workers the scrape renders every worker's process families instead
            for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(standard)

    def _gauge(self, name: str, doc: str, mode: Aggregate) -> Gauge:
        """A gauge of this app, aggregated over the workers by `mode` (prometheus-client's multiprocess modes)."""
        return Gauge(name, doc, registry=self.registry, multiprocess_mode=mode)

    def watch(self, **readers: Callable[[], float]) -> None:
        """Read gauges from the app's state: each keyword names a gauge attribute (`inflight`,
        `contexts_loaded`, `ready`, ...). One process reads them when scraped; with shared files each
        worker writes them at `refresh` (every second, and just before a scrape it answers)."""
        for attribute, read in readers.items():
            gauge: Gauge = getattr(self, attribute)
            if self.shared_dir is None:
                gauge.set_function(read)
            else:
                self.refreshers.append(lambda gauge=gauge, read=read: gauge.set(read()))  # type: ignore[misc]

    def refresh(self) -> None:
        """Write the state-read gauges to this worker's shared files (nothing for one process)."""
        for refresh in self.refreshers:
            refresh()

    def failed(self, kind: str) -> None:
        """Count one request that failed for `kind` (ERROR_KINDS)."""
        self.errors.labels(kind).inc()

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
        if self.shared_violations is not None and violations:
            self.shared_violations.labels(context).inc(violations)

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


STATS_REFRESH_SECS = 30.0
"""How often the sums over the contexts in memory are brought up to date (for the contexts that changed)."""
STATS_SLICE = 20_000
"""Associations summed between two yields to the event loop (a few ms), so a large context never stalls it."""


# where the fork loader leaves a context's figures for its workers (`precompute_sums`)
SUMS_CACHE_KEY = "store_sums"


def _figures(ctx: Any) -> Generator[None, None, dict[str, float]]:
    """One context's figures, yielding between slices of STATS_SLICE associations."""
    dead = unsourced = 0
    weight = 0.0
    for start in range(0, len(ctx.edges.subject), STATS_SLICE):
        d, u, w = ctx.edge_sums(start, start + STATS_SLICE)
        dead, unsourced, weight = dead + d, unsourced + u, weight + w
        yield
    return {
        "footprint_bytes": float(ctx.footprint_bytes()),
        "dead_edges": float(dead),
        "dead_attributions": float(ctx.meta.dead_attributions),
        "unsourced_edges": float(unsourced),
        "unsourced_weight": weight,
    }


def precompute_sums(ctx: Any) -> None:
    """Compute a context's figures now, before workers are forked from this process.

    Computing them reads every association's records, and in a forked worker each read writes the
    object's reference count: the pages holding them were copied into every worker (about 150 MB of
    private memory per worker at 100k paragraphs). Computed once before the fork, the workers take them."""
    sliced = _figures(ctx)
    while True:
        try:
            next(sliced)
        except StopIteration as done:
            ctx.read_cache[SUMS_CACHE_KEY] = ((ctx.meta.rev_graph, ctx.meta.rev_passages), done.value)
            return


class ContextSums:
    """The store gauges summed over the contexts in memory: resident bytes, dead edges and attributions,
    unsourced edges and weight. A background task (`run`) recomputes a context's figures every
    STATS_REFRESH_SECS once its revisions moved, in slices of STATS_SLICE associations with the event
    loop served between them; a scrape only adds up the figures last computed."""

    FIELDS = ("footprint_bytes", "dead_edges", "dead_attributions", "unsourced_edges", "unsourced_weight")

    def __init__(self, contexts: Callable[[], list[Any]]) -> None:
        self.contexts = contexts  # the contexts in memory now
        self.seen: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], dict[str, float]]] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self) -> None:
        """Bring every changed context's figures up to date, then again every STATS_REFRESH_SECS."""
        while True:
            for ctx in self.contexts():
                await self.update(ctx)
            await asyncio.sleep(STATS_REFRESH_SECS)

    async def update(self, ctx: Any) -> None:
        """Recompute one context's figures if it changed since they were computed (or take the ones the
        fork loader computed before the workers were forked, `precompute_sums`)."""
        revision = (ctx.meta.rev_graph, ctx.meta.rev_passages)
        known = self.seen.get(ctx)
        if known is not None and known[0] == revision:
            return
        inherited = ctx.read_cache.get(SUMS_CACHE_KEY)
        if inherited is not None and inherited[0] == revision:
            self.seen[ctx] = inherited
            return
        sliced = _figures(ctx)
        while True:
            try:
                next(sliced)
            except StopIteration as done:
                self.seen[ctx] = (revision, done.value)
                return
            await asyncio.sleep(0)

    def total(self, field: str) -> float:
        """One figure summed over the contexts in memory (as last computed; 0 for one not yet computed)."""
        return sum(known[1][field] for ctx in self.contexts() if (known := self.seen.get(ctx)) is not None)


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


def context_rows(metrics: Metrics, contexts: list[str], violations: dict[str, int] | None = None) -> bytes:
    """The per-context families (`TAGURU_METRICS_PER_CONTEXT`): one row per selected context, zeros
    included; `violations` (every worker's counts) in place of this process's own when given."""
    counts = metrics.schema_violations if violations is None else violations
    lines = [
        "# HELP taguru_context_schema_violations_total Schema violations found by the checks that gated real writes",
        "# TYPE taguru_context_schema_violations_total counter",
    ]
    for name in contexts:
        label = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        count = counts.get(name, 0)
        lines.append(f'taguru_context_schema_violations_total{{context="{label}"}} {count}.0')
    return ("\n".join(lines) + "\n").encode("utf-8")
