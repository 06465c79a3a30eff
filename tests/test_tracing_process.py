"""Process level: a real `taguru serve` exports its spans over OTLP/HTTP to a receiver, and flushes them on SIGTERM."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from aiohttp import ClientSession, web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from process_support import Server, free_port

pytestmark = pytest.mark.slow

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


class Receiver:
    """A minimal OTLP/HTTP trace receiver: POST /v1/traces (protobuf), spans kept by the test."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []

    async def traces(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        message = ExportTraceServiceRequest()
        message.ParseFromString(raw)
        for batch in message.resource_spans:
            self.resources.append({a.key: a.value.string_value for a in batch.resource.attributes})
            for scope in batch.scope_spans:
                for span in scope.spans:
                    attributes = {}
                    for a in span.attributes:
                        kind = a.value.WhichOneof("value")
                        attributes[a.key] = getattr(a.value, kind) if kind else None
                    self.spans.append(
                        {
                            "name": span.name,
                            "scope": scope.scope.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "kind": span.kind,
                            "attributes": attributes,
                        }
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )


async def post(session: ClientSession, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    async with session.post(
        url, data=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})}
    ) as r:
        assert r.status == 200, await r.text()
        return (await r.json())["result"]


async def wait_for(receiver: Receiver, name: str, trace_id: str, secs: float = 15.0) -> None:
    deadline = time.monotonic() + secs
    while not any(s["name"] == name and s["trace_id"] == trace_id for s in receiver.spans):
        assert time.monotonic() < deadline, f"no {name} span arrived"
        await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_evidence_spans_reach_an_otlp_receiver(tmp_path: Path) -> None:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
    }
    server = await anyio.to_thread.run_sync(lambda: Server(tmp_path / "data", tmp_path / "server.log", **env))
    try:
        async with ClientSession() as session:
            async with session.put(server.url + "/contexts/t", json={"description": "traced"}) as r:
                assert r.status == 200
            await post(
                session,
                server.url + "/contexts/t/associations",
                [{"subject": "kura", "label": "toji", "object": "takase", "weight": 1.0}],
            )
            result = await post(
                session,
                server.url + "/contexts/t/evidence",
                {"origins": ["kura"], "labels": ["toji"], "explain": True},
                {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
            )
            await wait_for(receiver, "taguru.assemble_evidence", TRACE_ID)
            # a second request right before SIGTERM: its spans arrive with the shutdown flush
            second = "1" * 32
            await post(
                session,
                server.url + "/contexts/t/evidence",
                {"origins": ["kura"]},
                {"traceparent": f"00-{second}-{PARENT_ID}-01"},
            )
        await anyio.to_thread.run_sync(server.stop)
        assert server.proc.returncode == 0
        await wait_for(receiver, "taguru.assemble_evidence", second, secs=5.0)
    finally:
        await anyio.to_thread.run_sync(server.stop)
        await runner.cleanup()

    spans = [s for s in receiver.spans if s["trace_id"] == TRACE_ID]
    by_name = {s["name"]: s for s in spans}
    root = by_name["POST /contexts/{name}/evidence"]
    assert root["parent"] == PARENT_ID and root["kind"] == 2  # SPAN_KIND_SERVER
    assert root["attributes"]["http.route"] == "/contexts/{name}/evidence"
    assert root["attributes"]["http.response.status_code"] == 200
    assemble = by_name["taguru.assemble_evidence"]
    assert assemble["parent"] == root["span_id"] and assemble["scope"] == "taguru"
    stages = [s for s in spans if s["parent"] == assemble["span_id"]]
    assert sorted(s["attributes"]["taguru.stage"] for s in stages) == sorted(
        e["stage"] for e in result["plan"]["stages"]
    )
    for entry in result["plan"]["stages"]:
        span = next(s for s in stages if s["attributes"]["taguru.stage"] == entry["stage"])
        assert span["attributes"]["taguru.stage.status"] == entry["status"]
        assert span["attributes"].get("taguru.stage.reason") == entry.get("reason")
    assert {"taguru.resolve", "taguru.query", "taguru.activate", "taguru.passages", "taguru.citations"} <= set(by_name)
    resource = receiver.resources[0]
    assert resource["service.name"] == "taguru" and resource["deployment.environment"] == "test"
    # no user text in any exported attribute
    assert not any(word in json.dumps(receiver.spans) for word in ("kura", "toji", "takase", '"t"'))


@pytest.mark.anyio
async def test_stdio_bridge_carries_the_callers_trace_to_the_server(tmp_path: Path) -> None:
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters
    from process_support import PYTHON, ROOT

    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    server = await anyio.to_thread.run_sync(lambda: Server(tmp_path / "data", tmp_path / "server.log", **otel))
    try:
        async with ClientSession() as session:
            async with session.put(server.url + "/contexts/t", json={"description": "traced"}) as r:
                assert r.status == 200
        params = StdioServerParameters(
            command=PYTHON,
            args=["-m", "taguru_server.cli", "mcp"],
            env={"TAGURU_URL": server.url, "PYTHONPATH": str(ROOT), **otel},
            cwd=str(ROOT),
        )
        async with Client(params) as client:
            result = await client.call_tool(
                "assemble_evidence",
                {"context": "t", "origins": ["kura"]},
                meta={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
            )
            assert not result.is_error
        # the bridge flushed its span when its stdin closed; the server's arrive on schedule
        await wait_for(receiver, "taguru.assemble_evidence", TRACE_ID)
        await wait_for(receiver, "mcp.tools/call assemble_evidence", TRACE_ID)
    finally:
        await anyio.to_thread.run_sync(server.stop)
        await runner.cleanup()
    spans = [s for s in receiver.spans if s["trace_id"] == TRACE_ID]
    bridge = next(s for s in spans if s["attributes"].get("taguru.transport") == "stdio_mcp")
    assert bridge["parent"] == PARENT_ID and bridge["kind"] == 2  # SERVER
    assert bridge["name"] == "mcp.tools/call assemble_evidence"
    http = next(s for s in spans if s["name"] == "POST /mcp")
    assert http["parent"] == bridge["span_id"]
    tool = next(s for s in spans if s["attributes"].get("taguru.transport") == "http_mcp")
    assert tool["parent"] == http["span_id"]
    assemble = next(s for s in spans if s["name"] == "taguru.assemble_evidence")
    assert assemble["parent"] == tool["span_id"]
    assert {r["service.name"] for r in receiver.resources} == {"taguru"}
