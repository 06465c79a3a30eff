"""The semantic lanes end to end over HTTP, the fake provider behind the real HTTP client (spec embeddings §7–§9)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from conftest import Client
from fake_embedder import FRUITY, FakeEmbedder, Fault, table
from semantic_support import fruit_context, serving

F32 = np.float32


async def one_fact(client: Client) -> None:
    await client.ok("PUT", "/contexts/fruit", {"description": "d"})
    await client.ok(
        "POST", "/contexts/fruit/associations", [{"subject": "りんご", "label": "色", "object": "赤", "weight": 1}]
    )


@pytest.fixture
async def fruit(settings_factory) -> AsyncIterator[tuple[Client, FakeEmbedder]]:
    async with fruit_context(settings_factory) as pair:
        yield pair


async def search(client: Client, query: str, **kw: Any) -> dict[str, Any]:
    return (await client.ok("POST", "/contexts/fruit/sources/search", {"query": query, **kw}))["result"]


def vector_plan(result: dict[str, Any]) -> dict[str, Any]:
    return result["plan"]["contexts"][0]["lanes"]["vector"]


@pytest.mark.anyio
async def test_search_before_and_after_a_refresh(fruit: tuple[Client, FakeEmbedder]) -> None:
    client, fake = fruit
    before = await search(client, "りんご")
    assert vector_plan(before) == {
        "ran": False,
        "reason": "no paragraph vectors exist yet — the embedding refresh has not covered this context",
    }
    assert before["hits"][0]["lanes"] == {"bm25": {"rank": 1, "score": before["hits"][0]["score"]}}
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    fused = await search(client, "りんご")
    assert vector_plan(fused) == {"ran": True, "floor": 0.35}  # printed as the f32 shortest digits
    [hit] = fused["hits"]
    assert str(F32(hit["score"])) == "0.032786883" and hit["lanes"]["vector"] == {"rank": 1, "score": 1.0}
    only = await search(client, "アップル")
    assert [(h["source"], str(F32(h["score"]))) for h in only["hits"]] == [
        ("a.md", "0.016393442"),
        ("b.md", "0.016129032"),
    ]
    calls = fake.calls
    await search(client, "アップル")  # the cue cache: no second provider call
    assert fake.calls == calls
    zero = await search(client, "アップル", limit=0)
    assert vector_plan(zero) == {"ran": False, "reason": "the requested limit is 0"} and fake.calls == calls


@pytest.mark.anyio
async def test_a_failing_provider_degrades_search_and_ends_a_weak_resolve(fruit: tuple[Client, FakeEmbedder]) -> None:
    client, fake = fruit
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    fake.faults.append(Fault(status=400, purpose="query"))
    degraded = await search(client, "みかんの色")
    reason = vector_plan(degraded)["reason"]
    assert reason.startswith("the query embedding failed: ") and "みかん" not in reason
    assert all("vector" not in h["lanes"] for h in degraded["hits"])
    status, body, _h = await client.call("POST", "/contexts/fruit/resolve", {"cue": "グレープ"})
    assert (status, body["code"]) == (502, "embeddings_failed") and body["error"].startswith("semantic entry failed: ")
    weak = await client.ok("POST", "/contexts/fruit/resolve", {"cue": "りんごの木"})  # lexical candidates remain
    assert weak["result"] and all(c["tier"] == "lexical" for c in weak["result"])
    # evidence still answers: its origin resolves lexically and the passages lane degrades to BM25, silently
    # (a query text no other test used: the process-wide cue cache would otherwise answer without the provider)
    body = {"origins": ["りんご"], "text_fallback_query": "りんごの話を聞かせてほしい"}
    package = (await client.ok("POST", "/contexts/fruit/evidence", body))["result"]
    assert package["plan"]["lanes"]["passages"] == {"ran": True}
    assert {r["lane"] for i in package["items"] if i["kind"] == "passage" for r in i["lane_ranks"]} <= {"passage_bm25"}


@pytest.mark.anyio
async def test_resolve_reaches_a_name_no_spelling_shares(fruit: tuple[Client, FakeEmbedder]) -> None:
    client, fake = fruit
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    got = (await client.ok("POST", "/contexts/fruit/resolve", {"cue": "アップル"}))["result"]
    assert got == [
        {"name": "りんご", "score": 0.9599999785423279, "tier": "semantic", "gloss": "りんご。色は赤。"},
        {"name": "みかん", "score": 0.5375999808311462, "tier": "semantic", "gloss": "みかん。色は橙。"},
    ]
    calls = fake.calls
    exact = (await client.ok("POST", "/contexts/fruit/resolve", {"cue": "りんご"}))["result"]
    assert exact[0]["tier"] == "lexical" and fake.calls == calls  # confident: no provider call


@pytest.mark.anyio
async def test_evidence_names_passage_candidates_by_their_lanes(fruit: tuple[Client, FakeEmbedder]) -> None:
    client, _fake = fruit
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    body = {"origins": ["りんご"], "text_fallback_query": "アップル", "explain": True}
    package = (await client.ok("POST", "/contexts/fruit/evidence", body))["result"]
    passages = [i for i in package["items"] if i["kind"] == "passage"]
    lanes = {r["lane"] for i in passages for r in i["lane_ranks"]}
    assert passages and lanes and lanes <= {"passage_vector", "passage_fused"}, lanes
    assert package["plan"]["lanes"]["passages"] == {"ran": True}


@pytest.mark.anyio
async def test_evidence_resolves_an_origin_through_the_semantic_tier(fruit: tuple[Client, FakeEmbedder]) -> None:
    client, fake = fruit
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    package = (await client.ok("POST", "/contexts/fruit/evidence", {"origins": ["アップル"]}))["result"]
    subjects = {i["association"]["subject"] for i in package["items"] if i["kind"] == "association"}
    assert "りんご" in subjects
    fake.faults.append(Fault(status=400, purpose="query"))
    status, body, _h = await client.call("POST", "/contexts/fruit/evidence", {"origins": ["グレープ"]})
    assert (status, body["code"]) == (502, "embeddings_failed") and body["error"].startswith("semantic entry failed: ")


@pytest.mark.anyio
async def test_lane_scores_print_as_f32_on_the_wire(fruit: tuple[Client, FakeEmbedder]) -> None:
    client, _fake = fruit
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    async with client.session.post(client.base + "/contexts/fruit/sources/search", json={"query": "アップル"}) as resp:
        raw = await resp.text()
    assert '"score":0.016393442' in raw and '"vector":{"rank":1,"score":0.96}' in raw
    assert '"floor":0.35' in raw and '"score":0.5376}' in raw


@pytest.mark.anyio
async def test_community_search_runs_the_lane_on_the_artifact(fruit: tuple[Client, FakeEmbedder]) -> None:
    from test_communities_build import build

    client, _fake = fruit
    await build(client, "fruit")
    before = (await client.ok("POST", "/contexts/fruit/communities/search", {"query": "りんご"}))["result"]
    assert vector_plan(before) == {
        "ran": False,
        "reason": "no paragraph vectors exist yet — the embedding refresh has not covered this context",
    }
    await client.ok("POST", "/contexts/fruit%3A%3Acommunities/embeddings/refresh")
    after = (await client.ok("POST", "/contexts/fruit/communities/search", {"query": "りんご"}))["result"]
    assert vector_plan(after) == {"ran": True, "floor": 0.35}
    assert after["hits"] and all(h["score"] < 0.05 for h in after["hits"])  # fused (RRF) scores


@pytest.mark.anyio
async def test_metrics_count_tiers_and_lanes(fruit: tuple[Client, FakeEmbedder]) -> None:
    client, _fake = fruit
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    await client.ok("POST", "/contexts/fruit/resolve", {"cue": "アップル"})  # semantic
    await client.ok("POST", "/contexts/fruit/resolve", {"cue": "りんご"})  # lexical
    await client.ok("POST", "/contexts/fruit/resolve", {"cue": "zzz"})  # the table's default vector: 赤, 橙, 色
    await search(client, "りんご")  # one hit from both lanes
    await search(client, "アップル")  # two vector-only hits
    async with client.session.get(client.base + "/metrics") as resp:
        text = await resp.text()
    for line in (
        'taguru_resolves_total{tier="semantic"} 2.0',
        'taguru_resolves_total{tier="lexical"} 1.0',
        'taguru_resolves_total{tier="miss"} 0.0',
        'taguru_resolves_total{tier="weak_lexical"} 0.0',
        'taguru_passage_lane_contributions_total{lane="both_lanes"} 1.0',
        'taguru_passage_lane_contributions_total{lane="vector_only"} 2.0',
        'taguru_embedding_width_rebuilds_total{store="gloss"} 0.0',
    ):
        assert line in text, [x for x in text.splitlines() if "resolves" in x or "contributions" in x]


@pytest.mark.anyio
@pytest.mark.slow
async def test_offline_import_embeds_the_contexts_it_touched(tmp_path) -> None:
    import asyncio

    from process_support import base_env, cli

    fake = FakeEmbedder(table(FRUITY))
    provider = TestServer(fake.app())
    await provider.start_server()
    try:
        stream = tmp_path / "in.jsonl"
        stream.write_text(
            '{"taguru_batch": 1, "context": "fruit", "source": "a.md", "create": {"description": "d"}}\n'
            '{"passage": "りんごは赤い果物。"}\n'
            '{"subject": "りんご", "label": "色", "object": "赤", "weight": 1.0}\n',
            encoding="utf-8",
        )
        url = str(provider.make_url("/v1/embeddings"))
        extra = {"TAGURU_EMBED_URL": url, "TAGURU_EMBED_MODEL": "fake-table", "TAGURU_EMBED_PASSAGES": "1"}
        done = await asyncio.to_thread(cli, "import", str(stream), env=base_env(tmp_path / "data", **extra))
        assert done.returncode == 0, done.stderr
        assert "fruit: embedded 3 glosses" in done.stderr and "fruit: embedded 1 passages" in done.stderr
        calls = fake.calls
        skipped = await asyncio.to_thread(
            cli, "import", "--no-embed", str(stream), env=base_env(tmp_path / "data", **extra)
        )
        assert skipped.returncode == 0 and fake.calls == calls
        fake.faults.append(Fault(status=400))
        stream.write_text(stream.read_text(encoding="utf-8").replace("赤い", "青い"), encoding="utf-8")
        failed = await asyncio.to_thread(cli, "import", str(stream), env=base_env(tmp_path / "data", **extra))
        assert failed.returncode == 1 and "Traceback" not in failed.stderr
        # the changed paragraph must be re-embedded: the passage half reports the provider's failure
        assert "taguru: import: fruit: passage embedding refresh failed (embedding provider answered HTTP 400)" in (
            failed.stderr
        )
        assert "the passages are imported and durable" in failed.stderr
    finally:
        await provider.close()


@pytest.mark.anyio
async def test_the_auto_embed_ticker_refreshes_what_writes_made_stale(settings_factory) -> None:
    import asyncio

    fake = FakeEmbedder(table(FRUITY))
    env = {"TAGURU_EMBED_PASSAGES": "1", "TAGURU_EMBED_AUTO": "1", "TAGURU_FLUSH_SECS": "1"}
    async with serving(settings_factory, fake, **env) as client:
        await one_fact(client)
        await client.ok("POST", "/contexts/fruit/sources", {"passages": {"a.md": "りんごは赤い果物。"}})
        for _ in range(50):  # a few ticks at most
            status = (await client.ok("GET", "/contexts/fruit/embeddings"))["result"]
            if "passages" in status and "glosses" in status:
                break
            await asyncio.sleep(0.1)
        assert status["glosses"]["concepts"] == 2 and status["passages"]["rows"] == 1
        hits = (await search(client, "アップル"))["hits"]  # found by the vector lane alone
        assert [h["source"] for h in hits] == ["a.md"]


@pytest.mark.anyio
async def test_a_refresh_past_its_budget_is_a_408(settings_factory) -> None:
    fake = FakeEmbedder(table(FRUITY))
    fake.faults.append(Fault(sleep=2.5, purpose="index"))
    async with serving(settings_factory, fake, TAGURU_REQUEST_TIMEOUT_SECS="1") as client:
        await one_fact(client)
        status, body, _h = await client.call("POST", "/contexts/fruit/embeddings/refresh")
        assert (status, body["code"]) == (408, "timeout"), body
        assert body["error"].startswith("embedding refresh failed: "), body["error"]
        assert "りんご" not in body["error"]


@pytest.mark.anyio
async def test_a_semantic_entry_past_the_budget_is_a_408(settings_factory) -> None:
    fake = FakeEmbedder(table(FRUITY))
    async with serving(settings_factory, fake, TAGURU_REQUEST_TIMEOUT_SECS="1") as client:
        await one_fact(client)
        await client.ok("POST", "/contexts/fruit/embeddings/refresh")
        fake.faults.append(Fault(sleep=2.5, purpose="query"))
        status, body, _h = await client.call("POST", "/contexts/fruit/resolve", {"cue": "グレープ"})
        assert (status, body["code"]) == (408, "timeout"), body
        assert body["error"].startswith("semantic entry failed: "), body["error"]
