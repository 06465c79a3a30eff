"""`taguru communities`: building the artifact over HTTP, reuse by fingerprint, the chat provider, failures."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer
from conftest import Client

from taguru_server.cli.communities import BuildFailed, ChatProvider, ProviderConfig, Server, derive
from taguru_server.cli.demo import demo_stream_path
from taguru_server.cli.main import main as taguru_main
from taguru_server.server.communities.summaries import Hierarchy, first_sentence, leaf_summary, parent_summary

NO_ARTIFACT = (
    "no communities artifact for 'demo': context 'demo::communities' does not exist — run "
    "`taguru communities` to build it"
)


# ----- helpers ------------------------------------------------------------------------


async def build(client: Client, name: str, **kw: Any) -> dict[str, Any]:
    async with ClientSession() as session:
        provider = kw.pop("provider_config", None)
        chat = ChatProvider(provider, session, backoff_secs=0.0) if provider is not None else None
        report = await derive(Server(session, kw.pop("base", client.base), ""), name, provider=chat, **kw)
        if chat is not None:
            report["provider_calls"] = chat.calls
        return report


async def analysis(client: Client, name: str) -> list[dict[str, Any]]:
    async with client.session.get(f"{client.base}/contexts/{name}/communities") as resp:
        lines = (await resp.read()).decode().strip().split("\n")
    return [json.loads(line) for line in lines[1:]]


async def artifact(client: Client, derived: str) -> dict[str, str]:
    """Every passage of the artifact: source → text."""
    listed = await client.ok("GET", f"/contexts/{derived}/sources?limit=1000")
    names = listed["result"]["sources"]
    found = await client.ok("POST", f"/contexts/{derived}/sources/lookup", {"sources": names})
    return found["result"]["passages"]


async def members(client: Client, derived: str, cid: str) -> list[tuple[str, float]]:
    body = await client.ok(
        "POST", f"/contexts/{derived}/query", {"subject": f"community:{cid}", "label": "contains", "limit": 1000}
    )
    return sorted((m["object"], m["weight"]) for m in body["result"]["matches"] if m["count"] > 0)


def json_report(out: str) -> Any:
    """The `--json` array in captured stdout (the server's request log lines may precede it)."""
    start = 0 if out.startswith("[") else out.index("\n[") + 1
    return json.loads(out[start:])


async def import_demo(client: Client) -> None:
    await client.ok("POST", "/import", raw=demo_stream_path().read_bytes(), content_type="application/x-ndjson")


def cliques(prefix: str, count: int, size: int = 3) -> list[dict[str, Any]]:
    edges = []
    for g in range(count):
        names = [f"{prefix}{g}-{i}" for i in range(size)]
        edges += [
            {"subject": a, "label": "近い", "object": b, "weight": 1.0}
            for i, a in enumerate(names)
            for b in names[i + 1 :]
        ]
        edges.append({"subject": names[0], "label": "link", "object": f"{prefix}{(g + 1) % count}-1", "weight": 1.0})
    return edges


async def graph(client: Client, name: str, edges: list[dict[str, Any]]) -> None:
    await client.ok("PUT", f"/contexts/{name}", content_type=None)
    await client.ok("POST", f"/contexts/{name}/associations", edges)


class FakeChat:
    """An OpenAI-compatible /chat/completions stand-in that records what it was asked."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.failures_left = 1

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.auth.append(request.headers.get("Authorization"))
        if self.mode == "down":
            return web.Response(status=503)
        if self.mode == "flaky" and self.failures_left:
            self.failures_left -= 1
            return web.Response(status=500)
        if self.mode == "empty":
            return web.json_response({"choices": [{"message": {"role": "assistant", "content": "  "}}]})
        if self.mode == "slow":
            await asyncio.sleep(2)
        digest = hashlib.sha256(body["messages"][1]["content"].encode()).hexdigest()[:12]
        return web.json_response(
            {"choices": [{"message": {"role": "assistant", "content": f" Theme {digest}. More prose.\n"}}]}
        )


@pytest.fixture
async def chat() -> AsyncIterator[tuple[FakeChat, str]]:
    fake = FakeChat()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    server = TestServer(app)
    await server.start_server()
    try:
        yield fake, str(server.make_url("/v1/chat/completions"))
    finally:
        await server.close()


# ----- the demo corpus, end to end through the CLI ---------------------------------------


@pytest.mark.anyio
async def test_demo_corpus_feeds_the_evidence_lane(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    await import_demo(client)
    ask = {"origins": ["青嶺酒造"], "include_communities": True}
    before = (await client.ok("POST", "/contexts/demo/evidence", ask))["result"]
    assert before["plan"]["lanes"]["communities"] == {"ran": False, "reason": NO_ARTIFACT}

    code = await anyio.to_thread.run_sync(
        taguru_main, ["communities", "--context", "demo", "--url", client.base, "--json"]
    )
    assert code == 0
    (report,) = json_report(capsys.readouterr().out)
    communities = await analysis(client, "demo")
    assert report == {
        "context": "demo",
        "derived": "demo::communities",
        "dry_run": False,
        "algorithm": "louvain-cc/1",
        "revision_graph": (await client.ok("GET", "/contexts/demo"))["result"]["revision"]["graph"],
        "concept_count": report["concept_count"],
        "edge_count": report["edge_count"],
        "levels": report["levels"],
        "communities": len(communities),
        "summaries_generated": len(communities),
        "summaries_reused": 0,
        "retracted": 0,
        "rebuilt_from_scratch": True,
    }

    after = (await client.ok("POST", "/contexts/demo/evidence", ask))["result"]
    assert after["plan"]["lanes"]["communities"] == {"ran": True}
    items = [i for i in after["items"] if i["kind"] == "community"]
    assert items and any(i["community"].get("members") for i in items)
    leaf = next(i["community"] for i in items if i["community"].get("members"))
    assert "青嶺酒造" in [m["name"] for m in leaf["members"]]

    found = (await client.ok("POST", "/contexts/demo/communities/search", {"query": "青嶺酒造"}))["result"]
    assert found["stale"] is False and found["hits"]
    await client.ok(
        "POST",
        "/contexts/demo/associations",
        [{"subject": "青嶺酒造", "label": "近い", "object": "霧沢町", "weight": 1.0}],
    )
    found = (await client.ok("POST", "/contexts/demo/communities/search", {"query": "青嶺酒造"}))["result"]
    assert found["stale"] is True and found["hits"]


@pytest.mark.anyio
async def test_artifact_layout(client: Client) -> None:
    await graph(client, "g", cliques("n", 30, 4))
    report = await build(client, "g")
    communities = await analysis(client, "g")
    assert report["levels"] == 2
    passages = await artifact(client, "g::communities")
    assert sorted(passages) == sorted(["communities:manifest"] + [f"community:{c['id']}" for c in communities])
    manifest = passages["communities:manifest"]
    assert manifest.startswith('{"taguru_communities":1,"algorithm":"louvain-cc/1","source_context":"g",')
    doc = json.loads(manifest)
    assert doc["revision"] == (await client.ok("GET", "/contexts/g"))["result"]["revision"]
    assert doc["communities"] == [
        {k: c[k] for k in ("id", "level", "fingerprint", "concept_count", "parent") if k in c} for c in communities
    ]
    leaf = communities[0]
    assert await members(client, "g::communities", leaf["id"]) == sorted(
        (m["name"], m["strength"]) for m in leaf["members"]
    )
    parent = next(c for c in communities if c["level"] == 1)
    edges = (
        await client.ok(
            "POST", "/contexts/g::communities/query", {"subject": f"community:{parent['id']}", "label": "includes"}
        )
    )["result"]["matches"]
    assert sorted(e["object"] for e in edges) == sorted(f"community:{k}" for k in parent["children"])
    listed = await client.ok("GET", "/contexts/g::communities/sources?prefix=community:L0-0")
    assert f"fingerprint:{leaf['fingerprint']}" in listed["result"]["entries"][0]["tags"]
    described = (await client.ok("GET", "/contexts/g::communities"))["result"]
    assert described["description"] == "Community analysis of 'g' (taguru communities)"


@pytest.mark.anyio
async def test_a_second_build_reuses_everything_and_changes_nothing(client: Client) -> None:
    await graph(client, "g", cliques("n", 30, 4))
    first = await build(client, "g")
    before = await artifact(client, "g::communities")
    fingerprints = [(c["id"], c["fingerprint"]) for c in await analysis(client, "g")]
    revision = (await client.ok("GET", "/contexts/g::communities"))["result"]["revision"]
    second = await build(client, "g")
    assert (second["summaries_generated"], second["summaries_reused"], second["rebuilt_from_scratch"]) == (
        0,
        first["communities"],
        False,
    )
    assert await artifact(client, "g::communities") == before
    assert [(c["id"], c["fingerprint"]) for c in await analysis(client, "g")] == fingerprints
    # records already in place are not rewritten: only the manifest is
    after = (await client.ok("GET", "/contexts/g::communities"))["result"]["revision"]
    assert (after["graph"], after["passages"]) == (revision["graph"], revision["passages"] + 2)  # drop + store


@pytest.mark.anyio
async def test_into_and_dry_run(client: Client) -> None:
    await graph(client, "g", cliques("n", 4))
    dry = await build(client, "g", dry_run=True)
    assert dry["dry_run"] is True and dry["summaries_generated"] == dry["communities"] > 0
    status, _b, _h = await client.call("GET", "/contexts/g::communities")
    assert status == 404
    report = await build(client, "g", into="elsewhere")
    assert report["derived"] == "elsewhere"
    found = await client.ok("POST", "/contexts/g/communities/search", {"query": "n0-0", "derived": "elsewhere"})
    assert found["result"]["hits"]
    # an artifact context derived from another context is never overwritten
    await graph(client, "h", cliques("m", 3))
    with pytest.raises(BuildFailed, match="'elsewhere' holds the artifact of 'g', not 'h'"):
        await build(client, "h", into="elsewhere")


# ----- incremental builds with the chat provider ----------------------------------------


@pytest.mark.anyio
async def test_provider_is_called_only_for_changed_communities(client: Client, chat: tuple[FakeChat, str]) -> None:
    fake, url = chat
    config = ProviderConfig(url, "tiny-model", "sekret", 5.0)
    await graph(client, "g", cliques("n", 30, 4))
    first = await build(client, "g", provider_config=config)
    communities = await analysis(client, "g")
    assert first["provider_calls"] == len(fake.requests) == len(communities)
    request = fake.requests[0]
    assert request["model"] == "tiny-model" and request["temperature"] == 0
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert " —近い→ " in request["messages"][1]["content"]
    assert set(fake.auth) == {"Bearer sekret"}
    stored = await artifact(client, "g::communities")
    assert stored[f"community:{communities[0]['id']}"].startswith("Theme ")  # the answer, trimmed

    again = await build(client, "g", provider_config=config)
    assert again["provider_calls"] == 0 and again["summaries_reused"] == len(communities)

    await client.ok(
        "POST", "/contexts/g/associations", [{"subject": "n7-1", "label": "近い", "object": "n7-2", "weight": 0.5}]
    )
    changed_before = {c["fingerprint"] for c in communities}
    now = await analysis(client, "g")
    changed = [c for c in now if c["fingerprint"] not in changed_before]
    assert [c["id"] for c in now] == [c["id"] for c in communities]
    assert len(changed) == 2  # the leaf holding n7-* and its parent
    third = await build(client, "g", provider_config=config)
    assert third["provider_calls"] == third["summaries_generated"] == 2
    assert third["summaries_reused"] == len(now) - 2


@pytest.mark.anyio
async def test_provider_failures_are_clear_and_bounded(client: Client, chat: tuple[FakeChat, str]) -> None:
    fake, url = chat
    await graph(client, "g", cliques("n", 3))
    fake.mode = "down"
    with pytest.raises(BuildFailed) as err:
        await build(client, "g", provider_config=ProviderConfig(url, "m", "", 5.0))
    assert str(err.value) == f"the summary provider at {url} failed 3 times; last: HTTP 503"
    assert len(fake.requests) == 3
    status, _b, _h = await client.call("GET", "/contexts/g::communities")
    assert status == 404  # nothing was written

    fake.mode, fake.requests = "empty", []
    with pytest.raises(BuildFailed, match="unusable answer: the answer is empty"):
        await build(client, "g", provider_config=ProviderConfig(url, "m", "", 5.0))
    assert len(fake.requests) == 1

    fake.mode = "slow"
    with pytest.raises(BuildFailed, match=r"last: no answer within 0.2s \(TAGURU_EXTRACT_TIMEOUT_SECS\)"):
        await build(client, "g", provider_config=ProviderConfig(url, "m", "", 0.2))

    fake.mode, fake.requests = "flaky", []
    report = await build(client, "g", provider_config=ProviderConfig(url, "m", "", 5.0))
    assert report["provider_calls"] == report["communities"] + 1


# ----- failures leave the previous artifact ---------------------------------------------


class FailingProxy:
    """Forwards to the real server, but answers the Nth POST /import with a 503."""

    def __init__(self, target: str, fail_on: int) -> None:
        self.target = target
        self.fail_on = fail_on
        self.imports = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/import":
            self.imports += 1
            if self.imports == self.fail_on:
                return web.json_response(
                    {"status": "error", "code": "overloaded", "error": "injected", "time": 0.0}, status=503
                )
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization")}
        async with ClientSession() as session:
            async with session.request(
                request.method, self.target + request.path_qs, data=body or None, headers=headers
            ) as resp:
                return web.Response(
                    body=await resp.read(),
                    status=resp.status,
                    headers={"Content-Type": resp.headers.get("Content-Type", "application/json")},
                )


@pytest.mark.anyio
async def test_an_interrupted_build_leaves_the_previous_artifact(client: Client) -> None:
    await graph(client, "g", cliques("n", 30, 4))
    await build(client, "g")
    old_manifest = (await artifact(client, "g::communities"))["communities:manifest"]
    # change the graph so that most communities get new content under reused ids
    await client.ok(
        "POST",
        "/contexts/g/associations",
        [{"subject": f"n{i}-0", "label": "近い", "object": f"n{i}-3", "weight": 2.0} for i in range(30)],
    )
    proxy = FailingProxy(client.base, fail_on=3)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    front = TestServer(app)
    await front.start_server()
    try:
        with pytest.raises(BuildFailed, match="POST /import failed after 2 of 46 batches landed"):
            await build(client, "g", base=str(front.make_url("")).rstrip("/"), chunk_budget=1)
    finally:
        await front.close()

    # the old manifest still rules: searchable, reported stale, the evidence lane runs
    assert (await artifact(client, "g::communities"))["communities:manifest"] == old_manifest
    found = (await client.ok("POST", "/contexts/g/communities/search", {"query": "n5-1"}))["result"]
    assert found["stale"] is True and found["hits"]
    lane = await client.ok("POST", "/contexts/g/evidence", {"origins": ["n5-1"], "include_communities": True})
    assert lane["result"]["plan"]["lanes"]["communities"] == {"ran": True}

    # the next build never hands a half-written record's summary to the wrong community
    resumed = await build(client, "g")
    fresh = await build(client, "g", into="g-fresh")
    assert resumed["summaries_reused"] == 0 and fresh["rebuilt_from_scratch"] is True
    resumed_text = await artifact(client, "g::communities")
    fresh_text = await artifact(client, "g-fresh")
    resumed_text.pop("communities:manifest")
    fresh_text.pop("communities:manifest")
    assert resumed_text == fresh_text


@pytest.mark.anyio
async def test_vanished_communities_are_retracted_after_the_import(client: Client) -> None:
    await graph(client, "g", cliques("n", 6))
    first = await build(client, "g")
    await client.ok("POST", "/contexts/g/associations/retract", {"subject": "n5-0", "label": "link", "object": "n0-1"})
    for a, b in (("n5-0", "n5-1"), ("n5-0", "n5-2"), ("n5-1", "n5-2")):
        await client.ok("POST", "/contexts/g/associations/retract", {"subject": a, "label": "近い", "object": b})
    await client.ok("POST", "/contexts/g/associations/retract", {"subject": "n4-0", "label": "link", "object": "n5-1"})
    second = await build(client, "g")
    assert second["communities"] < first["communities"]
    assert second["retracted"] == first["communities"] - second["communities"]
    ids = {f"community:{c['id']}" for c in await analysis(client, "g")}
    assert set(await artifact(client, "g::communities")) == ids | {"communities:manifest"}


# ----- the command line -----------------------------------------------------------------


def run_cli(*argv: str) -> int:
    return taguru_main(["communities", *argv])


def test_usage_errors_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli() == 2
    assert run_cli("--context", "a", "--group", "b") == 2
    assert run_cli("--group", "b", "--into", "x") == 2
    assert run_cli("--context", "a", "--url", "http://127.0.0.1:9", "http://127.0.0.1:9") == 2
    monkeypatch.setenv("TAGURU_EXTRACT_URL", "http://127.0.0.1:9/v1/chat/completions")
    monkeypatch.delenv("TAGURU_EXTRACT_MODEL", raising=False)
    assert run_cli("--context", "a", "--url", "http://127.0.0.1:9") == 2
    assert "TAGURU_EXTRACT_URL and TAGURU_EXTRACT_MODEL must be set together" in capsys.readouterr().err


def test_failures_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("--group", "b", "--url", "http://127.0.0.1:9") == 1
    assert run_cli("--context", "a", "--url", "http://127.0.0.1:9", "--json") == 1
    out = capsys.readouterr()
    assert json_report(out.out) == []
    assert "cannot reach the server at http://127.0.0.1:9" in out.err


@pytest.mark.anyio
async def test_cli_reads_the_provider_from_a_config_file(
    client: Client,
    chat: tuple[FakeChat, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake, url = chat
    for key in (
        "TAGURU_EXTRACT_URL",
        "TAGURU_EXTRACT_MODEL",
        "TAGURU_EXTRACT_API_KEY",
        "TAGURU_API_TOKEN",
        "TAGURU_API_TOKENS",
    ):
        monkeypatch.delenv(key, raising=False)
    config = tmp_path / "taguru.conf"
    config.write_text(f"TAGURU_EXTRACT_URL={url}\nTAGURU_EXTRACT_MODEL=m\nTAGURU_ADDR={client.base}\n")
    await graph(client, "g", cliques("n", 3))
    assert await anyio.to_thread.run_sync(run_cli, "--context", "g", "--config", str(config)) == 0
    assert len(fake.requests) == (await build(client, "g", dry_run=True))["communities"]
    assert "summaries" in capsys.readouterr().out
    # --dry-run calls no LLM
    fake.requests = []
    await client.ok("POST", "/contexts/g/associations", [{"subject": "x", "label": "r", "object": "y", "weight": 1}])
    assert await anyio.to_thread.run_sync(run_cli, "--context", "g", "--config", str(config), "--dry-run") == 0
    assert fake.requests == []


# ----- extractive summaries --------------------------------------------------------------


def leaf(members: list[str], facts: list[tuple[str, str, str, float]]) -> dict[str, Any]:
    return {
        "id": "L0-0",
        "level": 0,
        "concept_count": len(members),
        "members": [{"name": m, "strength": 1.0} for m in members],
        "top_associations": [
            {"subject": s, "label": lab, "object": o, "weight": w, "count": 1} for s, lab, o, w in facts
        ],
    }


def test_japanese_leaf_summary_names_the_theme_and_the_contested_facts() -> None:
    text = leaf_summary(
        leaf(
            ["青嶺酒造", "高瀬", "霧沢川", "井戸水", "雲居県"],
            [
                ("青嶺酒造", "杜氏", "高瀬", 1.0),
                ("青嶺酒造", "所在県", "雲居県", 1.0),
                ("青嶺酒造", "仕込み水", "霧沢川", 1.0),
                ("青嶺酒造", "仕込み水", "井戸水", -1.0),
                ("高瀬", "出身地", "霧沢川", -0.5),
            ],
        )
    )
    assert text == (
        "「青嶺酒造」「高瀬」「霧沢川」を中心とする概念のまとまり（5個）。ほかに「井戸水」「雲居県」などを含む。\n\n"
        "青嶺酒造の杜氏は高瀬。所在県は雲居県。\n\n"
        "異論のある事実：青嶺酒造の仕込み水については「霧沢川」「井戸水」（否定）と食い違う記述がある。"
        "高瀬の出身地は霧沢川ではない（重み-0.50）。"
    )


def test_english_leaf_summary() -> None:
    text = leaf_summary(
        leaf(
            ["alpha", "beta", "gamma brewery", "delta"],
            [("alpha", "connects to", "beta", 2.0), ("gamma brewery", "located in", "delta", -1.0)],
        )
    )
    assert text == (
        "This community centres on alpha, beta and gamma brewery (4 concepts). It also includes delta."
        "\n\nalpha connects to beta.\n\nContested: gamma brewery located in delta is negated "
        "(weight -1.00)."
    )
    assert first_sentence(text) == "This community centres on alpha, beta and gamma brewery (4 concepts)."


def test_parent_summary_quotes_its_children_in_content_order() -> None:
    small = leaf(["a1", "a2"], [("a1", "r", "a2", 1.0)])
    big = dict(leaf(["b1", "b2", "b3"], [("b1", "r", "b2", 1.0)]), id="L0-1")
    parent = {"id": "L1-0", "level": 1, "concept_count": 5, "children": ["L0-0", "L0-1"]}
    hierarchy = Hierarchy([small, big, parent])
    summaries = {"L0-0": leaf_summary(small), "L0-1": leaf_summary(big)}
    assert parent_summary(parent, hierarchy, summaries) == (
        "This higher-level grouping spans b1 and a1 (2 subgroups, 5 concepts).\n\n"
        "This community centres on b1, b2 and b3 (3 concepts).\n"
        "This community centres on a1 and a2 (2 concepts)."
    )
