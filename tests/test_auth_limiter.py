"""TAGURU_AUTH_FAIL_LIMIT_PER_MIN: past the limit of failed authentications a client gets 429."""

from __future__ import annotations

import pytest
from conftest import start_client

from taguru_server.server.auth import FailedAuthLimiter
from taguru_server.server.errors import status_of
from taguru_server.store.errors import ApiError


@pytest.mark.anyio
async def test_failed_attempts_turn_into_429_but_valid_keys_still_work(settings_factory) -> None:
    server, client, session = await start_client(
        settings_factory(TAGURU_API_TOKEN="good", TAGURU_AUTH_FAIL_LIMIT_PER_MIN="3")
    )
    try:
        for _ in range(3):
            status, body, _h = await client.call("GET", "/contexts", token="bad")
            assert (status, body["code"]) == (401, "unauthorized")
        status, body, headers = await client.call("GET", "/contexts", token="bad")
        assert (status, body["code"]) == (429, "rate_limited")
        assert body["error"].startswith("too many failed authentication attempts — retry in ")
        assert int(headers["Retry-After"]) >= 1
        status, _body, _h = await client.call("GET", "/contexts", token="good")
        assert status == 200
        status, _body, _h = await client.call("GET", "/health")  # probes are exempt
        assert status == 200
    finally:
        await session.close()
        await server.close()


def test_the_window_slides() -> None:
    now = [0.0]
    limiter = FailedAuthLimiter(2, clock=lambda: now[0])
    limiter.check("a")
    limiter.failed("a")
    now[0] = 30.0
    limiter.failed("a")
    with pytest.raises(ApiError) as err:
        limiter.check("a")
    assert status_of(err.value) == 429 and err.value.headers["Retry-After"] == "30"
    limiter.check("b")  # per address
    now[0] = 60.0
    limiter.check("a")  # the first failure left the window
    assert FailedAuthLimiter(0).check("a") is None  # 0 disables


@pytest.mark.anyio
async def test_per_key_request_budget(settings_factory) -> None:
    server, client, session = await start_client(
        settings_factory(TAGURU_API_TOKENS="a:ta,b:tb", TAGURU_RATE_LIMIT_PER_MIN="2")
    )
    try:
        for _ in range(2):
            status, _b, _h = await client.call("GET", "/contexts", token="ta")
            assert status == 200
        status, body, headers = await client.call("GET", "/contexts", token="ta")
        assert (status, body["code"]) == (429, "rate_limited")
        assert body["error"].startswith("key 'a' is over its request budget (2 per minute) — retry in ")
        assert int(headers["Retry-After"]) >= 1
        status, _b, _h = await client.call("GET", "/contexts", token="tb")  # per key
        assert status == 200
    finally:
        await session.close()
        await server.close()
