"""Replays the reference server's recorded evidence exchanges, byte accounting included."""

from __future__ import annotations

import pytest
from conftest import exact, load_fixture, normalize, start_client
from reference_setups import EVIDENCE_SETUPS, SETUP_TOKENS


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(EVIDENCE_SETUPS))
async def test_evidence_fixture(settings_factory, name: str) -> None:
    fixture = load_fixture("http", name)
    steps, context, env, token = EVIDENCE_SETUPS[name]
    server, client, session = await start_client(settings_factory(**env))
    try:
        for method, path, body in steps:
            if body is None:
                status, parsed, _h = await client.call(method, path, content_type=None, token=SETUP_TOKENS.get(name))
            else:
                status, parsed, _h = await client.call(method, path, body, token=SETUP_TOKENS.get(name))
            assert status == 200, (path, parsed)
        path = fixture["route"].replace("{name}", context)
        status, parsed, headers = await client.call("POST", path, fixture["request"], token=token)
        assert status == fixture["status"], parsed
        assert exact(normalize(parsed)) == exact(normalize(fixture["response"]))
        if status == 200:
            assert "Server-Timing" in headers
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
async def test_malformed_request_bytes_are_the_recorded_42(settings_factory) -> None:
    """The 422 column is computed on the exact bytes the reference harness sent."""
    server, client, session = await start_client(settings_factory())
    try:
        await client.ok("PUT", "/contexts/malformed-corpus", content_type=None)
        raw = b'{"budget":"not-an-object","origins":["x"]}'
        assert len(raw) == 42
        status, parsed, _h = await client.call("POST", "/contexts/malformed-corpus/evidence", raw=raw)
        assert status == 422
        assert parsed["error"] == load_fixture("http", "error_malformed_request")["response"]["error"]
    finally:
        await session.close()
        await server.close()
