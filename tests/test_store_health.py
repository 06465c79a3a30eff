"""What the probes say about the store, in process: `/health` answers whether writes can be made (the
registry's state and a probe of the backend), `/ready` whether reads can be served, and a refused
write logs one rate-limited line with its cause and nothing of the request."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import structlog
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client
from pg_support import backend
from process_support import free_port

from taguru_server.server import store_health
from taguru_server.server.app import build_app, open_registry
from taguru_server.store.errors import StorageFailed
from taguru_server.store.persist import write_probe
from taguru_server.store.persist.registry import Registry

SECRET = "秘密の主語-7f3a"  # stored and requested text: it must never reach a log line
EDGE = {"subject": SECRET, "label": "rel", "object": "b", "weight": 1.0}


class Served:
    def __init__(self, registry: Registry, client: Client) -> None:
        self.registry = registry
        self.client = client


@contextlib.asynccontextmanager
async def serving(settings: Any) -> AsyncIterator[Served]:
    """A server over a registry the test can reach into (to make its store refuse), with context `k` in it."""
    registry = open_registry(settings)
    server = TestServer(build_app(settings, registry))
    await server.start_server()
    session = ClientSession()
    client = Client(session, str(server.make_url("")).rstrip("/"))
    try:
        await client.ok("PUT", "/contexts/k", {"description": "health"})
        yield Served(registry, client)
    finally:
        await session.close()
        await server.close()
        registry.close()


@pytest.fixture
async def served(settings_factory: Any) -> AsyncIterator[Served]:
    """`serving` with the default settings, and one association in `k`."""
    async with serving(settings_factory()) as world:
        await world.client.ok("POST", "/contexts/k/associations", [EDGE])
        yield world


@pytest.fixture
def probe_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `/health` asks the backend afresh (no reuse of the last probe's answer)."""
    monkeypatch.setattr(store_health, "PROBE_INTERVAL_SECS", 0.0)


def refusing(kind: str, error: Exception | None = None) -> Any:
    def commit(writes: Any) -> None:  # the store's commit transaction (both the queued and the direct path)
        raise error if error is not None else StorageFailed(kind, "the injected phrase")

    return commit


def refusals(logs: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(e["kind"], e["reason"], e["suppressed_since_last"]) for e in logs if e["event"] == "store.write_refused"]


@pytest.mark.anyio
async def test_a_refused_write_logs_one_line_per_cause_and_counts_the_ones_left_out(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(store_health, "REFUSALS", store_health.RefusalLog(lambda: now[0]))
    client, store = served.client, served.registry.persistence
    write = [{**EDGE, "object": f"{SECRET}-object"}]

    async def refused(kind: str, status: int, error: Exception | None = None) -> None:
        store._run_prepared = refusing(kind, error)  # type: ignore[method-assign]
        got, body, _h = await client.call("POST", "/contexts/k/associations", write)
        assert got == status and body["code"] == ("storage_full" if status == 507 else "unhealthy"), body

    with structlog.testing.capture_logs() as logs:
        await refused("unavailable", 503)
        await refused("unavailable", 503)
        now[0] += 1
        await refused("storage_full", 507)  # another cause: its own line
        now[0] += 4
        await refused("unavailable", 503)
        now[0] += 5.5  # 10.5 s after the first line of this cause
        await refused("unavailable", 503)
        await refused("unavailable", 503, ValueError(f"a message quoting {SECRET}"))
    assert refusals(logs) == [
        ("unavailable", "the injected phrase", 0),
        ("storage_full", "the injected phrase", 0),
        ("unavailable", "the injected phrase", 2),
        ("unavailable", "ValueError", 0),  # a cause that is no backend phrase: its type, never its message
    ]
    assert all(e["log_level"] == "warning" for e in logs if e["event"] == "store.write_refused")
    assert SECRET not in json.dumps(logs, ensure_ascii=False, default=str)


@pytest.mark.anyio
async def test_a_write_the_store_cannot_even_begin_is_logged_as_refused(
    settings_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_health, "REFUSALS", store_health.RefusalLog())
    settings = settings_factory(TAGURU_WORKERS="2")  # a shared store: every write takes the store's write lock
    async with serving(settings) as world:
        client, registry = world.client, world.registry

        def no_lock() -> bool:
            raise StorageFailed("unavailable", "the lock phrase")

        registry.persistence.try_lock_writes = no_lock  # type: ignore[method-assign]
        with structlog.testing.capture_logs() as logs:
            for _ in range(3):
                got, body, _h = await client.call("POST", "/contexts/k/associations", [EDGE])
                assert (got, body["code"]) == (503, "unhealthy"), body
            assert (await client.call("GET", "/contexts/k"))[0] == 200  # a read is no refused write
        assert refusals(logs) == [("unavailable", "the lock phrase", 0)]
        assert SECRET not in json.dumps(logs, ensure_ascii=False, default=str)


@pytest.mark.anyio
async def test_ready_stays_200_while_writes_are_refused_and_health_says_unhealthy(served: Served) -> None:
    client, store = served.client, served.registry.persistence
    real_commit = store._run_prepared
    assert (await client.call("GET", "/health"))[0] == 200
    store._run_prepared = refusing("unavailable")  # type: ignore[method-assign]
    got, _body, _h = await client.call("POST", "/contexts/k/associations", [{**EDGE, "object": "c"}])
    assert got == 503
    status, body, _h = await client.call("GET", "/ready")
    assert (status, body) == (200, {"status": "ready", "version": body["version"]})
    stats = (await client.ok("GET", "/contexts/k"))["result"]["stats"]
    assert stats["associations"] == 1  # reads are served, and the refused write changed nothing
    status, body, _h = await client.call("GET", "/health")
    assert (status, body["status"], body["code"]) == (503, "error", "unhealthy"), body
    assert body["error"] == "the store is refusing writes (read-only, failing or full disk?); reads keep working"
    store._run_prepared = real_commit  # type: ignore[method-assign]
    await client.ok("POST", "/contexts/k/associations", [{**EDGE, "object": "c"}])
    status, body, _h = await client.call("GET", "/health")
    assert (status, body) == (200, {"status": "ok", "version": body["version"]})


@pytest.mark.anyio
async def test_ready_is_503_when_a_context_cannot_be_read(served: Served) -> None:
    served.registry.unreadable.add("k")  # what a load that failed on a quiet store leaves
    for path in ("/ready", "/health"):
        status, body, _h = await served.client.call("GET", path)
        assert (status, body["code"]) == (503, "unhealthy"), body
        assert body["error"].startswith("a context could not be read from the store")


def chattr(flag: str, *paths: Path) -> bool:
    try:
        return subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.sqlite_only  # the SQLite files themselves
@pytest.mark.anyio
async def test_a_read_only_sqlite_disk_is_unhealthy_before_any_write_and_stays_ready(served: Served) -> None:
    client = served.client
    file = served.registry.persistence.file  # type: ignore[attr-defined]
    frozen = [p for p in (file, file.with_name(file.name + "-wal")) if p.exists()]
    probed = "the store cannot take writes: the database file cannot be written (read-only or immutable)"
    if not chattr("+i", *frozen):
        pytest.skip("chattr +i is not supported on this filesystem")
    try:
        status, body, _h = await client.call("GET", "/health")  # no write was tried yet
        assert (status, body["code"], body["error"]) == (503, "unhealthy", probed), body
        assert (await client.call("GET", "/ready"))[0] == 200
        assert (await client.call("GET", "/live"))[1] == "ok"
        assert (await client.ok("GET", "/contexts/k"))["result"]["stats"]["associations"] == 1
    finally:
        chattr("-i", *frozen)
    status, body, _h = await client.call("GET", "/health")  # the probe's answer holds for its interval ...
    assert (status, body["error"]) == (503, probed), body
    await client.ok("POST", "/contexts/k/associations", [{**EDGE, "object": "c"}])
    assert (await client.call("GET", "/health"))[0] == 200  # ... unless a write has landed since

    assert chattr("+i", *frozen)
    try:
        got, _body, _h = await client.call("POST", "/contexts/k/associations", [{**EDGE, "object": "d"}])
        assert got in (503, 507)
        assert (await client.call("GET", "/ready"))[0] == 200
        assert (await client.ok("GET", "/contexts/k"))["result"]["stats"]["associations"] == 2
        assert (await client.call("GET", "/health"))[0] == 503
    finally:
        chattr("-i", *frozen)
    await client.ok("POST", "/contexts/k/associations", [{**EDGE, "object": "d"}])  # the disk is back
    assert (await client.call("GET", "/health"))[0] == 200


@pytest.mark.anyio
async def test_the_backend_probe_is_reused_between_intervals_and_live_never_asks(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = []
    real = write_probe.write_probe

    def counting(persistence: Any) -> str | None:
        asked.append(threading.get_ident())
        return real(persistence)

    monkeypatch.setattr(write_probe, "write_probe", counting)
    monkeypatch.setattr(store_health, "_PROBES", type(store_health._PROBES)())
    client = served.client
    statuses = [s for s, _b, _h in await asyncio.gather(*(client.call("GET", "/health") for _ in range(5)))]
    statuses += [(await client.call("GET", "/health"))[0] for _ in range(10)]
    assert statuses == [200] * 15 and len(asked) == 1  # one probe, shared by concurrent calls and reused
    assert asked[0] != threading.get_ident()  # asked off the event loop
    for _ in range(5):
        assert (await client.call("GET", "/live"))[0] == 200
    assert len(asked) == 1
    monkeypatch.setattr(store_health, "PROBE_INTERVAL_SECS", 0.0)
    assert (await client.call("GET", "/health"))[0] == 200 and len(asked) == 2


@pytest.mark.anyio
async def test_a_probe_that_hangs_answers_unhealthy_in_time_and_recovers(
    served: Served, monkeypatch: pytest.MonkeyPatch, probe_every_call: None
) -> None:
    release = threading.Event()
    started = []

    def hanging(persistence: Any) -> str | None:
        started.append(1)
        release.wait(30)
        return None

    monkeypatch.setattr(store_health, "PROBE_TIMEOUT_SECS", 0.2)
    monkeypatch.setattr(store_health, "_PROBES", type(store_health._PROBES)())
    monkeypatch.setattr(write_probe, "write_probe", hanging)
    client = served.client
    try:
        for _ in range(2):
            status, body, _h = await client.call("GET", "/health")
            assert (status, body["code"]) == (503, "unhealthy"), body
            assert body["error"] == "the store cannot take writes: the store did not answer a probe within 0.2 s"
        assert len(started) == 1  # the second call waited on the same probe rather than starting another
    finally:
        release.set()
    for _ in range(100):  # the probe's answer is delivered to the loop
        await asyncio.sleep(0.01)
        if (await client.call("GET", "/health"))[0] == 200:
            break
    assert (await client.call("GET", "/health"))[0] == 200


def _pg_base() -> str:
    base = os.environ.get("TAGURU_TEST_PG_URL")
    assert base, "the PostgreSQL pass sets TAGURU_TEST_PG_URL"
    return base


@pytest.mark.anyio
async def test_postgres_that_does_not_answer_or_takes_no_writes_is_unhealthy(
    served: Served, monkeypatch: pytest.MonkeyPatch, probe_every_call: None
) -> None:
    if backend() != "postgres":
        pytest.skip("the PostgreSQL probe")
    client, store = served.client, served.registry.persistence
    real_url = store.url  # type: ignore[attr-defined]
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(store, "url", f"postgresql://postgres@127.0.0.1:{free_port()}/postgres")
        status, body, _h = await client.call("GET", "/health")
        assert (status, body["code"]) == (503, "unhealthy"), body
        assert body["error"] == "the store cannot take writes: the database does not answer (OperationalError)"
        read_only = quote("-c default_transaction_read_only=on")
        monkeypatch.setattr(store, "url", f"{_pg_base()}?options={read_only}")
        status, body, _h = await client.call("GET", "/health")
        assert body["error"] == "the store cannot take writes: the database takes read-only transactions only"
        monkeypatch.setattr(store, "url", real_url)
        assert (await client.call("GET", "/health"))[0] == 200
    changes = [(e["event"], e.get("reason")) for e in logs if e["event"].startswith("store.")]
    assert changes == [
        ("store.unwritable", "the database does not answer (OperationalError)"),
        ("store.unwritable", "the database takes read-only transactions only"),
        ("store.writable", None),
    ]
