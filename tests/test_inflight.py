"""TAGURU_MAX_CONCURRENT_REQUESTS: past the ceiling a request gets 503 overloaded with Retry-After."""

from __future__ import annotations

import asyncio

import pytest
from conftest import start_client

from taguru_server.server.state import INFLIGHT_KEY


@pytest.mark.anyio
async def test_in_flight_ceiling(settings_factory) -> None:
    server, client, session = await start_client(settings_factory(TAGURU_MAX_CONCURRENT_REQUESTS="2"))
    try:
        running = server.app[INFLIGHT_KEY]
        running.count = 2  # two requests are being served
        status, body, headers = await client.call("GET", "/contexts")
        assert (status, body["code"]) == (503, "overloaded")
        assert body["error"] == (
            "server is at its in-flight ceiling (2 requests) — retry shortly "
            "(TAGURU_MAX_CONCURRENT_REQUESTS tunes this)"
        )
        assert headers["Retry-After"] == "1"
        for probe in ("/health", "/live", "/version", "/metrics"):  # probes skip the ceiling
            status, _body, _h = await client.call("GET", probe)
            assert status == 200, probe
        running.count = 1
        status, _body, _h = await client.call("GET", "/contexts")
        assert status == 200 and running.count == 1  # released after the call
        results = await asyncio.gather(*(client.call("GET", "/contexts") for _ in range(5)))
        assert all(r[0] in (200, 503) for r in results)
        assert running.count == 1
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
async def test_zero_disables_the_ceiling(settings_factory) -> None:
    server, client, session = await start_client(settings_factory(TAGURU_MAX_CONCURRENT_REQUESTS="0"))
    try:
        server.app[INFLIGHT_KEY].count = 10_000
        status, _body, _h = await client.call("GET", "/contexts")
        assert status == 200
    finally:
        await session.close()
        await server.close()
