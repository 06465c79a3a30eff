"""The exact-match retrieval cache (TAGURU_RETRIEVAL_CACHE_BYTES): every cached answer is byte-identical to the
uncached one (the envelope's `time` aside) across writes, windows, type filters, schema installs, settings,
embedding refreshes, compaction, communities and delete/re-create; errors, failed query embeddings and
oversized answers are never stored; the hit replays usage counts; the metric rows are always rendered."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Client
from fake_embedder import FRUITY, FakeEmbedder, Fault, table
from semantic_support import serving

from taguru_server.server.retrieval_cache import Entry, RetrievalCache, canonical_body

pytestmark = pytest.mark.anyio

TIME = re.compile(rb',"time":[-+0-9.eE]+')

SCHEMA: dict[str, Any] = {
    "schema": 1,
    "mode": "warn",
    "closed_labels": False,
    "types": {"Organization": {"is_a": []}, "Brewery": {"is_a": ["Organization"]}},
    "relations": {},
}

# every cached route, with and without windows, filters and paging
READS: list[tuple[str, Any]] = [
    ("/contexts/fruit/recall", {"cue": "りんご"}),
    ("/contexts/fruit/recall", {"cue": "りんご", "since": 0, "until": 1500}),
    ("/contexts/fruit/recall", {"cue": "りんご", "limit": 1}),
    ("/contexts/fruit/query", {"subject": ["りんご", "蔵"]}),
    ("/contexts/fruit/query", {"label": "色", "since": 1500}),
    ("/contexts/fruit/query", {"label": "色", "subject_types": "Brewery"}),
    ("/contexts/fruit/sources/search", {"query": "りんご"}),
    ("/contexts/fruit/sources/search", {"query": "アップル", "limit": 1}),
    ("/contexts/fruit/sources/search", {"query": "果物", "since": 1500}),
    ("/contexts/fruit/sources/search", {"query": "果物", "tags": ["red"]}),
    ("/recall", {"contexts": ["fruit", "veg"], "cue": "りんご"}),
    ("/recall", {"groups": ["produce"], "cue": "色"}),
    ("/query", {"groups": ["produce"], "label": "色"}),
    ("/sources/search", {"contexts": ["veg", "fruit"], "query": "果物"}),
    ("/contexts/fruit/communities/search", {"query": "りんご"}),
]


@contextlib.asynccontextmanager
async def twins(settings_factory: Any, tmp_path: Path) -> AsyncIterator[tuple[Client, Client, FakeEmbedder]]:
    """Two servers over their own stores behind one fake provider: the cache on (default) and off."""
    fake = FakeEmbedder(table(FRUITY))
    env = {"TAGURU_EMBED_PASSAGES": "1"}
    async with serving(settings_factory, fake, TAGURU_DATA_DIR=str(tmp_path / "on"), **env) as on:
        async with serving(
            settings_factory, fake, TAGURU_DATA_DIR=str(tmp_path / "off"), TAGURU_RETRIEVAL_CACHE_BYTES="0", **env
        ) as off:
            yield on, off, fake


async def both(on: Client, off: Client, method: str, path: str, body: Any = None) -> None:
    """One write, applied to both stores alike."""
    for client in (on, off):
        if body is None:
            status, parsed, _h = await client.call(method, path, content_type=None)
        else:
            status, parsed, _h = await client.call(method, path, body)
        assert status == 200, (path, parsed)


async def read(client: Client, path: str, body: Any) -> bytes:
    status, text, _h = await client.fetch("POST", path, body)
    return str(status).encode() + b" " + TIME.sub(b"", text)


async def metric(client: Client, sample: str) -> float:
    async with client.session.get(client.base + "/metrics") as resp:
        text = (await resp.read()).decode()
    line = next(line for line in text.splitlines() if line.startswith(sample + " "))
    return float(line.rsplit(" ", 1)[1])


async def compare(on: Client, off: Client) -> None:
    """Every read twice on the cached server (the second a hit), once uncached: all three the same bytes."""
    for path, body in READS:
        fresh = await read(on, path, body)
        again = await read(on, path, body)
        plain = await read(off, path, body)
        assert fresh == again == plain, (path, body)


async def test_cached_answers_are_the_uncached_bytes_through_every_kind_of_change(settings_factory, tmp_path) -> None:
    from test_communities_build import build

    async with twins(settings_factory, tmp_path) as (on, off, _fake):
        for name in ("fruit", "veg"):
            await both(on, off, "PUT", f"/contexts/{name}", {"description": "d"})
        await both(on, off, "PUT", "/groups/produce", {"contexts": ["fruit", "veg"]})
        rows = [
            {"subject": "りんご", "label": "色", "object": "赤", "weight": 1.0, "source": "a.md"},
            {"subject": "みかん", "label": "色", "object": "橙", "weight": 2.0, "source": "b.md"},
        ]
        await both(on, off, "POST", "/contexts/fruit/associations", rows)
        store = {"passages": {"a.md": "りんごは赤い果物。", "b.md": "みかんは橙色の果物。"}, "dates": {"a.md": 1000}}
        await both(on, off, "POST", "/contexts/fruit/sources", store)
        await both(on, off, "POST", "/contexts/veg/sources", {"passages": {"v.md": "にんじんは橙色の野菜。"}})
        for name in ("fruit",):
            for client in (on, off):
                await build(client, name)
        await compare(on, off)
        hits = await metric(on, 'taguru_retrieval_cache_total{op="recall",outcome="hit"}')
        assert hits >= 5
        assert await metric(off, 'taguru_retrieval_cache_total{op="recall",outcome="hit"}') == 0

        changes: list[tuple[str, str, Any]] = [
            ("POST", "/contexts/fruit/associations", [{"subject": "蔵", "label": "色", "object": "白", "weight": 5}]),
            ("POST", "/contexts/fruit/associations/retract", {"subject": "りんご", "label": "色", "object": "赤"}),
            ("POST", "/contexts/fruit/aliases", {"aliases": {"林檎": "りんご"}}),
            ("POST", "/contexts/fruit/sources", {"passages": {"c.md": "蔵の白い果物。"}, "tags": {"c.md": ["red"]}}),
            ("PATCH", "/contexts/fruit", {"semantic_floor": 0.9}),
            ("PUT", "/contexts/fruit/schema", SCHEMA),
            (
                "POST",
                "/contexts/fruit/associations",
                [{"subject": "蔵", "label": "schema:type", "object": "Brewery", "weight": 1}],
            ),
            ("POST", "/contexts/fruit/embeddings/refresh", None),
            ("POST", "/contexts/veg/embeddings/refresh", None),
            ("POST", "/contexts/fruit%3A%3Acommunities/embeddings/refresh", None),
            ("POST", "/contexts/fruit/compact", None),
            ("POST", "/contexts/fruit/sources/retract", {"source": "b.md"}),
            ("DELETE", "/contexts/veg", None),
            ("PUT", "/contexts/veg", {"description": "again"}),
            ("POST", "/contexts/veg/sources", {"passages": {"w.md": "りんごの果物。"}}),
        ]
        for method, path, body in changes:
            await both(on, off, method, path, body)
            await compare(on, off)
        assert await metric(on, 'taguru_retrieval_cache_total{op="search_passages",outcome="hit"}') > 10
        assert await metric(on, 'taguru_retrieval_cache_total{op="search_communities",outcome="hit"}') > 5
        assert await metric(on, "taguru_retrieval_cache_entries") > 0


async def test_a_hit_replays_the_usage_counts(settings_factory, tmp_path) -> None:
    async with twins(settings_factory, tmp_path) as (on, off, _fake):
        for client in (on, off):
            await client.ok("PUT", "/contexts/fruit", {"description": "d"})
            await client.ok("POST", "/contexts/fruit/sources", {"passages": {"a.md": "りんごは赤い果物。"}})
            for _ in range(3):
                await client.ok("POST", "/contexts/fruit/sources/search", {"query": "りんご"})
                await client.ok("POST", "/contexts/fruit/recall", {"cue": "ない"})
        on_stats = (await on.ok("GET", "/contexts/fruit"))["result"]
        off_stats = (await off.ok("GET", "/contexts/fruit"))["result"]
        for stats in (on_stats, off_stats):  # wall-clock seconds: the two servers' may fall either side of one
            assert stats["usage"].pop("last_read_epoch") > 0 and stats["usage"].pop("last_write_epoch") > 0
        assert on_stats == off_stats and on_stats["usage"] == {"reads": 6, "empty_reads": 3, "writes": 1}
        assert await metric(on, 'taguru_passage_lane_contributions_total{lane="bm25_only"}') == 3
        for client in (on, off):
            assert await metric(client, 'taguru_searches_total{op="search_passages",outcome="hit"}') == 3
            assert await metric(client, 'taguru_searches_total{op="recall",outcome="empty"}') == 3
        assert await metric(on, 'taguru_retrieval_cache_total{op="search_passages",outcome="hit"}') == 2


async def test_errors_and_failed_query_embeddings_are_not_stored(settings_factory, tmp_path) -> None:
    async with twins(settings_factory, tmp_path) as (on, _off, fake):
        await on.ok("PUT", "/contexts/fruit", {"description": "d"})
        await on.ok("POST", "/contexts/fruit/sources", {"passages": {"a.md": "りんごは赤い果物。"}})
        await on.ok("POST", "/contexts/fruit/embeddings/refresh")
        body = {"query": "りんご"}
        await on.ok("POST", "/contexts/fruit/sources/search", body)
        # the same body under the wrong media type is still the 415, never the stored answer
        status, parsed, _h = await on.call("POST", "/contexts/fruit/sources/search", body, content_type="text/plain")
        assert status == 415, parsed
        # a repeated key is the handler's to judge, not a key of the cache
        raw = '{"query":"りんご","query":"りんご"}'
        status, _p, _h = await on.call("POST", "/contexts/fruit/sources/search", raw=raw)
        assert status == 200  # the decoder takes the last; the cache computes it rather than key it
        entries = await metric(on, "taguru_retrieval_cache_entries")
        misses = 'taguru_retrieval_cache_total{op="search_passages",outcome="miss"}'
        missed = await metric(on, misses)
        fake.faults.append(Fault(status=500, purpose="query"))
        for _ in range(2):  # served each time, stored never: the second is a miss again
            failed = (await on.ok("POST", "/contexts/fruit/sources/search", {"query": "アップル"}))["result"]
            assert failed["plan"]["contexts"][0]["lanes"]["vector"]["ran"] is False
        assert await metric(on, "taguru_retrieval_cache_entries") == entries
        assert await metric(on, misses) == missed + 2
        for _ in range(2):
            status, _p, _h = await on.call("POST", "/contexts/nope/recall", {"cue": "x"})
            assert status == 404
        assert await metric(on, "taguru_retrieval_cache_entries") == entries


async def test_metric_rows_are_rendered_with_the_cache_off(settings_factory, tmp_path) -> None:
    async with twins(settings_factory, tmp_path) as (_on, off, _fake):
        for op in ("recall", "query", "search_passages", "search_communities"):
            for outcome in ("hit", "miss"):
                assert await metric(off, f'taguru_retrieval_cache_total{{op="{op}",outcome="{outcome}"}}') == 0
        assert await metric(off, "taguru_retrieval_cache_bytes") == 0


def test_the_lru_is_bounded_by_bytes_and_refuses_an_entry_over_a_quarter() -> None:
    cache = RetrievalCache(4000)
    entry = Entry(b"x" * 900, 1000, (), (), (), {})
    for key in range(6):
        assert cache.put(key, entry)
    assert list(cache.entries) == [2, 3, 4, 5] and cache.bytes == 4000
    assert cache.get(2) is entry  # a hit refreshes recency
    cache.put(6, entry)
    assert list(cache.entries) == [4, 5, 2, 6]
    assert not cache.put(7, Entry(b"", 1001, (), (), (), {}))
    assert 7 not in cache.entries


def test_the_canonical_body_sorts_keys_and_refuses_what_json_alone_would_blur() -> None:
    assert canonical_body(b'{"b": 1, "a": [1, 2.5]}')[1] == canonical_body(b'{"a":[1,2.5],"b":1}')[1]
    assert canonical_body(b'{"a":1}')[1] != canonical_body(b'{"a":1.0}')[1]
    for raw in (b'{"a":1,"a":2}', b'{"a":NaN}', b"\xff", b'{"a":"\\ud800"}'):
        with pytest.raises(Exception):  # noqa: B017 - the cache's own refusal: no key, computed instead
            canonical_body(raw)


async def test_a_cache_hit_is_one_childless_search_span(settings_factory) -> None:
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from taguru_server.server.app import build_app

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = TestServer(build_app(settings_factory(), tracer_provider=provider))
    await server.start_server()
    async with ClientSession() as session:
        client = Client(session, str(server.make_url("")).rstrip("/"))
        await client.ok("PUT", "/contexts/fruit", {"description": "d"})
        await client.ok("POST", "/contexts/fruit/sources", {"passages": {"a.md": "りんごは赤い果物。"}})
        await client.ok("POST", "/contexts/fruit/sources/search", {"query": "りんご", "limit": 3})
        exporter.clear()
        await client.ok("POST", "/contexts/fruit/sources/search", {"query": "りんご", "limit": 3})
        spans = exporter.get_finished_spans()
    await server.close()
    [search] = [s for s in spans if s.name == "taguru.passage_search"]
    assert search.attributes is not None and search.attributes["taguru.cache.result"] == "hit"
    assert search.attributes["taguru.limit"] == 3
    assert [(e.name, dict(e.attributes or {})) for e in search.events] == [
        ("taguru.cache", {"taguru.reason": "retrieval_cache_hit"})
    ]
    assert not [s for s in spans if s.parent is not None and s.parent.span_id == search.context.span_id]
