"""A damaged, replaced, newer or unwritable store is refused at boot in one line; a failing disk refuses writes."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Client
from process_support import Server, base_env, cli

from taguru_server.server.app import build_app
from taguru_server.server.config import load_settings
from taguru_server.store.errors import StorageFailed, StoreRefused
from taguru_server.store.persist.registry import Registry
from taguru_server.store.persist.sqlite import (
    APPLICATION_ID,
    DB_NAME,
    FORMAT_VERSION,
    SCHEMA,
    STORE_ID_FILE,
    SqlitePersistence,
)

EDGE = {"subject": "a", "label": "rel", "object": "b", "weight": 1.0}

pytestmark = pytest.mark.sqlite_only  # the SQLite file itself: damage, identity, disk faults


def make_store(data: Path, contexts: int = 1) -> None:
    """A store with `contexts` contexts of one association each, written by a real registry."""
    registry = Registry(SqlitePersistence(data))
    for i in range(contexts):
        ctx = registry.create(f"c{i}", registry_meta())
        ctx.intern_concept("a")
        registry.commit([ctx])
    registry.close()


def registry_meta() -> Any:
    from taguru_server.store.model.context import Meta

    return Meta(description="damage test")


def refusal(data: Path) -> str:
    with pytest.raises(StoreRefused) as caught:
        SqlitePersistence(data)
    message = str(caught.value)
    assert "\n" not in message and str(data / DB_NAME) in message, message
    return message


# ----- formats and identity ---------------------------------------------------------------------------


def test_a_new_store_records_its_format_and_identity(tmp_path: Path) -> None:
    first = SqlitePersistence(tmp_path / "data")
    store_id = first.store_id
    first.close()
    db = sqlite3.connect(tmp_path / "data" / DB_NAME)
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert db.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
    db.close()
    again = SqlitePersistence(tmp_path / "data")
    assert again.store_id == store_id and len(store_id) == 32
    again.close()


def test_a_store_of_an_older_build_opens_and_gets_its_format(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = sqlite3.connect(data / DB_NAME)
    legacy = SCHEMA.split("CREATE TABLE IF NOT EXISTS store_meta")[0]
    db.executescript(legacy)
    db.execute("INSERT INTO contexts VALUES(1, 'old', ?)", ('{"description": "from before formats"}',))
    db.commit()
    db.close()
    store = SqlitePersistence(data)
    assert [name for _cid, name, _meta in store.list_contexts()] == ["old"]
    store.close()
    db = sqlite3.connect(data / DB_NAME)
    assert db.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    db.close()


def test_empty_newer_foreign_and_damaged_stores_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_store(data)
    (data / DB_NAME).write_bytes(b"")
    assert "empty" in refusal(data)

    shutil.rmtree(data)
    make_store(data)
    db = sqlite3.connect(data / DB_NAME)
    db.execute(f"PRAGMA user_version={FORMAT_VERSION + 1}")
    db.close()
    assert "newer" in refusal(data)

    shutil.rmtree(data)
    data.mkdir()
    db = sqlite3.connect(data / DB_NAME)
    db.execute("CREATE TABLE other(x)")
    db.close()
    assert "not a taguru store" in refusal(data)

    (data / DB_NAME).write_bytes(b"this is not a database at all" * 100)
    assert "cannot be opened" in refusal(data)


def test_a_deleted_or_swapped_database_is_refused(tmp_path: Path) -> None:
    data, other = tmp_path / "data", tmp_path / "other"
    make_store(data)
    make_store(other)
    saved = (data / DB_NAME).read_bytes()
    (data / DB_NAME).unlink()
    assert "missing" in refusal(data) and not (data / DB_NAME).exists()
    shutil.copy(other / DB_NAME, data / DB_NAME)
    assert "replaced" in refusal(data)
    (data / DB_NAME).write_bytes(saved)  # the store's own database (a backup) opens again
    SqlitePersistence(data).close()
    (data / STORE_ID_FILE).unlink()  # the operator adopts whatever database is there
    shutil.copy(other / DB_NAME, data / DB_NAME)
    adopted = SqlitePersistence(data)
    assert (data / STORE_ID_FILE).read_text().strip() == adopted.store_id
    adopted.close()


def damage_pages(db_file: Path) -> None:
    """Overwrite 32 KB in the middle of the file (whole pages of table rows)."""
    size = db_file.stat().st_size
    with open(db_file, "r+b") as f:
        f.seek((size // 2) // 4096 * 4096)
        f.write(b"\xa5" * 32768)


def test_damaged_pages_are_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_store(data, contexts=400)
    damage_pages(data / DB_NAME)
    message = refusal(data)
    assert "damaged" in message or "cannot be opened" in message


# ----- run-time failures, injected at the persistence level --------------------------------------------


async def serve(registry: Registry) -> tuple[Any, Client, Any]:
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    server = TestServer(build_app(load_settings({"TAGURU_DATA_DIR": "unused"}), registry))
    await server.start_server()
    session = ClientSession()
    return server, Client(session, str(server.make_url("")).rstrip("/")), session


@pytest.mark.anyio
async def test_a_refused_commit_answers_503_or_507_and_changes_nothing(tmp_path: Path) -> None:
    store = SqlitePersistence(tmp_path / "data")
    registry = Registry(store)
    server, client, session = await serve(registry)
    try:
        await client.ok("PUT", "/contexts/k", {"description": "d"})
        await client.ok("POST", "/contexts/k/associations", [EDGE])
        before = (await client.ok("GET", "/contexts/k"))["result"]["stats"]
        real_commit = store._run_prepared

        def failing(kind: str) -> Any:
            def commit(writes: Any) -> None:  # the store's commit transaction
                raise StorageFailed(kind, "injected")

            return commit

        for kind, status in (("unavailable", 503), ("storage_full", 507)):
            store._run_prepared = failing(kind)  # type: ignore[method-assign]
            got, body, _h = await client.call(
                "POST", "/contexts/k/associations", [{**EDGE, "object": "c"}, {**EDGE, "object": "d"}]
            )
            assert got == status and body["status"] == "error", body
            assert body["code"] == ("unhealthy" if status == 503 else "storage_full")
            assert (await client.ok("GET", "/contexts/k"))["result"]["stats"] == before
            got, body, _h = await client.call("GET", "/health")
            assert got == 503 and body["code"] == "unhealthy", body
            got, body, _h = await client.call("PUT", "/contexts/new", {"description": "d"})
            assert got == status, body
            got, _body, _h = await client.call("GET", "/contexts/new")
            assert got == 404
        store._run_prepared = real_commit  # type: ignore[method-assign]
        await client.ok("POST", "/contexts/k/associations", [{**EDGE, "object": "c"}])
        assert (await client.call("GET", "/health"))[0] == 200
    finally:
        await session.close()
        await server.close()
        registry.close()


@pytest.mark.anyio
async def test_a_context_that_fails_to_load_makes_health_503(tmp_path: Path) -> None:
    make_store(tmp_path / "data")
    store = SqlitePersistence(tmp_path / "data")

    def load(*args: Any) -> Any:
        raise sqlite3.DatabaseError("database disk image is malformed")

    store.load = load  # type: ignore[method-assign]
    registry = Registry(store)
    server, client, session = await serve(registry)
    try:
        # the start-up load (TAGURU_PRELOAD) meets the damage first; the call waits for it, then retries the load
        got, body, _h = await client.call("GET", "/contexts/c0")
        assert got >= 500 and body["status"] == "error"
        got, body, _h = await client.call("GET", "/health")
        assert got == 503 and body["code"] == "unhealthy" and "c0" not in body["error"], body
    finally:
        await session.close()
        await server.close()
        registry.close()


# ----- process level: boot refusals and a read-only data dir mid-run -----------------------------------


def boot(data: Path) -> subprocess.CompletedProcess[str]:
    return cli("serve", env=base_env(data, TAGURU_ADDR="127.0.0.1:0"))


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], data: Path) -> str:
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(data) in lines[0], lines
    return lines[0]


@pytest.mark.slow
def test_boot_refuses_a_truncated_or_damaged_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_store(data, contexts=400)
    saved = (data / DB_NAME).read_bytes()
    damage_pages(data / DB_NAME)
    assert_one_line_refusal(boot(data), data)
    (data / DB_NAME).write_bytes(b"")
    line = assert_one_line_refusal(boot(data), data)
    assert str(data / DB_NAME) in line and "empty" in line
    (data / DB_NAME).write_bytes(saved)
    fresh = tmp_path / "fresh"
    for where in (data, fresh):  # the intact store boots, and so does a brand-new data dir
        server = Server(where, tmp_path / "server.log")
        try:
            assert server.call("GET", "/health")[0] == 200
        finally:
            server.stop()


def chattr(flag: str, *paths: Path) -> bool:
    try:
        return subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.fixture
def frozen(tmp_path: Path) -> Iterator[list[Path]]:
    """Paths made immutable during a test, always thawed after it."""
    paths: list[Path] = []
    yield paths
    chattr("-i", *paths)


@pytest.mark.slow
def test_a_read_only_data_dir_refuses_writes_keeps_reads_and_loses_nothing(tmp_path: Path, frozen: list[Path]) -> None:
    data = tmp_path / "data"
    server = Server(data, tmp_path / "server.log")
    try:
        server.ok("PUT", "/contexts/k", {"description": "d"})
        server.ok("POST", "/contexts/k/associations", [EDGE])
        before = server.ok("GET", "/contexts/k")["stats"]
        # the -shm file stays writable: SQLite maps it, and a write to an immutable mapping is SIGBUS
        frozen += [data, data / DB_NAME, data / f"{DB_NAME}-wal"]
        if not chattr("+i", *frozen):
            pytest.skip("chattr +i is not supported on this filesystem")
        status, body = server.call("POST", "/contexts/k/associations", [{**EDGE, "object": "c"}])
        assert status in (503, 507) and body["status"] == "error", body
        status, body = server.call("PUT", "/contexts/k2", {"description": "d"})
        assert status in (503, 507) and body["status"] == "error", body
        assert server.ok("GET", "/contexts/k")["stats"] == before
        assert server.call("GET", "/contexts/k2")[0] == 404
        status, body = server.call("GET", "/health")
        assert status == 503 and body["code"] == "unhealthy", body
        chattr("-i", *frozen)  # the disk recovers: writes succeed again without a restart
        server.ok("POST", "/contexts/k/associations", [{**EDGE, "object": "c"}])
        assert server.call("GET", "/health")[0] == 200
        after = server.ok("GET", "/contexts/k")["stats"]
        assert chattr("+i", *frozen)
    finally:
        server.stop()
    assert_one_line_refusal(boot(data), data)
    chattr("-i", *frozen)
    server = Server(data, tmp_path / "server.log")
    try:
        assert server.ok("GET", "/contexts/k")["stats"] == after != before
        assert server.call("GET", "/contexts/k2")[0] == 404
        assert server.call("GET", "/health")[0] == 200
    finally:
        server.stop()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs, unmounted after the test; skips where mounting is not allowed."""
    where = tmp_path / "disk"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.slow
def test_a_full_disk_answers_507_and_loses_nothing_acknowledged(tmp_path: Path, small_disk: Path) -> None:
    data = small_disk / "data"
    server = Server(data, tmp_path / "server.log")
    try:
        server.ok("PUT", "/contexts/k", {"description": "d"})
        acknowledged = server.ok("GET", "/contexts/k")["stats"]
        for i in range(100):
            edges = [{**EDGE, "subject": f"{i}-{j}-" + "s" * 200} for j in range(500)]
            status, body = server.call("POST", "/contexts/k/associations", edges)
            if status != 200:
                break
            acknowledged = server.ok("GET", "/contexts/k")["stats"]
        assert status == 507 and body["code"] == "storage_full", body
        assert server.ok("GET", "/contexts/k")["stats"] == acknowledged
        assert server.call("GET", "/health")[0] == 503
    finally:
        server.stop()
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)
    server = Server(data, tmp_path / "server.log")
    try:
        assert server.ok("GET", "/contexts/k")["stats"] == acknowledged
        assert server.call("GET", "/health")[0] == 200
    finally:
        server.stop()
