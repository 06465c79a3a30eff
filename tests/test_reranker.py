"""The optional reranker: reorder only, bounded, visible when it degrades."""

from __future__ import annotations

import random
from typing import Any

import anyio
import attrs
import pytest
import structlog
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client
from fake_reranker import FakeReranker

from taguru_server.server.app import build_app
from taguru_server.server.providers.reranker import RerankSettings
from taguru_server.stages.model import RerankVerdict

KEY = "sekrit-rerank-key-should-never-leak"
PASSAGES = {
    "a.md": "高瀬は青嶺酒造の杜氏である。仕込み水は霧沢川。",
    "b.md": "青嶺酒造の代表銘柄は霧の雫。",
    "c.md": "白波酒蔵は霧沢町のもう一つの蔵元。",
    "d.md": "霧沢町は雲居県の山あいの町。",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _seed(client: Client) -> None:
    await client.ok("PUT", "/contexts/sake", content_type=None)
    await client.ok("POST", "/contexts/sake/sources", {"passages": PASSAGES})
    await client.ok(
        "POST",
        "/contexts/sake/associations",
        [
            {"subject": "青嶺酒造", "label": "杜氏", "object": "高瀬", "weight": 1.0, "source": "a.md", "paragraph": 0},
            {
                "subject": "青嶺酒造",
                "label": "銘柄",
                "object": "霧の雫",
                "weight": 2.0,
                "source": "b.md",
                "paragraph": 0,
            },
        ],
    )


async def _start(
    tmp_path, fake: FakeReranker | None, clock: Any = None, timeout: int = 5, url: str | None = None, **env: str
):
    from taguru_server.server.config import load_settings

    provider = None
    if fake is not None:
        provider = TestServer(fake.app())
        await provider.start_server()
        url = str(provider.make_url("/rerank"))
    settings = load_settings({"TAGURU_DATA_DIR": str(tmp_path / "data"), **env})
    rerank = RerankSettings(url, "stub-reranker", KEY, timeout) if url else None
    server = TestServer(build_app(settings, rerank=rerank, **({"clock": clock} if clock else {})))
    await server.start_server()
    session = ClientSession()
    client = Client(session, str(server.make_url("")).rstrip("/"))
    await _seed(client)

    async def close() -> None:
        await session.close()
        await server.close()
        if provider is not None:
            await provider.close()

    return client, close


BODY = {"origins": ["青嶺酒造"], "text_fallback_query": "青嶺酒造 杜氏 霧沢町", "search_limit": 10}


async def _evidence(client: Client, **extra: Any) -> dict[str, Any]:
    return (await client.ok("POST", "/contexts/sake/evidence", {**BODY, **extra}))["result"]


def _without_reranker(result: dict[str, Any]) -> dict[str, Any]:
    out = dict(result)
    out["plan"] = {k: v for k, v in result["plan"].items() if k != "reranker"}
    return out


@pytest.mark.anyio
async def test_good_provider_reorders_admission_not_membership(tmp_path) -> None:
    fake = FakeReranker("reverse")
    client, close = await _start(tmp_path, fake)
    try:
        base = await _evidence(client)
        assert base["plan"]["reranker"] == {"configured": True, "ran": False}
        ranked = await _evidence(client, rerank={"model": "stub-reranker"})
        assert ranked["plan"]["reranker"] == {"configured": True, "ran": True, "model": "stub-reranker"}
        assert [i["candidate_id"] for i in ranked["items"]] != [i["candidate_id"] for i in base["items"]]
        assert sorted(i["candidate_id"] for i in ranked["items"]) == sorted(i["candidate_id"] for i in base["items"])
        sent = fake.requests[-1]
        assert set(sent) == {"model", "query", "documents", "top_n"}
        assert sent["query"] == BODY["text_fallback_query"] and sent["top_n"] == len(sent["documents"])
        assert "青嶺酒造 杜氏 高瀬" in sent["documents"]
        assert fake.authorizations[-1] == f"Bearer {KEY}"
        small = await _evidence(client, rerank={}, budget={"max_items": 2})
        assert small["plan"]["reranker"]["ran"] is True and len(small["items"]) == 2
    finally:
        await close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "reason", "hits"),
    [
        ("status500", "provider_error", 2),
        ("status503", "provider_error", 2),
        ("status429", "provider_error", 2),
        ("status404", "provider_error", 1),
        ("garbage", "provider_error", 1),
        ("no_results", "provider_error", 1),
        ("float_index", "provider_error", 1),
        ("oversize", "provider_error", 1),
        ("wrong_length", "invalid_permutation", 1),
        ("repeated_index", "invalid_permutation", 1),
    ],
)
async def test_every_fault_mode_degrades_to_the_deterministic_package(tmp_path, mode, reason, hits) -> None:
    fake = FakeReranker(mode)
    client, close = await _start(tmp_path, fake)
    try:
        base = await _evidence(client)
        degraded = await _evidence(client, rerank={})
        assert degraded["plan"]["reranker"] == {"configured": True, "ran": False, "reason": reason}
        assert _without_reranker(degraded) == _without_reranker(base)
        assert fake.hits == hits
    finally:
        await close()


@pytest.mark.anyio
async def test_refused_connection_and_slow_provider(tmp_path) -> None:
    client, close = await _start(tmp_path, None, url="http://127.0.0.1:9/rerank", timeout=1)
    try:
        result = await _evidence(client, rerank={})
        assert result["plan"]["reranker"]["reason"] == "provider_error"
    finally:
        await close()
    fake = FakeReranker("slow", delay=2.5)
    client, close = await _start(tmp_path / "slow", fake, timeout=1)
    try:
        result = await _evidence(client, rerank={})
        assert result["plan"]["reranker"]["reason"] == "provider_error"  # slower than its own timeout
        assert fake.hits == 2  # one retry, never more
    finally:
        await close()


@pytest.mark.anyio
async def test_deadline_bound_timeout_is_not_retried(tmp_path) -> None:
    fake = FakeReranker("slow", delay=3.0)
    client, close = await _start(tmp_path, fake, timeout=5, TAGURU_REQUEST_TIMEOUT_SECS="1")
    try:
        result = await _evidence(client, rerank={})
        assert result["plan"]["reranker"]["reason"] == "timeout"
        assert fake.hits == 1
    finally:
        await close()


@pytest.mark.anyio
async def test_pre_flight_refusals_make_no_call(tmp_path) -> None:
    fake = FakeReranker("ok")
    client, close = await _start(tmp_path, fake)
    try:
        mismatch = await _evidence(client, rerank={"model": "a-different-model"})
        assert mismatch["plan"]["reranker"] == {"configured": True, "ran": False, "reason": "model_mismatch"}
        empty = await _evidence(client, rerank={}, search_limit=0, origins=[])
        assert empty["plan"]["reranker"]["reason"] == "empty_pool"
        assert fake.hits == 0
    finally:
        await close()


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{") and line.split(" ")[0] == name:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics")


@pytest.mark.anyio
async def test_breaker_opens_short_circuits_and_half_opens(tmp_path) -> None:
    clock = Clock()
    fake = FakeReranker("status500")
    client, close = await _start(tmp_path, fake, clock=clock)
    try:
        first = await _evidence(client, rerank={})
        assert first["plan"]["reranker"]["reason"] == "provider_error" and fake.hits == 2
        second = await _evidence(client, rerank={})
        assert second["plan"]["reranker"]["reason"] == "circuit_open" and fake.hits == 3
        third = await _evidence(client, rerank={})
        assert third["plan"]["reranker"]["reason"] == "circuit_open" and fake.hits == 3
        _s, metrics, _h = await client.call("GET", "/metrics")
        assert _metric(metrics, "taguru_rerank_breaker_state") == 1
        assert _metric(metrics, "taguru_rerank_breaker_consecutive_failures") == 3
        assert _metric(metrics, "taguru_rerank_breaker_opened_total") == 1
        assert _metric(metrics, "taguru_rerank_breaker_short_circuits_total") == 2
        assert 'taguru_rerank_outcomes_total{outcome="circuit_open"} 2.0' in metrics
        assert 'taguru_rerank_duration_seconds_bucket{le="1"}' in metrics
        clock.now += 30
        fake.mode = "ok"
        probe = await _evidence(client, rerank={})
        assert probe["plan"]["reranker"]["ran"] is True and fake.hits == 4
        _s, metrics, _h = await client.call("GET", "/metrics")
        assert _metric(metrics, "taguru_rerank_breaker_state") == 0
        assert _metric(metrics, "taguru_rerank_breaker_consecutive_failures") == 0
    finally:
        await close()


@pytest.mark.anyio
async def test_failed_probe_reopens(tmp_path) -> None:
    clock = Clock()
    fake = FakeReranker("status404")
    client, close = await _start(tmp_path, fake, clock=clock)
    try:
        for _ in range(3):
            await _evidence(client, rerank={})
        assert fake.hits == 3
        clock.now += 31
        again = await _evidence(client, rerank={})
        assert again["plan"]["reranker"]["reason"] == "provider_error" and fake.hits == 4
        after = await _evidence(client, rerank={})
        assert after["plan"]["reranker"]["reason"] == "circuit_open" and fake.hits == 4
    finally:
        await close()


@pytest.mark.anyio
async def test_candidate_text_and_key_stay_private(tmp_path) -> None:
    fake = FakeReranker("status500")
    client, close = await _start(tmp_path, fake)
    try:
        with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            result = await _evidence(client, rerank={})
        assert any("高瀬" in doc for doc in fake.requests[0]["documents"])
        assert fake.authorizations[0] == f"Bearer {KEY}"
        _s, metrics, _h = await client.call("GET", "/metrics")
        for text in ("高瀬", KEY, "霧沢"):
            assert text not in repr(logs) and text not in metrics and text not in repr(result["plan"])
        assert 'taguru_rerank_outcomes_total{outcome="provider_error"} 1.0' in metrics
        assert any(e["event"] == "transient reranker failure; retrying" for e in logs)
    finally:
        await close()


@pytest.mark.anyio
async def test_unconfigured_server_has_no_breaker_families(client: Client) -> None:
    await _seed(client)
    result = (await client.ok("POST", "/contexts/sake/evidence", {**BODY, "rerank": {}}))["result"]
    assert result["plan"]["reranker"] == {"configured": False, "ran": False, "reason": "not_configured"}
    _s, metrics, _h = await client.call("GET", "/metrics")
    assert "taguru_rerank_breaker_state" not in metrics
    assert 'taguru_rerank_outcomes_total{outcome="not_configured"} 1.0' in metrics
    assert 'taguru_rerank_outcomes_total{outcome="ok"} 0.0' in metrics


@attrs.frozen
class RandomPermutations:
    seed: int
    configured: bool = True
    model: str | None = "random"

    async def rerank(self, query, documents, remaining):
        order = list(range(len(documents)))
        random.Random(self.seed).shuffle(order)
        return RerankVerdict(tuple(order), None)


def test_invariants_hold_with_random_permutations() -> None:
    from stage_support import memory_registry, services
    from test_evidence_properties import check_invariants, random_corpus, random_request

    from taguru_server.pipeline import run_graph
    from taguru_server.server.evidence import GRAPH
    from taguru_server.stages.model import CONTEXT, REQUEST, SERVICES

    for seed in range(120):
        rng = random.Random(seed)
        ctx = random_corpus(rng)
        req = attrs.evolve(random_request(rng), rerank_requested=True)
        svc = attrs.evolve(services(memory_registry()), reranker=RandomPermutations(seed))
        run = anyio.run(run_graph, GRAPH, {REQUEST: req, CONTEXT: ctx, SERVICES: svc})
        assert run.failure is None
        check_invariants(run, req)
