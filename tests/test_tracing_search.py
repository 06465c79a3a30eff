"""The passage-search spans (ADR 0008 vocabulary): `taguru.passage_search` on the direct and cross
searches (one `.target` per target, by position), `taguru.search.bm25`/`.ann`/`.fuse` under every
passage search (direct, target, evidence `taguru.passages`), `taguru.embed` (CLIENT) around every
embedding-provider call (query and index), the skip and degrade events, the status rules (a failed
query embedding degrades the search, which stays UNSET) and no query or passage text on any of them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client
from fake_embedder import FRUITY, FakeEmbedder, Fault, table
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from test_evidence_endpoint import seed_sake

from taguru_server.server.app import build_app
from taguru_server.server.providers.reranker import RerankSettings
from taguru_server.store.text import query_terms

pytestmark = pytest.mark.anyio

QUERY = "りんご 果物"
OTHER = "みかん 果物"
TEXTS = ("りんごは赤い果物。", "みかんは橙色の果物。")


@contextlib.asynccontextmanager
async def traced_server(
    settings_factory: Any, fake: FakeEmbedder | None, rerank: RerankSettings | None = None
) -> AsyncIterator[tuple[Client, Any]]:
    """A traced server (in-memory exporter), behind the fake embedding provider when one is given."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider_server = None
    env: dict[str, str] = {"TAGURU_RETRIEVAL_CACHE_BYTES": "0"}  # every search computed: its lane spans
    if fake is not None:
        provider_server = TestServer(fake.app())
        await provider_server.start_server()
        env |= {
            "TAGURU_EMBED_URL": str(provider_server.make_url("/v1/embeddings")),
            "TAGURU_EMBED_MODEL": "fake-table",
            "TAGURU_EMBED_PASSAGES": "1",
        }
    server = TestServer(build_app(settings_factory(**env), rerank=rerank, tracer_provider=provider))
    await server.start_server()
    session = ClientSession()
    try:
        yield Client(session, str(server.make_url("")).rstrip("/")), exporter
    finally:
        await session.close()
        await server.close()
        if provider_server is not None:
            await provider_server.close()


async def seed_fruit(client: Client, name: str = "fruit") -> None:
    await client.ok("PUT", f"/contexts/{name}", {"description": "d"})
    await client.ok("POST", f"/contexts/{name}/sources", {"passages": {"a.md": TEXTS[0], "b.md": TEXTS[1]}})


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def children(spans: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def events(span: ReadableSpan) -> list[tuple[str, Any]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events]


def no_text(spans: tuple[ReadableSpan, ...]) -> None:
    """No query, passage, context or source text on any span, attribute or event."""
    dumped = json.dumps([[s.name, dict(s.attributes or {}), events(s)] for s in spans], ensure_ascii=False, default=str)
    for text in (*QUERY.split(), *OTHER.split(), *TEXTS, "fruit", "a.md", "b.md", "青嶺酒造"):
        assert text not in dumped, text


async def test_a_lexical_search_is_one_span_with_its_bm25_lane_and_the_vector_off_degrade(settings_factory) -> None:
    async with traced_server(settings_factory, None) as (client, exporter):
        await seed_fruit(client)
        exporter.clear()
        await client.ok("POST", "/contexts/fruit/sources/search", {"query": QUERY, "limit": 3})
        spans = exporter.get_finished_spans()
        server = named(spans, "POST /contexts/{name}/sources/search")[0]
        (search,) = children(spans, server)
        assert (search.name, search.kind, search.status.status_code) == (
            "taguru.passage_search",
            SpanKind.INTERNAL,
            StatusCode.UNSET,
        )
        assert dict(search.attributes or {}) == {
            "taguru.op": "search_passages",
            "taguru.limit": 3,
            "taguru.search.lanes": "ran",
            "taguru.search.vector.outcome": "off",
            "taguru.passage.hit_count": 2,
            "taguru.passage.bm25_only": 2,
            "taguru.passage.both_lanes": 0,
            "taguru.passage.vector_only": 0,
        }
        assert events(search) == [("taguru.degrade", {"taguru.reason": "vector_off"})]
        (bm25,) = children(spans, search)
        assert bm25.name == "taguru.search.bm25"
        assert dict(bm25.attributes or {}) == {
            "taguru.search.terms": len(set(query_terms(QUERY))),  # distinct query grams
            "taguru.search.pool": 3,
            "taguru.search.hits": 2,
        }
        assert search.start_time <= bm25.start_time <= bm25.end_time <= search.end_time

        exporter.clear()
        await client.ok("POST", "/contexts/fruit/sources/search", {"query": QUERY, "limit": 0, "tags": ["x"]})
        (search,) = named(exporter.get_finished_spans(), "taguru.passage_search")
        assert search.attributes is not None and search.attributes["taguru.search.lanes"] == "zero_limit"
        assert (search.attributes["taguru.filter.eligible"], search.attributes["taguru.filter.total"]) == (0, 2)
        assert events(search) == [("taguru.skip", {"taguru.reason": "zero_limit"})]
        assert not children(exporter.get_finished_spans(), search)
        no_text(exporter.get_finished_spans())


async def test_the_vector_lane_embeds_sweeps_and_fuses_under_the_search(settings_factory) -> None:
    fake = FakeEmbedder(table(FRUITY))
    async with traced_server(settings_factory, fake) as (client, exporter):
        await seed_fruit(client)
        exporter.clear()
        await client.ok("POST", "/contexts/fruit/embeddings/refresh", {})
        stored = named(exporter.get_finished_spans(), "taguru.embed")
        assert [dict(s.attributes or {}) for s in stored] == [
            {"taguru.embed.model": "fake-table", "taguru.embed.inputs": 2, "taguru.embed.purpose": "index"}
        ]
        exporter.clear()
        await client.ok("POST", "/contexts/fruit/sources/search", {"query": QUERY, "limit": 3})
        spans = exporter.get_finished_spans()
        (search,) = named(spans, "taguru.passage_search")
        kids = children(spans, search)
        assert [s.name for s in kids] == [
            "taguru.embed",
            "taguru.search.bm25",
            "taguru.search.ann",
            "taguru.search.fuse",
        ]
        embed, _bm25, ann, fuse = kids
        assert embed.kind == SpanKind.CLIENT and embed.status.status_code == StatusCode.UNSET
        assert dict(embed.attributes or {}) == {
            "taguru.embed.model": "fake-table",
            "taguru.embed.inputs": 1,
            "taguru.embed.purpose": "query",
        }
        assert dict(ann.attributes or {}) == {
            "taguru.search.pool": 2,
            "taguru.search.rows": 2,
            "taguru.search.exact": True,
            "taguru.search.hits": ann.attributes["taguru.search.hits"],  # type: ignore[index]
        }
        assert fuse.attributes is not None and fuse.attributes["taguru.search.lexical_pool"] == 2
        attributes = dict(search.attributes or {})
        assert attributes["taguru.search.vector.outcome"] == "ran" and isinstance(
            attributes["taguru.search.floor"], float
        )
        assert attributes["taguru.passage.hit_count"] == fuse.attributes["taguru.passage.hit_count"]
        assert (
            sum(attributes[f"taguru.passage.{lane}"] for lane in ("bm25_only", "both_lanes", "vector_only"))
            == (attributes["taguru.passage.hit_count"])
        )
        assert not events(search)

        exporter.clear()  # the same query again: its vector comes from the cue cache, no provider call
        await client.ok("POST", "/contexts/fruit/sources/search", {"query": QUERY, "limit": 3})
        spans = exporter.get_finished_spans()
        (search,) = named(spans, "taguru.passage_search")
        assert events(search) == [("taguru.cache", {"taguru.reason": "cue_cache_hit"})]
        assert [s.name for s in children(spans, search)] == [
            "taguru.search.bm25",
            "taguru.search.ann",
            "taguru.search.fuse",
        ]

        fake.faults.append(Fault(status=500, purpose="query"))
        exporter.clear()  # another query: the last one's vector is cached
        await client.ok("POST", "/contexts/fruit/sources/search", {"query": OTHER, "limit": 3})
        spans = exporter.get_finished_spans()
        (search,) = named(spans, "taguru.passage_search")
        assert search.status.status_code == StatusCode.UNSET  # degraded to BM25, not failed
        assert events(search) == [("taguru.degrade", {"taguru.reason": "vector_query_embedding_failed"})]
        (embed,) = named(spans, "taguru.embed")
        assert embed.status.status_code == StatusCode.ERROR and embed.parent is not None
        assert embed.parent.span_id == search.context.span_id
        assert [s.name for s in children(spans, search)] == ["taguru.embed", "taguru.search.bm25"]
        no_text(spans)


async def test_a_cross_search_has_one_target_span_per_target_by_position(settings_factory) -> None:
    async with traced_server(settings_factory, None) as (client, exporter):
        await seed_fruit(client, "fruit")
        await seed_fruit(client, "more")
        exporter.clear()
        await client.ok("POST", "/sources/search", {"contexts": ["fruit", "more"], "query": QUERY})
        spans = exporter.get_finished_spans()
        (root,) = named(spans, "taguru.passage_search")
        assert dict(root.attributes or {}) == {
            "taguru.op": "search_passages",
            "taguru.limit": 5,
            "taguru.context.count": 2,
        }
        targets = children(spans, root)
        assert [s.name for s in targets] == ["taguru.passage_search.target"] * 2
        assert [s.attributes["taguru.target.index"] for s in targets] == [0, 1]  # type: ignore[index]
        for target in targets:
            assert target.attributes is not None and target.attributes["taguru.search.lanes"] == "ran"
            assert [s.name for s in children(spans, target)] == ["taguru.search.bm25"]
        no_text(spans)


async def test_the_evidence_passages_phase_has_its_lane_spans(settings_factory) -> None:
    async with traced_server(settings_factory, None) as (client, exporter):
        await seed_sake(client)
        exporter.clear()
        await client.ok("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"], "query": "青嶺酒造 蔵元"})
        spans = exporter.get_finished_spans()
        (passages,) = named(spans, "taguru.passages")
        assert [s.name for s in children(spans, passages)] == ["taguru.search.bm25"]
        assert not named(spans, "taguru.passage_search")  # the evidence phase is its own span
        assert "taguru.search.lanes" not in (passages.attributes or {})
        no_text(spans)


async def test_the_retrieve_fallback_wraps_a_passage_search(settings_factory) -> None:
    async with traced_server(settings_factory, None) as (client, exporter):
        await seed_sake(client)
        exporter.clear()
        arguments = {
            "context": "sake",
            "origins": ["青嶺酒造"],
            "text_fallback_query": "青嶺酒造 蔵元",
            "text_fallback_only_if_empty": False,
        }
        rpc = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "retrieve", "arguments": arguments},
        }
        status, reply, _h = await client.call("POST", "/mcp", rpc)
        assert status == 200 and "isError" not in reply["result"], reply
        spans = exporter.get_finished_spans()
        (fallback,) = named(spans, "taguru.passage_fallback")
        (search,) = children(spans, fallback)
        assert search.name == "taguru.passage_search"
        assert search.attributes is not None and search.attributes["taguru.search.lanes"] == "ran"
        assert [s.name for s in children(spans, search)] == ["taguru.search.bm25"]
        no_text(spans)


async def test_a_requested_rerank_that_never_reaches_a_provider_is_a_zero_length_span(settings_factory) -> None:
    async with traced_server(settings_factory, None) as (client, exporter):
        await seed_sake(client)
        for body in ({"origins": ["青嶺酒造"], "rerank": {}}, {"origins": ["青嶺酒造"]}):
            exporter.clear()
            await client.ok("POST", "/contexts/sake/evidence", body)
            spans = exporter.get_finished_spans()
            reranks = named(spans, "taguru.rerank")
            if "rerank" not in body:  # not requested: no span
                assert reranks == []
                continue
            (rerank,) = reranks
            (stage,) = named(spans, "taguru.stage.rerank")
            assert rerank.kind == SpanKind.CLIENT and rerank.start_time == rerank.end_time
            assert rerank.parent is not None and rerank.parent.span_id == stage.context.span_id
            assert dict(rerank.attributes or {}) == {"taguru.rerank.outcome": "not_configured"}  # no model: unset

    rerank = RerankSettings("http://127.0.0.1:9/rerank", "stub-reranker", None, 1)  # never called below
    async with traced_server(settings_factory, None, rerank) as (client, exporter):  # over the same store
        exporter.clear()
        await client.ok("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"], "rerank": {"model": "other"}})
        (rerank_span,) = named(exporter.get_finished_spans(), "taguru.rerank")
        attributes = dict(rerank_span.attributes or {})
        assert attributes["taguru.rerank.outcome"] == "model_mismatch"
        assert attributes["taguru.rerank.model"] == "stub-reranker" and attributes["taguru.rerank.candidates"] >= 0
