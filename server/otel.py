"""OpenTelemetry spans (docs/operations.md, "Tracing"): the provider from the OTEL_* variables, and the span helpers.

Imported only when tracing is on (server/tracing.py decides), so a server without an OTLP
endpoint never loads the SDK. Attribute values are counts, closed tokens and route templates:
never query, cue, passage or citation text, names of contexts, concepts or sources.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from taguru_server.pipeline import Outcome
from taguru_server.server.errors import STATUS_OF_CODE
from taguru_server.server.version import VERSION
from taguru_server.stages.model import RerankVerdict
from taguru_server.store.read.passages import LANE_TRACE, PassageHit, PassageSearch
from taguru_server.store.read.vector_lane import FusedHit, LaneState

TRACER_NAME = "taguru"
DEFAULT_SERVICE = "taguru"

# The reference's phase spans, by the evidence stage that does the phase's work; every
# other stage is `taguru.stage.<name>`. Each stage span also carries `taguru.stage` = its name.
PHASE_SPANS: Mapping[str, str] = {
    "resolve": "taguru.resolve",
    "query": "taguru.query",
    "activate": "taguru.activate",
    "passages": "taguru.passages",
    "communities": "taguru.communities",
    "cite": "taguru.citations",
}
PHASE_OPS: Mapping[str, str] = {
    "resolve": "resolve",
    "query": "query",
    "activate": "activate",
    "passages": "search_passages",
    "communities": "search_communities",
}
# a stage's plan counts under the reference's attribute names, where one corresponds
PHASE_COUNTS: Mapping[str, Mapping[str, str]] = {
    "resolve": {"in": "taguru.origin.count", "out": "taguru.anchor.count"},
    "query": {"out": "taguru.association.count"},
    "activate": {"out": "taguru.activation.count"},
    "passages": {"out": "taguru.passage.hit_count"},
    "communities": {"out": "taguru.passage.hit_count"},
    "cite": {"out": "taguru.citation.returned"},
}
EVENTS: Mapping[str, str] = {"skipped": "taguru.skip", "degraded": "taguru.degrade"}

# HTTP statuses (of a routed call, or of an error code) as the closed `taguru.error.kind` values
STATUS_KINDS: Mapping[int, str] = {
    400: "invalid_argument",
    401: "unauthorized",
    403: "unauthorized",
    404: "not_found",
    408: "deadline_exceeded",
    413: "result_too_large",
    422: "invalid_argument",
    502: "provider_error",
}

# the vector lane's state codes as the `taguru.degrade` reasons of a search whose vector lane did not run
DEGRADES: Mapping[str, str] = {
    "off": "vector_off",
    "query_embedding_failed": "vector_query_embedding_failed",
    "no_vectors": "vector_no_vectors",
    "model_changed": "vector_model_changed",
    "width_changed": "vector_width_changed",
}

_AMZN = re.compile(r"Root=1-([0-9a-f]{8})-([0-9a-f]{24});Parent=([0-9a-f]{16});Sampled=([01])")


def make_provider() -> TracerProvider:
    """OTLP/HTTP export through the batch processor; endpoint, headers, sampler, resource and batch
    schedule come from the standard OTEL_* variables. `service.name` is `taguru` unless set."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create({SERVICE_VERSION: VERSION})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _amzn_parent(header: str | None) -> otel_context.Context | None:
    """`X-Amzn-Trace-Id: Root=1-<8hex>-<24hex>;Parent=<16hex>;Sampled=0|1` as a remote parent."""
    found = _AMZN.search(header or "")
    if found is None:
        return None
    flags = TraceFlags(TraceFlags.SAMPLED if found.group(4) == "1" else TraceFlags.DEFAULT)
    parent = SpanContext(
        int(found.group(1) + found.group(2), 16), int(found.group(3), 16), is_remote=True, trace_flags=flags
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def inbound(headers: Mapping[str, str]) -> otel_context.Context:
    """The caller's context: W3C `traceparent`/`tracestate` (OTEL_PROPAGATORS), else `X-Amzn-Trace-Id`."""
    ctx = propagate.extract(headers)
    if trace.get_current_span(ctx).get_span_context().is_valid:
        return ctx
    return _amzn_parent(headers.get("X-Amzn-Trace-Id")) or ctx


class Tracing:
    """The app's tracer and the provider behind it (shut down with the app when the app made it)."""

    def __init__(self, provider: Any, owned: bool) -> None:
        self.provider = provider
        self.owned = owned
        self.tracer = provider.get_tracer(TRACER_NAME, VERSION)

    def shutdown(self) -> None:
        """Flush what is batched and stop the exporter (blocking: call it off the event loop)."""
        if self.owned:
            self.provider.shutdown()

    @contextmanager
    def server_span(self, method: str, headers: Mapping[str, str]) -> Iterator[Any]:
        """The SERVER span of one HTTP request, parented by the caller's trace context; named when routed."""
        with self.tracer.start_as_current_span(
            method,
            context=inbound(headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

    @staticmethod
    def log_ids(span: Any) -> dict[str, str]:
        """The span's `trace_id` and `span_id` as OpenTelemetry prints them (32 and 16 hex digits), for
        log lines; empty for an invalid span context."""
        ctx = span.get_span_context()
        if not ctx.is_valid:
            return {}
        return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}

    @staticmethod
    def finish_server_span(span: Any, method: str, route: str | None, status: int) -> None:
        if route is not None:
            span.update_name(f"{method} {route}")
            span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))

    @contextmanager
    def evidence_span(self, origins: int, labels: int) -> Iterator[Any]:
        """`taguru.assemble_evidence`, the parent of one span per pipeline stage."""
        with self.tracer.start_as_current_span(
            "taguru.assemble_evidence",
            attributes={
                "taguru.operation": "assemble_evidence",
                "taguru.origin.count": origins,
                "taguru.label.count": labels,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

    def stage_spans(self, limit: int | None = None, rerank_model: str | None = None) -> StageSpans:
        """The executor's span hook for one evidence run (`limit`: the request's search limit;
        `rerank_model`: the configured reranker's, for the spans of reranks that never reach it)."""
        return StageSpans(self.tracer, limit, rerank_model)

    def reranker(self, inner: Any) -> TracedReranker:
        """`inner` with a CLIENT span `taguru.rerank` around each provider call."""
        return TracedReranker(inner, self.tracer)

    @contextmanager
    def tool_span(self, transport: str, tool: str | None, meta: Any, server: bool = False) -> Iterator[Any]:
        """`mcp.tools/call <tool>`: parented by `params._meta.traceparent` when given (a SERVER span
        then, as it always is on the bridge), else by the current span. An unknown tool name is the
        caller's text: not recorded."""
        carrier = {k: v for k, v in meta.items() if isinstance(v, str)} if isinstance(meta, dict) else {}
        remote = "traceparent" in carrier
        attributes = {"taguru.transport": transport}
        if tool is not None:
            attributes["taguru.tool"] = tool
        with self.tracer.start_as_current_span(
            f"mcp.tools/call {tool}" if tool is not None else "mcp.tools/call",
            context=propagate.extract(carrier) if remote else None,
            kind=SpanKind.SERVER if remote or server else SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

    @contextmanager
    def lanes(self) -> Iterator[None]:
        """For one request: every passage search's lanes become spans under the span current then
        (the evidence `taguru.passages` and `taguru.communities`, or the communities search's server span)."""
        token = LANE_TRACE.set(LaneSpans(self.tracer, root=False))
        try:
            yield
        finally:
            LANE_TRACE.reset(token)

    @contextmanager
    def passage_search(self, limit: int, targets: int | None = None) -> Iterator[Any]:
        """`taguru.passage_search`: one direct search (its lanes' outcome on it), or the whole fan-out of a
        cross search over `targets` contexts (each then a `passage_search_target`)."""
        attributes: dict[str, Any] = {"taguru.op": "search_passages", "taguru.limit": limit}
        if targets is not None:
            attributes["taguru.context.count"] = targets
        with self._searching("taguru.passage_search", attributes, root=targets is None) as span:
            yield span

    @contextmanager
    def passage_search_target(self, index: int) -> Iterator[Any]:
        """`taguru.passage_search.target`: one target of a cross search, by its position (never its name)."""
        with self._searching("taguru.passage_search.target", {"taguru.target.index": index}, root=True) as span:
            yield span

    @contextmanager
    def _searching(self, name: str, attributes: dict[str, Any], root: bool) -> Iterator[Any]:
        with self.tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            token = LANE_TRACE.set(LaneSpans(self.tracer, root=root))
            try:
                yield span
            finally:
                LANE_TRACE.reset(token)

    @contextmanager
    def embed_span(self, model: str, inputs: int, purpose: str) -> Iterator[Any]:
        """`taguru.embed` (CLIENT): one embedding-provider call, retries inside; ERROR when it failed.
        Under the current span, or a root span for a background refresh."""
        attributes = {"taguru.embed.model": model, "taguru.embed.inputs": inputs, "taguru.embed.purpose": purpose}
        with self.tracer.start_as_current_span(
            "taguru.embed",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except Exception:
                span.set_status(Status(StatusCode.ERROR))
                raise

    @contextmanager
    def internal_span(self, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        """An INTERNAL span under the current one (the composed `retrieve` and its steps)."""
        with self.tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            yield span

    @staticmethod
    def mark_error(span: Any) -> None:
        """A span whose operation failed."""
        span.set_status(Status(StatusCode.ERROR))

    @staticmethod
    def tool_result(span: Any, status: int | None, size: int) -> None:
        """A tool call's answer on its span: the result's bytes, the error kind of a failed call (status UNSET)."""
        span.set_attribute("taguru.result.bytes", size)
        if status is None:
            span.set_attribute("taguru.error.kind", "transport")
        elif status >= 400:
            span.set_attribute("taguru.error.kind", STATUS_KINDS.get(status, "upstream_error"))

    @staticmethod
    def outbound_headers() -> dict[str, str]:
        """The current context as W3C headers, for a call this process makes."""
        headers: dict[str, str] = {}
        propagate.inject(headers)
        return headers


class LaneSpans:
    """The passage lanes of a search as INTERNAL spans under the current span; with `root`, the search's
    outcome on the current span too (`taguru.passage_search` or `.target`): lanes, vector outcome,
    floor, hit counts by lane, filter counts, and the skip or degrade event."""

    def __init__(self, tracer: Any, root: bool) -> None:
        self.tracer = tracer
        self.root = root

    def lane(self, name: str, started_ns: int, ended_ns: int, counts: dict[str, int | bool]) -> None:
        self.tracer.start_span(name, start_time=started_ns, attributes=counts).end(end_time=ended_ns)

    def event(self, name: str, reason: str) -> None:
        trace.get_current_span().add_event(name, {"taguru.reason": reason})

    def outcome(self, found: PassageSearch, state: LaneState | None, hits: list[PassageHit | FusedHit]) -> None:
        if not self.root:
            return
        span = trace.get_current_span()
        if found.eligible_sources is not None:
            span.set_attribute("taguru.filter.eligible", found.eligible_sources)
            span.set_attribute("taguru.filter.total", found.total_sources or 0)
        span.set_attribute("taguru.passage.hit_count", len(hits))
        if found.skipped is not None:
            span.set_attribute("taguru.search.lanes", found.skipped.token)
            span.add_event("taguru.skip", {"taguru.reason": found.skipped.token})
            return
        span.set_attribute("taguru.search.lanes", "ran")
        if state is not None:
            span.set_attribute("taguru.search.vector.outcome", state.code)
            if state.ran and state.floor is not None:
                span.set_attribute("taguru.search.floor", state.floor)
            elif state.code in DEGRADES:
                span.add_event("taguru.degrade", {"taguru.reason": DEGRADES[state.code]})
        by_lane = {"bm25_only": 0, "both_lanes": 0, "vector_only": 0}
        for hit in hits:
            if isinstance(hit, FusedHit) and hit.vector is not None:
                by_lane["both_lanes" if hit.bm25 is not None else "vector_only"] += 1
            else:
                by_lane["bm25_only"] += 1
        span.set_attribute("taguru.passage.bm25_only", by_lane["bm25_only"])
        span.set_attribute("taguru.passage.both_lanes", by_lane["both_lanes"])
        span.set_attribute("taguru.passage.vector_only", by_lane["vector_only"])


class TracedReranker:
    """A configured reranker whose provider calls are CLIENT spans `taguru.rerank` (model, candidates,
    outcome: `ok` or the verdict's reason token)."""

    def __init__(self, inner: Any, tracer: Any) -> None:
        self.inner = inner
        self.tracer = tracer
        self.configured = inner.configured
        self.model = inner.model

    async def rerank(self, query: str, documents: list[str], remaining: Callable[[], float | None]) -> RerankVerdict:
        attributes: dict[str, Any] = {"taguru.rerank.candidates": len(documents)}
        if self.model is not None:
            attributes["taguru.rerank.model"] = self.model
        with self.tracer.start_as_current_span(
            "taguru.rerank", kind=SpanKind.CLIENT, attributes=attributes, record_exception=False
        ) as span:
            verdict: RerankVerdict = await self.inner.rerank(query, documents, remaining)
            span.set_attribute("taguru.rerank.outcome", verdict.reason or "ok")
            return verdict


# reranks requested but decided before any provider is asked: each is a zero-length `taguru.rerank`
SHORT_CIRCUITS = frozenset({"not_configured", "model_mismatch", "empty_pool"})


class StageSpans:
    """One INTERNAL span per pipeline stage under the current span (the executor's `spans` hook)."""

    __slots__ = ("tracer", "limit", "anchors", "rerank_model")

    def __init__(self, tracer: Any, limit: int | None = None, rerank_model: str | None = None) -> None:
        self.tracer = tracer
        self.limit = limit
        self.anchors: int | None = None  # resolve's answer, for the query and activate spans
        self.rerank_model = rerank_model

    def start(self, stage: str) -> Any:
        attributes: dict[str, Any] = {"taguru.stage": stage}
        op = PHASE_OPS.get(stage)
        if op is not None:
            attributes["taguru.op"] = op
        if stage in ("passages", "communities") and self.limit is not None:
            attributes["taguru.limit"] = self.limit
        elif stage in ("query", "activate") and self.anchors is not None:
            attributes["taguru.anchor.count"] = self.anchors
        span = self.tracer.start_span(PHASE_SPANS.get(stage, f"taguru.stage.{stage}"), attributes=attributes)
        return span, otel_context.attach(trace.set_span_in_context(span))

    def end(self, handle: Any, stage: str, outcome: Outcome | None) -> None:
        span, token = handle
        otel_context.detach(token)
        if outcome is None:  # cancelled mid-stage (the request's deadline)
            span.set_attribute("taguru.error.kind", "cancelled")
            span.end()
            return
        if stage == "resolve":
            self.anchors = int(outcome.detail.get("out", 0))
        span.set_attribute("taguru.stage.status", outcome.status)
        if outcome.reason is not None:
            span.set_attribute("taguru.stage.reason", outcome.reason)
        names = PHASE_COUNTS.get(stage, {})
        for key, value in outcome.detail.items():
            span.set_attribute(names.get(key, f"taguru.stage.{key}"), int(value))
        event = EVENTS.get(outcome.status)
        if event is not None and outcome.reason is not None:
            span.add_event(event, {"taguru.reason": outcome.reason})
        if stage == "rerank" and outcome.reason in SHORT_CIRCUITS:
            self._short_circuit(span, outcome)
        if outcome.status == "failed":
            status = STATUS_OF_CODE.get(outcome.reason or "", 500)
            span.set_attribute("taguru.error.kind", STATUS_KINDS.get(status, "upstream_error"))
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _short_circuit(self, stage_span: Any, outcome: Outcome) -> None:
        """The zero-length CLIENT span `taguru.rerank` of a requested rerank the stage decided itself."""
        attributes: dict[str, Any] = {"taguru.rerank.outcome": str(outcome.reason)}
        if outcome.reason != "not_configured" and self.rerank_model is not None:
            attributes["taguru.rerank.model"] = self.rerank_model
        if "in" in outcome.detail:
            attributes["taguru.rerank.candidates"] = int(outcome.detail["in"])
        now = time.time_ns()
        parent = trace.set_span_in_context(stage_span)
        span = self.tracer.start_span(
            "taguru.rerank", context=parent, kind=SpanKind.CLIENT, attributes=attributes, start_time=now
        )
        span.end(end_time=now)
