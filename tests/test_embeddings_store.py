"""Embedding vectors: the refresh route, staleness, identity by model and width, persistence, followers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client, exact, load_fixture, normalize
from pg_support import database_url_for

from taguru_server.server.app import build_app
from taguru_server.server.config import Settings
from taguru_server.store.derive.embed_refresh import refresh_glosses
from taguru_server.store.index.vectors import normalize as unit
from taguru_server.store.model.context import Meta
from taguru_server.store.persist.backend import open_store
from taguru_server.store.persist.registry import Registry

pytestmark = pytest.mark.anyio


class FakeFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.kind = "status"


class Flat:
    """Every input -> [1, 0, 0, …] of `width` components; records (purpose, texts) per call."""

    def __init__(self, model: str = "fake-flat", width: int = 3) -> None:
        self.model = model
        self.width = width
        self.calls: list[tuple[str, list[str]]] = []
        self.fail_on: str | None = None

    async def embed(self, texts: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        self.calls.append((purpose, list(texts)))
        if self.fail_on is not None and any(self.fail_on in t for t in texts):
            raise FakeFailed("embedding provider answered HTTP 500")
        return [unit([1.0] + [0.0] * (self.width - 1)) for _ in texts]


Start = Callable[..., Any]


@pytest.fixture
async def start(settings_factory) -> AsyncIterator[Start]:
    running: list[tuple[TestServer, ClientSession]] = []

    async def go(embedder: Flat | None, **env: str) -> tuple[Client, Callable[[], Any]]:
        for name in ("TAGURU_EMBED_PASSAGES", "TAGURU_PASSAGE_VECTOR_LIMIT"):  # as the tests set them
            if os.environ.get(name):
                env.setdefault(name, os.environ[name])
        settings: Settings = settings_factory(**env)
        app = build_app(settings, embedder=embedder)
        server = TestServer(app)
        await server.start_server()
        session = ClientSession()
        running.append((server, session))

        async def stop() -> None:
            running.remove((server, session))
            await session.close()
            await server.close()

        return Client(session, str(server.make_url("")).rstrip("/")), stop

    yield go
    for server, session in running:
        await session.close()
        await server.close()


EDGE = [{"label": "分類", "object": "宝石", "subject": "琥珀", "weight": 1.0}]
GLOSSES = [["琥珀。分類は宝石。", "宝石。琥珀の分類は宝石。"], ["分類。琥珀の分類は宝石。"]]


async def seed(cl: Client, name: str = "mine") -> None:
    await cl.ok("PUT", f"/contexts/{name}", {"description": "d"})
    await cl.ok("POST", f"/contexts/{name}/associations", EDGE)
    await cl.ok("POST", f"/contexts/{name}/sources", {"passages": {"docs/ore.md": "琥珀は樹脂の化石である。"}})


async def refresh(cl: Client, name: str = "mine") -> dict[str, Any]:
    body = await cl.ok("POST", f"/contexts/{name}/embeddings/refresh", {})
    result: dict[str, Any] = body["result"]
    return result


async def revision(cl: Client, name: str = "mine") -> dict[str, int]:
    rev: dict[str, int] = (await cl.ok("GET", f"/contexts/{name}"))["result"]["revision"]
    return rev


async def test_the_reference_fixture_replays(start: Start) -> None:
    cl, _stop = await start(None)
    await cl.ok("PUT", "/contexts/corpus-i", {"description": "wire-contract coverage corpus"})
    edge = [{"label": "connects_to", "object": "beta", "source": "doc.md", "subject": "alpha", "weight": 1.0}]
    await cl.ok("POST", "/contexts/corpus-i/associations", edge)
    status, body, _h = await cl.call("GET", "/contexts/corpus-i/embeddings")
    fixture = load_fixture("http", "embeddings_status")
    assert status == fixture["status"]
    assert exact(normalize(body)) == exact(normalize(fixture["response"]))


async def test_no_provider_refuses_refresh_before_the_context_lookup(start: Start) -> None:
    cl, _stop = await start(None)
    await seed(cl)
    for name in ("mine", "nope"):
        status, body, _h = await cl.call("POST", f"/contexts/{name}/embeddings/refresh", {})
        assert status == 501
        assert body["code"] == "embeddings_unconfigured"
        assert body["error"] == ("no embedding provider is configured (set TAGURU_EMBED_URL and TAGURU_EMBED_MODEL)")
    status, body, _h = await cl.call("GET", "/contexts/nope/embeddings")
    assert status == 404 and body["code"] == "no_context"
    status, body, _h = await cl.call("POST", "/contexts/nope/embeddings/refresh", {})
    assert status == 501


async def test_the_illustrative_example(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAGURU_EMBED_PASSAGES", "1")
    fake = Flat()
    cl, _stop = await start(fake)
    await seed(cl)
    before = await revision(cl)
    writes = (await cl.ok("GET", "/contexts/mine"))["result"]["usage"]["writes"]
    assert before["config"] == 0
    assert await refresh(cl) == {
        "embedded": 4,
        "total": 4,
        "glosses": {"embedded": 3, "total": 3},
        "passages": {"embedded": 1, "total": 1, "skipped_over_limit": 0},
    }
    assert fake.calls == [("index", GLOSSES[0]), ("index", GLOSSES[1]), ("index", ["琥珀は樹脂の化石である。"])]
    after = await revision(cl)
    assert after == {**before, "config": 2}
    assert (await cl.ok("GET", "/contexts/mine"))["result"]["usage"]["writes"] == writes
    status = (await cl.ok("GET", "/contexts/mine/embeddings"))["result"]
    assert status == {
        "provider_model": "fake-flat",
        "glosses": {"model": "fake-flat", "width": 3, "concepts": 2, "labels": 1},
        "passages": {"model": "fake-flat", "width": 3, "rows": 1},
    }
    fake.calls.clear()
    assert await refresh(cl) == {
        "embedded": 0,
        "total": 4,
        "glosses": {"embedded": 0, "total": 3},
        "passages": {"embedded": 0, "total": 1, "skipped_over_limit": 0},
    }
    assert fake.calls == [("index", ["琥珀。分類は宝石。"]), ("index", ["琥珀は樹脂の化石である。"])]
    assert await revision(cl) == after


async def test_without_passages_only_glosses(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAGURU_EMBED_PASSAGES", raising=False)
    fake = Flat()
    cl, _stop = await start(fake)
    await seed(cl)
    assert await refresh(cl) == {"embedded": 3, "total": 3}
    assert len(fake.calls) == 2
    assert (await revision(cl))["config"] == 1


async def test_staleness_pruning_and_model_change_survive_restarts(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAGURU_EMBED_PASSAGES", "1")
    fake = Flat("alpha")
    cl, stop = await start(fake)
    await seed(cl)
    await refresh(cl)
    # a new fact changes 宝石's gloss and adds a concept and a label: only those are embedded
    colour = [{"label": "色", "object": "黄色", "subject": "宝石", "weight": 1.0}]
    await cl.ok("POST", "/contexts/mine/associations", colour)
    await cl.ok("POST", "/contexts/mine/sources", {"passages": {"docs/ore.md": "琥珀は軽い。"}})
    fake.calls.clear()
    got = await refresh(cl)
    assert got["passages"] == {"embedded": 1, "total": 1, "skipped_over_limit": 0}
    sent = [t for _p, texts in fake.calls for t in texts]
    assert "琥珀は軽い。" in sent and "琥珀は樹脂の化石である。" not in sent
    assert not any(t.startswith("琥珀。") for t in sent)  # 琥珀's gloss did not change
    assert got["glosses"]["total"] == 5
    # pruning: the passage is retracted, its row goes
    await cl.ok("POST", "/contexts/mine/sources/retract", {"source": "docs/ore.md"})
    rev = await revision(cl)
    got = await refresh(cl)
    assert got["passages"] == {"embedded": 0, "total": 0, "skipped_over_limit": 0}
    assert (await revision(cl))["config"] == rev["config"] + 1
    status = (await cl.ok("GET", "/contexts/mine/embeddings"))["result"]
    assert "passages" not in status and status["glosses"]["concepts"] == 3
    await cl.ok("POST", "/contexts/mine/sources", {"passages": {"docs/b.md": "別の段落。"}})
    await refresh(cl)
    await stop()
    # restart under another model: the stored vectors load, are shown, and are rebuilt by the next refresh
    beta = Flat("beta")
    cl, stop = await start(beta)
    status = (await cl.ok("GET", "/contexts/mine/embeddings"))["result"]
    assert status == {
        "provider_model": "beta",
        "glosses": {"model": "alpha", "width": 3, "concepts": 3, "labels": 2},
        "passages": {"model": "alpha", "width": 3, "rows": 1},
    }
    got = await refresh(cl)
    assert got["glosses"] == {"embedded": 5, "total": 5}
    assert got["passages"] == {"embedded": 1, "total": 1, "skipped_over_limit": 0}
    status = (await cl.ok("GET", "/contexts/mine/embeddings"))["result"]
    assert status["glosses"]["model"] == "beta" and status["passages"]["model"] == "beta"
    await stop()


async def test_a_width_change_is_found_by_the_probe(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAGURU_EMBED_PASSAGES", "1")
    fake = Flat("w", 3)
    cl, _stop = await start(fake)
    await seed(cl)
    await refresh(cl)
    fake.width = 4
    fake.calls.clear()
    got = await refresh(cl)
    assert got["glosses"] == {"embedded": 3, "total": 3}
    assert got["passages"] == {"embedded": 1, "total": 1, "skipped_over_limit": 0}
    assert fake.calls[0] == ("index", ["琥珀。分類は宝石。"])  # the probe, then the rebuild
    status = (await cl.ok("GET", "/contexts/mine/embeddings"))["result"]
    assert status["glosses"]["width"] == 4 and status["passages"]["width"] == 4


async def test_the_passage_row_limit(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAGURU_EMBED_PASSAGES", "1")
    monkeypatch.setenv("TAGURU_PASSAGE_VECTOR_LIMIT", "1")
    fake = Flat()
    cl, _stop = await start(fake)
    await cl.ok("PUT", "/contexts/mine", {"description": "d"})
    await cl.ok("POST", "/contexts/mine/sources", {"passages": {"a.md": "一つ目。", "b.md": "二つ目。"}})
    got = await refresh(cl)
    assert got["passages"] == {"embedded": 1, "total": 1, "skipped_over_limit": 1}
    assert got["glosses"] == {"embedded": 0, "total": 0}


async def test_a_failure_keeps_landed_rows_and_delete_drops_vectors(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAGURU_EMBED_PASSAGES", "1")
    fake = Flat()
    fake.fail_on = "樹脂"
    cl, _stop = await start(fake)
    await seed(cl)
    status, body, _h = await cl.call("POST", "/contexts/mine/embeddings/refresh", {})
    assert status == 502 and body["code"] == "embeddings_failed"
    assert body["error"] == (
        "passage embedding refresh failed partway (progress is saved): embedding provider answered HTTP 500"
    )
    shown = (await cl.ok("GET", "/contexts/mine/embeddings"))["result"]
    assert "glosses" in shown and "passages" not in shown
    fake.fail_on = "琥珀。"
    await cl.ok("PUT", "/contexts/other", {"description": "d"})
    await cl.ok("POST", "/contexts/other/associations", EDGE)
    status, body, _h = await cl.call("POST", "/contexts/other/embeddings/refresh", {})
    assert status == 502 and body["error"] == "embedding refresh failed: embedding provider answered HTTP 500"
    fake.fail_on = None
    await cl.ok("DELETE", "/contexts/mine")
    await cl.ok("PUT", "/contexts/mine", {"description": "d"})
    assert (await cl.ok("GET", "/contexts/mine/embeddings"))["result"] == {"provider_model": "fake-flat"}


class Gated(Flat):
    """The flat embedder, held at its first call until `gate` opens."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def embed(self, texts: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        self.entered.set()
        await self.gate.wait()
        return await super().embed(texts, purpose, deadline)


@pytest.mark.parametrize("recreate", [False, True])
async def test_a_refresh_of_a_context_deleted_meanwhile_answers_404(
    start: Start, tmp_path: Path, recreate: bool
) -> None:
    """The provider is still being asked when the context is deleted (and perhaps created again): the refresh
    answers the missing context's 404, writes nothing, and the store is not reported as failing."""
    gated = Gated()
    cl, _stop = await start(gated)
    await seed(cl)
    refreshing = asyncio.ensure_future(cl.call("POST", "/contexts/mine/embeddings/refresh", {}))
    await asyncio.wait_for(gated.entered.wait(), 30)
    await cl.ok("DELETE", "/contexts/mine")
    if recreate:
        await cl.ok("PUT", "/contexts/mine", {"description": "again"})
    gated.gate.set()
    status, body, _h = await refreshing
    assert (status, body["code"], body["error"]) == (404, "no_context", "context 'mine' not found")
    status, _body, _h = await cl.call("GET", "/health")
    assert status == 200
    if recreate:
        assert (await cl.ok("GET", "/contexts/mine/embeddings"))["result"] == {"provider_model": "fake-flat"}
        assert (await revision(cl))["config"] == 0
    else:
        status, body, _h = await cl.call("GET", "/contexts/mine")
        assert (status, body["code"]) == (404, "no_context")
    data = tmp_path / "data"
    store = open_store(str(data), database_url_for(data))
    try:
        with store._snapshot() as db:  # type: ignore[attr-defined]
            assert db.execute("SELECT COUNT(*) FROM vector_stores").fetchone()[0] == 0
    finally:
        store.close()


def test_a_follower_loads_the_vectors_another_process_refreshed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    url = database_url_for(data)
    a = Registry(open_store(str(data), url), shared=True)
    b = Registry(open_store(str(data), url), shared=True)
    fake = Flat()

    async def embed(texts: list[str]) -> list[np.ndarray]:
        return await fake.embed(texts, "index", None)

    async def scenario() -> None:
        async with a.write_section(deadline=float("inf")):
            ctx = a.create("k", Meta(description="x"))
            ctx.assert_association("琥珀", "分類", "宝石", 1.0, None, None)
            a.commit([ctx])
        b.catch_up()
        seen = b.get("k")
        assert seen is not None and seen.vectors.glosses is None
        async with a.write_section(deadline=float("inf")):
            ctx = a.get("k")
            assert ctx is not None
            half = await refresh_glosses(ctx, fake.model, embed)
            ctx.meta.rev_config += 1
            a.commit([ctx])
        assert half.embedded == 3
        b.catch_up()
        seen = b.get("k")
        assert seen is not None and seen.vectors.glosses is not None
        assert list(seen.vectors.glosses.concepts.rows) == ["琥珀", "宝石"]
        assert seen.meta.rev_config == 1 and seen.meta.rev_graph == ctx.meta.rev_graph

    asyncio.run(scenario())
    a.close()
    b.close()


@pytest.mark.sqlite_only
def test_a_format_2_store_is_migrated_to_3(tmp_path: Path) -> None:
    import sqlite3

    from taguru_server.store.persist.sqlite import DB_NAME, FORMAT_VERSION, SqlitePersistence

    data = tmp_path / "data"
    SqlitePersistence(data).close()
    db = sqlite3.connect(data / DB_NAME)
    for table in ("vector_stores", "gloss_vectors", "passage_vectors"):
        db.execute(f"DROP TABLE {table}")
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    store = SqlitePersistence(data)
    assert FORMAT_VERSION >= 3
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
    assert store.db.execute("SELECT COUNT(*) FROM gloss_vectors").fetchone()[0] == 0
    store.close()
