"""Background chores and opt-in logs: auto-compaction (TAGURU_AUTO_COMPACT, TAGURU_AUTO_COMPACT_RATIO) on the
flush ticker, and the redacted search log (TAGURU_LOG_SEARCHES), which never carries query text."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from conftest import Client, start_client

from taguru_server.server.config import load_settings

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def serving(settings_factory: Any, **env: str) -> AsyncIterator[Client]:
    server, client, session = await start_client(settings_factory(**env))
    try:
        yield client
    finally:
        await session.close()
        await server.close()


async def metric(client: Client, sample: str) -> float:
    async with client.session.get(client.base + "/metrics") as resp:
        text = (await resp.read()).decode()
    line = next(line for line in text.splitlines() if line.startswith(sample + " "))
    return float(line.rsplit(" ", 1)[1])


def rows(n: int) -> list[dict[str, Any]]:
    return [
        {"subject": f"蔵{i}", "label": "杜氏", "object": f"人{i}", "weight": 1.0, "source": "a.md"} for i in range(n)
    ]


async def with_dead_edges(client: Client, live: int, dead: int) -> None:
    await client.ok("PUT", "/contexts/sake", {"description": "d"})
    await client.ok("POST", "/contexts/sake/associations", rows(live + dead))
    for i in range(dead):
        retract = {"subject": f"蔵{i}", "label": "杜氏", "object": f"人{i}"}
        await client.ok("POST", "/contexts/sake/associations/retract", retract)


async def test_the_ticker_compacts_a_context_past_the_ratio(settings_factory) -> None:
    with structlog.testing.capture_logs() as logs:
        env = {"TAGURU_FLUSH_SECS": "1", "TAGURU_AUTO_COMPACT": "1", "TAGURU_AUTO_COMPACT_RATIO": "0.4"}
        async with serving(settings_factory, **env) as client:
            await with_dead_edges(client, live=2, dead=3)  # 0.6 > 0.4
            for _ in range(40):
                if await metric(client, 'taguru_auto_compactions_total{outcome="ok"}') == 1:
                    break
                await asyncio.sleep(0.1)
            assert await metric(client, 'taguru_auto_compactions_total{outcome="ok"}') == 1
            assert await metric(client, "taguru_auto_compact_last_success_timestamp_seconds") > 0
            stats = (await client.ok("GET", "/contexts/sake"))["result"]["stats"]
            assert stats["dead_edges"] == 0 and stats["associations"] == 2, stats
            recall = (await client.ok("POST", "/contexts/sake/recall", {"cue": "蔵4"}))["result"]
            assert [m["object"] for m in recall["matches"]] == ["人4"]
            await asyncio.sleep(1.5)  # nothing dead any more: no second compaction
            assert await metric(client, 'taguru_auto_compactions_total{outcome="ok"}') == 1
    [event] = [e for e in logs if e["event"] == "context compacted"]
    assert event["trigger"] == "auto" and event["context"] == "sake" and event["dead_edges"] == 3, event
    assert event["dead_ratio"] == pytest.approx(0.6) and event["image_persisted"] is True
    assert {"bytes_before", "bytes_after", "aliases_dropped"} <= set(event)


@pytest.mark.parametrize(
    "env",
    [{"TAGURU_AUTO_COMPACT": "0"}, {"TAGURU_AUTO_COMPACT": "1", "TAGURU_AUTO_COMPACT_RATIO": "0.6"}],
    ids=["off", "not-strictly-above"],
)
async def test_no_auto_compaction_when_off_or_not_strictly_past_the_ratio(settings_factory, env) -> None:
    async with serving(settings_factory, TAGURU_FLUSH_SECS="1", **env) as client:
        await with_dead_edges(client, live=2, dead=3)  # 0.6
        await asyncio.sleep(1.6)
        assert await metric(client, 'taguru_auto_compactions_total{outcome="ok"}') == 0
        assert (await client.ok("GET", "/contexts/sake"))["result"]["stats"]["dead_edges"] == 3


@pytest.mark.parametrize(
    ("env", "field", "value", "warning"),
    [
        ({"TAGURU_AUTO_COMPACT": "maybe"}, "auto_compact", True, "ignoring TAGURU_AUTO_COMPACT=maybe: not a "),
        (
            {"TAGURU_AUTO_COMPACT_RATIO": "1.5"},
            "auto_compact_ratio",
            0.5,
            "ignoring TAGURU_AUTO_COMPACT_RATIO=1.5: not a number between 0 and 1",
        ),
        (
            {"TAGURU_LOG_SEARCHES": "yes"},
            "log_searches",
            False,
            "ignoring TAGURU_LOG_SEARCHES=yes: not a recognized boolean (1/true or 0/false); using false",
        ),
        (
            {"TAGURU_RETRIEVAL_CACHE_BYTES": "lots"},
            "retrieval_cache_bytes",
            33554432,
            "ignoring TAGURU_RETRIEVAL_CACHE_BYTES=lots: not a number; using 33554432",
        ),
        (
            {"TAGURU_RETRIEVAL_CACHE_BYTES": "16384"},
            "retrieval_cache_bytes",
            16384,
            "TAGURU_RETRIEVAL_CACHE_BYTES is set but too small to admit a realistic response",
        ),
    ],
)
def test_a_bad_value_warns_and_keeps_the_default(env, field, value, warning) -> None:
    with structlog.testing.capture_logs() as logs:
        settings = load_settings(env)
    assert getattr(settings, field) == value
    assert [e for e in logs if e["event"].startswith(warning)], logs


QUERY_TEXT = "秘密の問い合わせ"


async def test_the_search_log_is_redacted(settings_factory) -> None:
    with structlog.testing.capture_logs() as logs:
        async with serving(settings_factory, TAGURU_LOG_SEARCHES="1") as client:
            await client.ok("PUT", "/contexts/sake", {"description": "d"})
            await client.ok(
                "POST",
                "/contexts/sake/associations",
                [{"subject": QUERY_TEXT, "label": "杜氏", "object": "高瀬", "weight": 1.0, "source": "a.md"}],
            )
            await client.ok("POST", "/contexts/sake/sources", {"passages": {"a.md": f"{QUERY_TEXT}は高瀬。"}})
            for _ in range(2):  # the second is a cache hit
                await client.ok("POST", "/contexts/sake/sources/search", {"query": QUERY_TEXT})
            await client.ok("POST", "/contexts/sake/recall", {"cue": QUERY_TEXT})
            await client.ok("POST", "/query", {"contexts": ["sake"], "subject": QUERY_TEXT})
            await client.ok("POST", "/contexts/sake/resolve", {"cue": QUERY_TEXT})
            await client.ok("POST", "/contexts/sake/activate", {"origins": [QUERY_TEXT]})
            await client.ok("POST", "/contexts/sake/explore", {"origins": [QUERY_TEXT]})
    served = [e for e in logs if e["event"] == "search.served"]
    assert [(e["op"], e.get("cached", False)) for e in served] == [
        ("search_passages", False),
        ("search_passages", True),
        ("recall", False),
        ("query", False),
        ("resolve", False),
        ("activate", False),
        ("explore", False),
    ]
    assert served[0]["context"] == "sake" and served[0]["hits"] == 1 and "top_score" in served[0]
    assert served[3]["contexts"] == "sake" and served[4]["tier"] in ("lexical", "weak_lexical")
    assert QUERY_TEXT not in json.dumps(logs, ensure_ascii=False, default=str)


async def test_the_search_log_is_off_by_default(settings_factory) -> None:
    with structlog.testing.capture_logs() as logs:
        async with serving(settings_factory) as client:
            await client.ok("PUT", "/contexts/sake", {"description": "d"})
            await client.ok("POST", "/contexts/sake/recall", {"cue": "x"})
    assert not [e for e in logs if e["event"] == "search.served"]
