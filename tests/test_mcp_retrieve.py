"""The composed `retrieve` tool: argument checks before any call, its five steps (each one routed tool call),
deduplication, the 404 citation skip, the passage fallback's gate, the byte budget and the result cap, the
error kinds, the result's shape over `POST /mcp`, and its `taguru.retrieve` span with one child per step."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_mcp_memory_loop import capped_client

from taguru_server.server.app import build_app
from taguru_server.server.mcp.retrieve import error_kind, run_retrieve
from taguru_server.server.mcp.tools import ToolFailure

pytestmark = pytest.mark.anyio

EDGE = {
    "subject": "Tokyo",
    "label": "capital_of",
    "object": "Japan",
    "attributions": [{"source": "doc1", "paragraph": 0}],
}


def envelope(result: Any) -> bytes:
    return json.dumps({"result": result, "status": "ok", "time": 0.0}).encode()


class Mock:
    """A `perform` that answers each tool from a table and records every call."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, name: str, args: dict[str, Any]) -> bytes:
        self.calls.append((name, args))
        answer = self.answers.get(name)
        if callable(answer):
            answer = answer(args)
        if isinstance(answer, ToolFailure):
            raise answer
        if isinstance(answer, bytes):
            return answer
        return envelope(answer)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [args for tool, args in self.calls if tool == name]


def graph(**overrides: Any) -> Mock:
    answers: dict[str, Any] = {
        "resolve": lambda a: [{"name": a["cue"]}],
        "describe": lambda a: {"concept": a["concept"]},
        "query": {"matches": [EDGE]},
        "activate": {"matches": [{"association": EDGE, "path": ["Tokyo"], "strength": 0.5}]},
        "cite_passage": {"source": "doc1", "text": "Tokyo is the capital."},
        "search_passages": {"hits": [{"source": "doc1"}], "plan": {"contexts": [{"context": "sake"}]}},
    }
    answers.update(overrides)
    return Mock(answers)


async def retrieve(perform: Mock, budget: int | None = None, **args: Any) -> dict[str, Any]:
    text = await run_retrieve({"context": "sake", **args}, perform, budget)
    out: dict[str, Any] = json.loads(text)
    assert list(out) == sorted(out)
    return out


async def refused(perform: Mock, args: dict[str, Any], budget: int | None = None) -> str:
    with pytest.raises(ToolFailure) as caught:
        await run_retrieve(args, perform, budget)
    assert caught.value.structured is None
    return caught.value.text


async def test_resolves_describes_activates_and_cites_in_one_call() -> None:
    perform = graph()
    out = await retrieve(perform, origins=["Tokyo"])
    assert out["resolved"] == {"Tokyo": [{"name": "Tokyo"}]}
    assert out["outline"] == {"Tokyo": {"concept": "Tokyo"}}
    assert out["associations"] == [EDGE] and len(out["activations"]) == 1
    assert out["citations"] == [
        {"citation": {"source": "doc1", "text": "Tokyo is the capital."}, "paragraph": 0, "source": "doc1"}
    ]
    assert out["passage_hits"] == [] and out["search_plan"] is None
    assert [name for name, _a in perform.calls] == ["resolve", "describe", "activate", "cite_passage"]
    assert perform.named("activate") == [{"context": "sake", "origins": ["Tokyo"]}]


async def test_each_distinct_cue_is_resolved_once() -> None:
    perform = graph()
    await retrieve(perform, origins=["a", "b", "a", "b"])
    assert [a["cue"] for a in perform.named("resolve")] == ["a", "b"]
    await retrieve(perform := graph(), origins="solo")
    assert [a["cue"] for a in perform.named("resolve")] == ["solo"]


async def test_associations_are_deduplicated_across_query_and_activate() -> None:
    out = await retrieve(graph(), origins=["Tokyo"], labels=["capital_of"])
    assert out["associations"] == [EDGE] and len(out["activations"]) == 1


async def test_an_association_without_a_string_triple_is_kept() -> None:
    odd = {"subject": 1, "label": "l", "object": "o"}
    out = await retrieve(graph(query={"matches": [odd, odd]}), origins=["Tokyo"], labels="l")
    assert out["associations"] == [odd, odd, EDGE]


async def test_a_404_citation_is_skipped_and_any_other_failure_ends_the_call() -> None:
    gone = graph(cite_passage=ToolFailure('HTTP 404: {"code":"no_passage"}', {"code": "no_passage"}))
    assert (await retrieve(gone, origins=["Tokyo"]))["citations"] == []
    broken = graph(cite_passage=ToolFailure("HTTP 500: internal error"))
    assert await refused(broken, {"context": "sake", "origins": ["Tokyo"]}) == "HTTP 500: internal error"


@pytest.mark.parametrize("key", ["auto_pick", "describe_first", "fetch_citations", "text_fallback_only_if_empty"])
async def test_wrong_typed_booleans_are_refused_before_any_call(key: str) -> None:
    perform = graph()
    assert await refused(perform, {"context": "sake", "origins": ["a"], key: "false"}) == (
        f"argument '{key}' must be a boolean"
    )
    assert perform.calls == []


async def test_with_auto_pick_off_the_cue_itself_is_the_anchor() -> None:
    perform = graph(resolve=[])
    out = await retrieve(perform, origins=["Tokyo"], auto_pick=False)
    assert out["resolved"] == {"Tokyo": []}
    assert perform.named("activate") == [{"context": "sake", "origins": ["Tokyo"]}]


async def test_the_text_fallback_runs_when_nothing_was_found() -> None:
    perform = graph(resolve=[])
    out = await retrieve(perform, origins=["nothing"], text_fallback_query="q")
    assert perform.named("activate") == [] and out["associations"] == []
    assert out["search_plan"]["contexts"][0]["context"] == "sake" and out["passage_hits"] == [{"source": "doc1"}]
    assert perform.named("search_passages") == [{"context": "sake", "query": "q"}]
    suppressed = graph()
    assert (await retrieve(suppressed, origins=["Tokyo"], text_fallback_query="q"))["passage_hits"] == []
    assert suppressed.named("search_passages") == []
    forced = graph()
    out = await retrieve(forced, origins=["Tokyo"], text_fallback_query="q", text_fallback_only_if_empty=False)
    assert out["passage_hits"] == [{"source": "doc1"}] and out["associations"] == [EDGE]


async def test_a_search_answer_without_hits_is_refused() -> None:
    perform = graph(resolve=[], search_passages=[{"source": "doc1"}])
    assert "without a 'hits' array" in await refused(
        perform, {"context": "sake", "origins": ["x"], "text_fallback_query": "q"}
    )


async def test_context_and_origins_are_required() -> None:
    assert await refused(graph(), {"origins": ["a"]}) == "missing required argument 'context'"
    assert await refused(graph(), {"context": 1, "origins": ["a"]}) == "argument 'context' must be a string"
    assert await refused(graph(), {"context": "sake"}) == "missing required argument 'origins'"
    assert await refused(graph(), {"context": "sake", "origins": None}) == "missing required argument 'origins'"
    assert await refused(graph(), {"context": "sake", "origins": [1]}) == (
        "argument 'origins' must be a string or an array of strings"
    )
    assert await refused(graph(), {"context": "sake", "origins": ["a"], "text_fallback_query": 3}) == (
        "argument 'text_fallback_query' must be a string"
    )


async def test_the_origins_cap_is_checked_before_the_element_types() -> None:
    perform = graph()
    text = await refused(perform, {"context": "sake", "origins": [1] * 1001})
    assert text == "argument 'origins' carries 1001 cues, past the per-request limit of 1000; split the retrieval"
    assert perform.calls == []
    at_cap = graph(resolve=[])
    await retrieve(at_cap, origins=[str(i) for i in range(1000)], fetch_citations=False)
    assert at_cap.calls[0][0] == "resolve" and len(at_cap.named("resolve")) == 1000


async def test_options_are_forwarded_to_their_calls() -> None:
    perform = graph(resolve=[])
    await retrieve(
        perform,
        origins=["Tokyo"],
        auto_pick=False,
        resolve_limit=7,
        dice_floor=0.2,
        labels=["capital_of"],
        activate_decay=0.5,
        activate_limit=9,
        text_fallback_query="q",
        text_fallback_only_if_empty=False,
        search_limit=4,
        junk=1,
    )
    assert perform.named("resolve") == [{"context": "sake", "cue": "Tokyo", "dice_floor": 0.2, "limit": 7}]
    assert perform.named("query") == [{"context": "sake", "subject": ["Tokyo"], "label": ["capital_of"]}]
    assert perform.named("activate") == [{"context": "sake", "origins": ["Tokyo"], "decay": 0.5, "limit": 9}]
    assert perform.named("search_passages") == [{"context": "sake", "query": "q", "limit": 4}]


async def test_the_budget_stops_dispatching_once_spent() -> None:
    edges = [{**EDGE, "object": f"o{i}", "attributions": [{"source": f"s{i}", "paragraph": 0}]} for i in range(3)]
    perform = graph(activate={"matches": [{"association": e} for e in edges]}, cite_passage={"text": "x" * 400})
    text = await refused(perform, {"context": "sake", "origins": ["Tokyo"]}, budget=900)
    assert "already exceeds 900 bytes" in text and "cite_passage" in text and "fewer origins" in text
    assert len(perform.named("cite_passage")) == 1
    assert "resolved" in json.loads(await run_retrieve({"context": "sake", "origins": ["Tokyo"]}, graph(), None))


async def test_a_non_json_answer_fails_the_call() -> None:
    text = await refused(graph(describe=b"not json"), {"context": "sake", "origins": ["Tokyo"]})
    assert text.startswith("tool 'describe' returned invalid JSON: ")


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("HTTP 404: {}", "not_found"),
        ("HTTP 401: {}", "unauthorized"),
        ("HTTP 403: {}", "unauthorized"),
        ("HTTP 500: x", "upstream_error"),
        ("request exceeded its budget before this operation could start", "deadline_exceeded"),
        ("tool result exceeds the MCP response cap (TAGURU_MCP_MAX_RESULT_BYTES)", "result_too_large"),
        ("retrieve's composed result already exceeds 5 bytes after", "result_too_large"),
        ("the request was cancelled", "cancelled"),
        ("missing required argument 'origins'", "invalid_argument"),
        ("argument 'origins' must be a string or an array of strings", "invalid_argument"),
        ("argument 'origins' carries 1001 cues, past the per-request limit of 1000", "invalid_argument"),
        ("failed to reach the taguru server", "transport"),
        ("could not build the outbound request: x", "transport"),
        ("tool 'resolve' returned invalid JSON: x", "provider_error"),
    ],
)
def test_error_kinds(text: str, kind: str) -> None:
    assert error_kind(text) == kind


async def mcp_call(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
    status, reply, _h = await client.call("POST", "/mcp", rpc)
    assert status == 200
    result: dict[str, Any] = reply["result"]
    return result


async def seed(client: Client) -> None:
    await client.ok("PUT", "/contexts/sake", content_type=None)
    await client.ok(
        "POST",
        "/contexts/sake/sources",
        {"passages": {"docs/kura.md": "青嶺酒造は雲居県霧沢町の蔵元である。杜氏は高瀬である。"}},
    )
    edge = {"subject": "青嶺酒造", "label": "杜氏", "object": "高瀬", "weight": 1.0, "source": "docs/kura.md"}
    await client.ok("POST", "/contexts/sake/associations", [{**edge, "paragraph": 0}])


async def test_retrieve_runs_the_composed_loop_end_to_end(client: Client) -> None:
    await seed(client)
    result = await mcp_call(client, "retrieve", {"context": "sake", "origins": ["青嶺酒造"]})
    assert "isError" not in result and "structuredContent" not in result
    out = json.loads(result["content"][0]["text"])
    assert list(out) == [
        "activations",
        "associations",
        "citations",
        "outline",
        "passage_hits",
        "resolved",
        "search_plan",
    ]
    assert len(out["associations"]) == 1 and out["associations"][0]["object"] == "高瀬"
    [citation] = out["citations"]
    assert (citation["source"], citation["paragraph"]) == ("docs/kura.md", 0)
    assert "青嶺酒造" in citation["citation"]["text"]
    assert out["passage_hits"] == [] and out["search_plan"] is None
    assert out["outline"]["青嶺酒造"]["concept"] == "青嶺酒造"
    forced = await mcp_call(
        client,
        "retrieve",
        {
            "context": "sake",
            "origins": ["青嶺酒造"],
            "text_fallback_query": "杜氏は高瀬である",
            "text_fallback_only_if_empty": False,
        },
    )
    out = json.loads(forced["content"][0]["text"])
    assert out["passage_hits"] and out["search_plan"]["contexts"][0]["context"] == "sake"
    assert out["search_plan"]["contexts"][0]["lanes"]["bm25"]["ran"] is True
    missing = await mcp_call(client, "retrieve", {"context": "nope", "origins": ["x"]})
    assert missing["isError"] is True and missing["content"][0]["text"].startswith("HTTP 404: ")
    assert "structuredContent" not in missing


async def test_retrieve_over_the_cap_is_refused_like_an_oversized_call(
    client: Client, settings_factory, tmp_path: Path
) -> None:
    edges = [{"subject": f"cue{i}", "label": "l", "object": "x" * 300, "weight": 1.0} for i in range(10)]
    args = {"context": "sake", "origins": [f"cue{i}" for i in range(10)], "fetch_citations": False}
    await client.ok("PUT", "/contexts/sake", content_type=None)
    await client.ok("POST", "/contexts/sake/associations", edges)
    assert "resolved" in (await mcp_call(client, "retrieve", args))["content"][0]["text"]
    async with capped_client(settings_factory, tmp_path, 1024) as small:
        await small.ok("PUT", "/contexts/sake", content_type=None)
        await small.ok("POST", "/contexts/sake/associations", edges)
        capped = await mcp_call(small, "retrieve", args)
    text = capped["content"][0]["text"]
    assert capped["isError"] is True and "already exceeds 1024 bytes" in text and "fewer origins" in text


async def test_retrieve_refuses_a_spent_deadline_before_any_call() -> None:
    perform = graph()
    with pytest.raises(ToolFailure) as caught:
        await run_retrieve({"context": "sake", "origins": ["a"]}, perform, None, deadline=0.0)
    assert "exceeded its budget" in caught.value.text and perform.calls == []


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


async def test_a_traced_retrieve_is_one_root_with_a_span_per_step(traced: Client, exporter) -> None:
    await seed(traced)
    exporter.clear()
    result = await mcp_call(traced, "retrieve", {"context": "sake", "origins": ["青嶺酒造"]})
    assert "isError" not in result
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root = spans["taguru.retrieve"]
    assert root.parent is not None and root.parent.span_id == spans["POST /mcp"].context.span_id
    attributes = dict(root.attributes or {})
    assert attributes["taguru.transport"] == "remote_mcp" and attributes["taguru.operation"] == "retrieve"
    assert isinstance(attributes["taguru.passage.hit_count"], int) and attributes["taguru.citation.returned"] == 1
    phases = {"taguru.resolve", "taguru.describe", "taguru.activate", "taguru.citations"}
    for name in phases:
        assert spans[name].parent is not None and spans[name].parent.span_id == root.context.span_id
    assert "taguru.query" not in spans and "taguru.passage_fallback" not in spans
    reasons = [e.attributes["taguru.reason"] for e in root.events if e.attributes]
    assert reasons == ["labels_absent", "fallback_not_requested"]
    texts = json.dumps([dict(s.attributes or {}) for s in exporter.get_finished_spans()], ensure_ascii=False)
    assert "青嶺酒造" not in texts and "docs/kura.md" not in texts
    exporter.clear()
    await mcp_call(
        traced,
        "retrieve",
        {"context": "sake", "origins": ["青嶺酒造"], "describe_first": False, "fetch_citations": False},
    )
    root = next(s for s in exporter.get_finished_spans() if s.name == "taguru.retrieve")
    reasons = [e.attributes["taguru.reason"] for e in root.events if e.attributes]
    assert reasons == ["describe_disabled", "labels_absent", "citations_disabled", "fallback_not_requested"]
    assert not any(s.name in ("taguru.describe", "taguru.citations") for s in exporter.get_finished_spans())
    exporter.clear()
    failed = await mcp_call(traced, "retrieve", {"context": "nope", "origins": ["x"]})
    assert failed["isError"] is True
    root = next(s for s in exporter.get_finished_spans() if s.name == "taguru.retrieve")
    assert (root.attributes or {})["taguru.error.kind"] == "not_found" and root.status.status_code.name == "ERROR"


async def test_the_citation_missing_event_fires_only_when_a_citation_404s(traced: Client, exporter) -> None:
    await seed(traced)
    exporter.clear()
    await mcp_call(traced, "retrieve", {"context": "sake", "origins": ["青嶺酒造"]})
    root = next(s for s in exporter.get_finished_spans() if s.name == "taguru.retrieve")
    assert "citation_passage_missing" not in [e.attributes["taguru.reason"] for e in root.events if e.attributes]
    edge = {"subject": "青嶺酒造", "label": "所在地", "object": "霧沢町", "weight": 1.0, "source": "docs/none.md"}
    await traced.ok("POST", "/contexts/sake/associations", [{**edge, "paragraph": 3}])
    exporter.clear()
    out = json.loads(
        (await mcp_call(traced, "retrieve", {"context": "sake", "origins": ["青嶺酒造"]}))["content"][0]["text"]
    )
    assert len(out["associations"]) == 2 and len(out["citations"]) == 1
    spans = {s.name: s for s in exporter.get_finished_spans()}
    events = [e for e in spans["taguru.retrieve"].events if e.attributes]
    [missing] = [e for e in events if e.attributes["taguru.reason"] == "citation_passage_missing"]
    assert missing.attributes["taguru.citation.missing"] == 1
    assert (spans["taguru.citations"].attributes or {})["taguru.citation.missing"] == 1


async def test_an_expired_deadline_emits_the_before_start_skip_event(exporter) -> None:
    from taguru_server.server.otel import Tracing

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    perform = graph()
    with pytest.raises(ToolFailure):
        await run_retrieve({"context": "sake", "origins": ["a"]}, perform, None, Tracing(provider, False), deadline=0.0)
    [root] = exporter.get_finished_spans()
    assert root.name == "taguru.retrieve" and root.status.status_code.name == "ERROR"
    assert (root.attributes or {})["taguru.error.kind"] == "deadline_exceeded"
    assert [e.attributes["taguru.reason"] for e in root.events if e.attributes] == ["deadline_exceeded_before_start"]
    assert perform.calls == []
