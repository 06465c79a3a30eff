"""OpenTelemetry spans: the server span, the evidence span tree, MCP tool calls, privacy, and off by default."""

from __future__ import annotations

import json
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from test_evidence_endpoint import KURA, seed_sake

from taguru_server.server.app import build_app
from taguru_server.server.tracing import TRACING_KEY, wanted
from taguru_server.stages.wiring import STAGES

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
PHASES = {
    "resolve": "taguru.resolve",
    "query": "taguru.query",
    "activate": "taguru.activate",
    "passages": "taguru.passages",
    "communities": "taguru.communities",
    "cite": "taguru.citations",
}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def traced(settings_factory, exporter) -> AsyncIterator[Client]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = TestServer(build_app(settings_factory(), tracer_provider=provider))
    await server.start_server()
    session = ClientSession()
    try:
        yield Client(session, str(server.make_url("")).rstrip("/"))
    finally:
        await session.close()
        await server.close()


async def post_traced(client: Client, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    async with client.session.post(
        client.base + path, data=json.dumps(body), headers={"Content-Type": "application/json", **headers}
    ) as resp:
        return resp.status, await resp.json()


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def children(spans: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def check_tree(spans: tuple[ReadableSpan, ...], stages: list[dict[str, Any]]) -> ReadableSpan:
    """The evidence span tree under the request's server span; returns the server span."""
    named = by_name(spans)
    server = named["POST /contexts/{name}/evidence"]
    assert server.kind == SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None and format(server.parent.span_id, "016x") == PARENT_ID
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/contexts/{name}/evidence"
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.response.status_code"] == 200
    assemble = named["taguru.assemble_evidence"]
    assert assemble.parent is not None and assemble.parent.span_id == server.context.span_id
    under = children(spans, assemble)
    assert sorted(str(s.attributes["taguru.stage"]) for s in under if s.attributes) == sorted(
        s["stage"] for s in stages
    )
    for stage in stages:
        span = next(s for s in under if s.attributes and s.attributes["taguru.stage"] == stage["stage"])
        assert span.name == PHASES.get(stage["stage"], f"taguru.stage.{stage['stage']}")
        assert span.attributes is not None
        assert span.attributes["taguru.stage.status"] == stage["status"]
        assert span.attributes.get("taguru.stage.reason") == stage.get("reason")
    return server


@pytest.mark.anyio
async def test_evidence_span_tree_under_the_callers_trace(traced: Client, exporter: InMemorySpanExporter) -> None:
    await seed_sake(traced)
    exporter.clear()
    status, body = await post_traced(
        traced,
        "/contexts/sake/evidence",
        {"origins": ["青嶺酒造"], "explain": True},
        {"traceparent": TRACEPARENT},
    )
    assert status == 200
    stages = body["result"]["plan"]["stages"]
    assert len(stages) == len(STAGES)
    spans = exporter.get_finished_spans()
    check_tree(spans, stages)
    named = by_name(spans)
    assemble = named["taguru.assemble_evidence"].attributes
    assert assemble is not None
    assert assemble["taguru.operation"] == "assemble_evidence"
    assert assemble["taguru.origin.count"] == 1 and assemble["taguru.label.count"] == 0
    assert assemble["taguru.citation.returned"] == len(body["result"]["citations"])
    resolve = named["taguru.resolve"].attributes
    assert resolve is not None and resolve["taguru.op"] == "resolve" and resolve["taguru.origin.count"] == 1
    skipped = named["taguru.query"]
    assert [(e.name, dict(e.attributes or {})) for e in skipped.events] == [
        ("taguru.skip", {"taguru.reason": "labels_absent"})
    ]
    # privacy: no query, origin, passage, context or source text in any attribute or event
    dumped = repr([(s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]) for s in spans])
    for secret in ("青嶺酒造", KURA[:8], "sake", "docs/kura.md", "高瀬"):
        assert secret not in dumped
    assert all(s.status.status_code == StatusCode.UNSET for s in spans)


@pytest.mark.anyio
async def test_unmatched_and_failed_requests(traced: Client, exporter: InMemorySpanExporter) -> None:
    status, _b, _h = await traced.call("GET", "/nowhere/at/all")
    assert status == 404
    status, _b, _h = await traced.call("POST", "/contexts/absent/evidence", {"origins": ["x"]})
    assert status == 404
    spans = exporter.get_finished_spans()
    assert spans[0].name == "GET" and spans[0].attributes is not None
    assert "http.route" not in spans[0].attributes and spans[0].parent is None
    assert spans[0].attributes["http.response.status_code"] == 404
    assemble = by_name(spans)["taguru.assemble_evidence"]
    assert assemble.status.status_code == StatusCode.UNSET
    assert "absent" not in repr([dict(s.attributes or {}) for s in spans])


@pytest.mark.anyio
async def test_mcp_tool_call_spans(traced: Client, exporter: InMemorySpanExporter) -> None:
    await seed_sake(traced)
    exporter.clear()
    meta_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "assemble_evidence",
            "arguments": {"context": "sake", "origins": ["青嶺酒造"]},
            "_meta": {"traceparent": meta_parent},
        },
    }
    status, body = await post_traced(traced, "/mcp", call, {"traceparent": TRACEPARENT})
    assert status == 200 and not body["result"].get("isError"), body
    named = by_name(exporter.get_finished_spans())
    tool = named["mcp.tools/call assemble_evidence"]
    assert tool.kind == SpanKind.SERVER and tool.attributes is not None
    assert tool.attributes["taguru.transport"] == "http_mcp" and tool.attributes["taguru.tool"] == "assemble_evidence"
    assert format(tool.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert tool.attributes["taguru.result.bytes"] > 0
    assemble = named["taguru.assemble_evidence"]
    assert assemble.parent is not None and assemble.parent.span_id == tool.context.span_id
    assert format(named["POST /mcp"].context.trace_id, "032x") == TRACE_ID


def finished_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "request.finished"]


@pytest.mark.anyio
async def test_request_line_carries_the_server_spans_ids(traced: Client, exporter: InMemorySpanExporter) -> None:
    """The one `request.finished` line names the SERVER span (hex, as OpenTelemetry prints ids)."""
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        async with traced.session.get(traced.base + "/contexts", headers={"traceparent": TRACEPARENT}) as resp:
            assert resp.status == 200
        status, _b, _h = await traced.call("GET", "/nowhere/at/all")
        assert status == 404
    server = by_name(exporter.get_finished_spans())["GET /contexts"]
    first, unmatched = finished_lines(logs)
    assert first["trace_id"] == TRACE_ID
    assert first["span_id"] == format(server.context.span_id, "016x") != PARENT_ID
    assert first["route"] == "/contexts" and first["request_id"]
    # a request without a caller's context gets a fresh trace, still named on its line
    assert len(unmatched["trace_id"]) == 32 and unmatched["trace_id"] != TRACE_ID
    assert len(unmatched["span_id"]) == 16


@pytest.mark.anyio
async def test_request_line_without_tracing_has_no_ids(client: Client) -> None:
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        status, _b, _h = await client.call("GET", "/contexts")
    assert status == 200
    (line,) = finished_lines(logs)
    assert line["request_id"] and "trace_id" not in line and "span_id" not in line


@pytest.mark.anyio
async def test_off_by_default(settings_factory, monkeypatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    app = build_app(settings_factory())
    assert TRACING_KEY not in app
    assert not wanted({"OTEL_SERVICE_NAME": "x"})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert not wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})


class FakeClient:
    """Stands in for the bridge's HTTP client: records the headers, answers with a canned /mcp reply."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.headers: list[dict[str, str] | None] = []

    async def send(self, method: str, target: str, message: Any, *, headers: Any = None, timeout: float = 0) -> Any:
        self.headers.append(dict(headers) if headers is not None else None)
        return types.SimpleNamespace(status=200, body=self.body)


@pytest.mark.anyio
async def test_stdio_bridge_tool_span_and_propagation(exporter: InMemorySpanExporter) -> None:
    from taguru_server.server.config import BridgeSettings
    from taguru_server.server.mcp.stdio import Forwarder
    from taguru_server.server.otel import Tracing

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ok = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{}"}]}}'
    meta = {"traceparent": TRACEPARENT, "tracestate": "k=v"}

    plain = FakeClient(ok)
    await Forwarder(BridgeSettings(), plain).call_tool("assemble_evidence", {"origins": ["x"]}, meta)  # type: ignore[arg-type]
    assert plain.headers == [meta]  # tracing off: the caller's context goes on as it came
    assert exporter.get_finished_spans() == ()

    traced = FakeClient(ok)
    forwarder = Forwarder(BridgeSettings(), traced, Tracing(provider, owned=False))  # type: ignore[arg-type]
    await forwarder.call_tool("assemble_evidence", {"origins": ["secret words"]}, meta)
    (span,) = exporter.get_finished_spans()
    assert span.name == "mcp.tools/call assemble_evidence" and span.kind == SpanKind.SERVER
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID
    assert dict(span.attributes or {}) == {
        "taguru.transport": "stdio_mcp",
        "taguru.tool": "assemble_evidence",
        "taguru.result.bytes": len(ok),
    }
    sent = traced.headers[0] or {}
    assert sent["traceparent"] == f"00-{TRACE_ID}-{format(span.context.span_id, '016x')}-01"

    exporter.clear()
    refused = b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"HTTP 403: {}"}],"isError":true}}'
    forwarder.client = FakeClient(refused)  # type: ignore[assignment]
    await forwarder.call_tool("no such tool", {}, None)
    (span,) = exporter.get_finished_spans()
    assert span.name == "mcp.tools/call" and span.parent is None
    assert dict(span.attributes or {})["taguru.error.kind"] == "unauthorized"
    assert span.status.status_code == StatusCode.UNSET


@pytest.mark.anyio
async def test_rerank_client_span_and_lane_attributes(settings_factory, exporter: InMemorySpanExporter) -> None:
    from fake_reranker import FakeReranker

    from taguru_server.server.providers.reranker import RerankSettings

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    fake = TestServer(FakeReranker("reverse").app())
    await fake.start_server()
    rerank = RerankSettings(str(fake.make_url("/rerank")), "stub-reranker", None, 5)
    server = TestServer(build_app(settings_factory(), rerank=rerank, tracer_provider=provider))
    await server.start_server()
    session = ClientSession()
    client = Client(session, str(server.make_url("")).rstrip("/"))
    try:
        await seed_sake(client)
        exporter.clear()
        body = {"origins": ["青嶺酒造"], "labels": ["杜氏"], "search_limit": 7, "rerank": {"model": "stub-reranker"}}
        status, _b = await post_traced(client, "/contexts/sake/evidence", body, {})
        assert status == 200
    finally:
        await session.close()
        await server.close()
        await fake.close()
    named = by_name(exporter.get_finished_spans())
    rerank_span = named["taguru.rerank"]
    stage = named["taguru.stage.rerank"]
    assert rerank_span.kind == SpanKind.CLIENT
    assert rerank_span.parent is not None and rerank_span.parent.span_id == stage.context.span_id
    assert dict(rerank_span.attributes or {}) == {
        "taguru.rerank.model": "stub-reranker",
        "taguru.rerank.candidates": dict(stage.attributes or {})["taguru.stage.in"],
        "taguru.rerank.outcome": "ok",
    }
    passages = dict(named["taguru.passages"].attributes or {})
    assert passages["taguru.op"] == "search_passages" and passages["taguru.limit"] == 7
    query = dict(named["taguru.query"].attributes or {})
    assert query["taguru.anchor.count"] == 1 and query["taguru.association.count"] >= 1


@pytest.mark.anyio
async def test_a_failed_stage_is_the_only_error_span(
    traced: Client, exporter: InMemorySpanExporter, monkeypatch
) -> None:
    from test_evidence_endpoint import Exploding

    import taguru_server.server.evidence as evidence_module
    from taguru_server.pipeline import Graph
    from taguru_server.stages.model import INPUTS

    await seed_sake(traced)
    monkeypatch.setattr(
        evidence_module, "GRAPH", Graph([Exploding() if s.name == "fuse" else s for s in STAGES], INPUTS)
    )
    exporter.clear()
    status, _b, _h = await traced.call("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]})
    assert status == 500
    spans = exporter.get_finished_spans()
    errors = {s.name for s in spans if s.status.status_code == StatusCode.ERROR}
    assert errors == {"taguru.stage.fuse", "POST /contexts/{name}/evidence"}
    named = by_name(spans)
    assert dict(named["taguru.stage.fuse"].attributes or {})["taguru.error.kind"] == "upstream_error"
    assert dict(named["taguru.stage.budget"].attributes or {})["taguru.stage.reason"] == "upstream_failed"
    assert "secret internal detail" not in repr([(dict(s.attributes or {}), s.events) for s in spans])


def test_inbound_context_w3c_then_amazon() -> None:
    from opentelemetry import trace

    from taguru_server.server.otel import inbound

    def parent(headers: dict[str, str]) -> tuple[str, str, bool]:
        ctx = trace.get_current_span(inbound(headers)).get_span_context()
        return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), ctx.trace_flags.sampled

    amzn = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    assert parent({"traceparent": TRACEPARENT, "X-Amzn-Trace-Id": amzn}) == (TRACE_ID, PARENT_ID, True)
    assert parent({"X-Amzn-Trace-Id": amzn}) == ("5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8", True)
    assert not trace.get_current_span(inbound({"X-Amzn-Trace-Id": "Root=nonsense"})).get_span_context().is_valid


def test_missing_sdk_is_one_warning_and_no_tracing(monkeypatch) -> None:
    import sys

    import structlog

    from taguru_server.server.tracing import tracing_for

    monkeypatch.setitem(sys.modules, "taguru_server.server.otel", None)
    with structlog.testing.capture_logs() as logs:
        assert tracing_for({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) is None
    assert [e["event"] for e in logs] == ["tracing.unavailable"]
