"""TAGURU_REQUEST_TIMEOUT_SECS: work that runs past the budget without yielding is refused, never answered 200."""

from __future__ import annotations

import time

import pytest
from conftest import start_client

from taguru_server.server.state import REGISTRY_KEY


@pytest.mark.anyio
async def test_blocking_work_past_the_deadline_is_a_408(settings_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    server, client, session = await start_client(settings_factory(TAGURU_REQUEST_TIMEOUT_SECS="1"))
    try:
        registry = server.app[REGISTRY_KEY]
        names = registry.names

        def slow_names() -> list[str]:
            time.sleep(1.2)  # holds the loop: the deadline cannot interrupt it
            return list(names())

        monkeypatch.setattr(registry, "names", slow_names)
        status, body, _h = await client.call("GET", "/contexts")
        assert (status, body["code"]) == (408, "timeout")
        assert body["error"] == (
            "request exceeded the 1s budget; narrow the query (TAGURU_REQUEST_TIMEOUT_SECS tunes this)"
        )
        monkeypatch.setattr(registry, "names", names)
        status, _body, _h = await client.call("GET", "/contexts")
        assert status == 200
    finally:
        await session.close()
        await server.close()
