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


@pytest.mark.anyio
async def test_a_write_past_the_deadline_is_refused_and_changes_nothing(
    settings_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client, session = await start_client(settings_factory(TAGURU_REQUEST_TIMEOUT_SECS="1"))
    try:
        await client.ok("PUT", "/contexts/k", {"description": "d"})
        edge = {"subject": "a", "label": "rel", "object": "b", "weight": 1.0}
        await client.ok("POST", "/contexts/k/associations", [edge])
        before = (await client.ok("GET", "/contexts/k"))["result"]["stats"]
        ctx = server.app[REGISTRY_KEY].get("k")
        assert ctx is not None
        assert_association = ctx.assert_association

        def slow_assert(*args, **kwargs):  # type: ignore[no-untyped-def]
            got = assert_association(*args, **kwargs)
            time.sleep(1.2)  # the write's own work spends the budget
            return got

        monkeypatch.setattr(ctx, "assert_association", slow_assert)
        status, body, _h = await client.call("POST", "/contexts/k/associations", [{**edge, "object": "c"}])
        assert (status, body["code"]) == (408, "timeout"), body
        monkeypatch.setattr(ctx, "assert_association", assert_association)
        assert (await client.ok("GET", "/contexts/k"))["result"]["stats"] == before
        assert server.app[REGISTRY_KEY].get("k") is ctx  # undone in place, not reloaded
    finally:
        await session.close()
        await server.close()


def test_an_import_past_its_deadline_keeps_exactly_the_landed_prefix(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from taguru_server.store.errors import ApiError
    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.transfer import importer

    lines = []
    for i in range(7):
        lines.append({"taguru_batch": 1, "context": "k", "source": f"s{i}", "create": {"description": "d"}})
        lines.append({"subject": f"a{i}", "label": "rel", "object": "b", "weight": 1.0})
    batches = importer.parse_stream("\n".join(json.dumps(x) for x in lines))
    clock = iter(range(1000))
    monkeypatch.setattr(importer.time, "monotonic", lambda: float(next(clock)))
    registry = Registry(SqlitePersistence(tmp_path / "data"))
    # the clock ticks once per deadline check (before each batch, before each commit): 0 b0, 1 b1, 2 commit,
    # 3 b2, 4 b3, 5 commit -> spent: b0-b1 are durable, b2-b3 are undone
    with pytest.raises(ApiError) as refused:
        importer.run_import(registry, batches, commit_every=2, deadline=4.5, timeout_secs=1)
    err = refused.value
    assert err.code == "timeout" and err.integrity == "durable_prefix" and err.durable_batches == 2
    assert err.message.startswith("batch 3 of 7 (context 'k', source 's2') refused — the 2 batch(es) before it")
    registry.close()
    fresh = Registry(SqlitePersistence(tmp_path / "data"))
    ctx = fresh.get("k")
    assert ctx is not None and ctx.sources == ["s0", "s1"]
    fresh.close()


async def _trickle_body(port: int, per_second: int, seconds: float) -> tuple[bytes, float]:
    """POST an evidence body at `per_second` bytes a second; (the reply, seconds until it came)."""
    import asyncio

    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b'{"origins": ["a"]' + b" " * 4000 + b"}"
    writer.write(
        b"POST /contexts/none/evidence HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    sent = 0
    try:
        while sent < len(body) and time.monotonic() - started < seconds:
            step = max(per_second // 10, 1)
            writer.write(body[sent : sent + step])
            sent += step
            await writer.drain()
            try:
                reply = await asyncio.wait_for(reader.read(4096), 0.1)
                return reply, time.monotonic() - started
            except TimeoutError:
                continue
        return await asyncio.wait_for(reader.read(4096), 5), time.monotonic() - started
    finally:
        writer.close()


@pytest.mark.anyio
async def test_a_body_slower_than_the_minimum_rate_is_cut_off(
    settings_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taguru_server.server import middleware

    monkeypatch.setattr(middleware, "BODY_GRACE_SECS", 0.5)
    server, _client, session = await start_client(
        settings_factory(TAGURU_MIN_BODY_RATE="1000", TAGURU_REQUEST_TIMEOUT_SECS="30")
    )
    try:
        reply, took = await _trickle_body(server.port, 200, 10)  # 200 B/s against a floor of 1000 B/s
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert b"the request body arrived slower than 1000 bytes/s" in reply
        assert took < 2.0
        reply, _took = await _trickle_body(server.port, 20_000, 10)  # fast enough: answered (404: no context)
        assert reply.startswith(b"HTTP/1.1 404"), reply[:200]
    finally:
        await session.close()
        await server.close()
