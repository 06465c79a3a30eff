"""Erasure: retract a source, then compact, and nothing of it is left in any table (change log and change feed
included), nor on SQLite in any file of the data dir; a deleted context leaves only its deletion row. Followers
of the change log keep every other context's changes and never see a gap that is not there."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client
from erasure_support import files_holding, marker_needles, needles, rows_holding
from pg_support import database_url_for
from test_embeddings_store import Flat
from test_store_sync import observable

from taguru_server.server.app import build_app
from taguru_server.server.state import REGISTRY_KEY
from taguru_server.store.derive.maintenance import rebuild
from taguru_server.store.model.context import CONCEPT, Meta
from taguru_server.store.persist.backend import open_store
from taguru_server.store.persist.registry import Registry

ASCII, CJK = "zqxvohmarker", "秘匿語彙"
MARKER = ASCII + CJK
SECRET = marker_needles(ASCII, CJK)
KEPT_WORD = "keepsakeqv保存語"
KEPT = needles(KEPT_WORD)
SOURCE = f"{MARKER}.md"


class Served:
    """One in-process server over the test's data dir (restartable) with the flat fake embedder."""

    def __init__(self, settings_factory: Any, embedder: Flat) -> None:
        self.settings = settings_factory(TAGURU_EMBED_PASSAGES="1")
        self.embedder = embedder
        self.server: TestServer | None = None
        self.session: ClientSession | None = None

    async def start(self) -> Client:
        self.server = TestServer(build_app(self.settings, embedder=self.embedder))
        await self.server.start_server()
        self.session = ClientSession()
        return Client(self.session, str(self.server.make_url("")).rstrip("/"))

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.server is not None:
            await self.server.close()
        self.server = self.session = None

    @property
    def store(self) -> Any:
        assert self.server is not None
        return self.server.app[REGISTRY_KEY].persistence

    @property
    def data_dir(self) -> Path:
        return Path(self.settings.data_dir)


@pytest.fixture
async def served(settings_factory: Any) -> AsyncIterator[Callable[[Flat], Served]]:
    made: list[Served] = []

    def make(embedder: Flat) -> Served:
        made.append(Served(settings_factory, embedder))
        return made[-1]

    yield make
    for s in made:
        await s.stop()


async def fill(cl: Client, name: str) -> None:
    """A context holding the marker in a source name, concept and label names, aliases, a passage and its
    vectors, next to content that stays (`kept.md`, the control word)."""
    path = f"/contexts/{name}"
    await cl.ok("PUT", path, {"description": "d"})
    await cl.ok(
        "POST",
        f"{path}/associations",
        [
            {
                "subject": f"{MARKER}-subject",
                "label": f"{MARKER}-label",
                "object": "beta",
                "weight": 1.0,
                "source": SOURCE,
            },
            {"subject": f"{MARKER}-gone", "label": "rel", "object": "beta", "weight": 2.0, "source": SOURCE},
            {"subject": "alpha", "label": "rel", "object": "beta", "weight": 1.0, "source": "kept.md"},
            {"subject": KEPT_WORD, "label": "rel", "object": "alpha", "weight": 1.0, "source": "kept.md"},
        ],
    )
    await cl.ok(
        "POST",
        f"{path}/aliases",
        {
            "concepts": {f"{MARKER}-alias": f"{MARKER}-subject", f"{MARKER}-removed": "alpha"},
            "labels": {f"{MARKER}-label-alias": f"{MARKER}-label"},
        },
    )
    await cl.ok("DELETE", f"{path}/aliases", {"concepts": [f"{MARKER}-removed"]})
    await cl.ok(
        "POST",
        f"{path}/sources",
        {
            "passages": {
                SOURCE: f"The {MARKER} paragraph.\n\nA second {ASCII} paragraph about {CJK}.",
                "kept.md": f"{KEPT_WORD} stays here.\n\nalpha and beta.",
            }
        },
    )
    refreshed = (await cl.ok("POST", f"{path}/embeddings/refresh", {}))["result"]
    assert refreshed["passages"]["total"] == 4 and refreshed["glosses"]["total"] > 0
    await cl.ok("POST", f"{path}/associations/retract", {"subject": f"{MARKER}-gone", "label": "rel", "object": "beta"})


def tables_of(hits: set[tuple[str, bytes]]) -> set[str]:
    return {table for table, _needle in hits}


async def changes(cl: Client, name: str, since: str | None = None) -> tuple[int, Any]:
    q = "" if since is None else f"?since={since}"
    status, body, _h = await cl.call("GET", f"/contexts/{name}/changes{q}")
    return status, body


@pytest.mark.anyio
async def test_retract_then_compact_and_delete_leave_no_trace(served: Callable[[Flat], Served]) -> None:
    s = served(Flat())
    cl = await s.start()
    await fill(cl, "secret")
    await fill(cl, "doomed")
    await s.stop()
    cl = await s.start()  # loaded from the store again: on SQLite each context's index file is written
    sqlite = not hasattr(s.store, "url")
    held = rows_holding(s.store, SECRET)
    expected = {"changes", "feed", "aliases", "concepts", "labels", "sources", "passages", "passage_vectors"}
    assert expected | {"gloss_vectors"} <= tables_of(held)
    assert "passage_vectors" in tables_of(rows_holding(s.store, needles(SOURCE)))
    if sqlite:
        await cl.ok("POST", "/contexts/secret/query", {"subject": "alpha"})  # both contexts loaded: files written
        await cl.ok("POST", "/contexts/doomed/query", {"subject": "alpha"})
        assert any(path.startswith("indexes/") for path, _n in files_holding(s.data_dir, SECRET))

    # the recipe: retract the source, then compact
    retracted = (await cl.ok("POST", "/contexts/secret/sources/retract", {"source": SOURCE}))["result"]
    assert retracted["passage_removed"] is True
    if sqlite:  # a load after the retraction rewrites the index file, and it still carries the source's terms
        await s.stop()
        cl = await s.start()
        await cl.ok("POST", "/contexts/secret/query", {"subject": "alpha"})
        assert any(path.startswith("indexes/") for path, _n in files_holding(s.data_dir, needles(ASCII)))
    tail = (await changes(cl, "secret"))[1]["result"]["next"]  # a consumer that read every event
    epoch, seen = tail.rsplit("-", 1)
    status, body = await changes(cl, "secret", f"{epoch}-{int(seen) - 1}")  # and one that had not read the last
    assert status == 200 and body["result"]["events"][0]["source"] == SOURCE
    outcome = (await cl.ok("POST", "/contexts/secret/compact"))["result"]
    assert outcome["aliases_dropped"] == 2 and outcome["dead_edges"] == 2
    assert outcome["passages_compacted"] is sqlite

    doomed_id = s.server.app[REGISTRY_KEY].cid_of("doomed")  # type: ignore[union-attr]
    left = {table for table, _n in rows_holding(s.store, SECRET)}
    assert left, "the other context still holds the marker"
    await cl.ok("DELETE", "/contexts/doomed")
    assert rows_holding(s.store, SECRET) == set()
    assert rows_holding(s.store, needles(SOURCE, f"{MARKER}-alias")) == set()
    if sqlite:
        assert files_holding(s.data_dir, SECRET) == set()
    # what stays is still there (and the scan does see content)
    assert {"concepts", "passages"} <= tables_of(rows_holding(s.store, KEPT))
    if sqlite:
        assert files_holding(s.data_dir, KEPT)
    found = (await cl.ok("POST", "/contexts/secret/sources/lookup", {"sources": ["kept.md", SOURCE]}))["result"]
    assert found["missing"] == [SOURCE] and KEPT_WORD in found["passages"]["kept.md"]
    shown = (await cl.ok("GET", "/contexts/secret/embeddings"))["result"]
    assert shown["passages"]["rows"] == 2  # the retracted source's vector rows went with it

    # the deleted context left one change-log row, which names nothing; the compacted one only reload rows
    rows = _change_rows(s.store)
    assert [json.loads(t) for c, t in rows if c == doomed_id] == [{"deleted": True}]
    secret_id = s.server.app[REGISTRY_KEY].cid_of("secret")  # type: ignore[union-attr]
    assert {t for c, t in rows if c == secret_id} == {'{"reload":true}'}

    # the change feed's events were evicted, its numbering kept: a consumer that had read every event reads
    # on in the same epoch, one that had not is told its history is gone (410), as after the feed's retention
    status, body = await changes(cl, "secret", tail)
    assert status == 200 and body["result"] == {"events": [], "next": tail, "more": False}
    status, body = await changes(cl, "secret", f"{epoch}-{int(seen) - 1}")
    assert (status, body["code"]) == (410, "stale_cursor")
    assert (await changes(cl, "secret"))[1]["result"]["next"] == tail
    await cl.ok(
        "POST", "/contexts/secret/associations", [{"subject": "gamma", "label": "rel", "object": "beta", "weight": 1.0}]
    )
    status, body = await changes(cl, "secret", tail)
    added = {"seq": int(seen) + 1, "kind": "associations_added", "count": 1}
    assert status == 200 and body["result"]["events"] == [added]

    await s.stop()  # and across a restart
    cl = await s.start()
    assert rows_holding(s.store, SECRET) == set()
    found = (await cl.ok("POST", "/contexts/secret/sources/lookup", {"sources": ["kept.md"]}))["result"]
    assert found["missing"] == []
    if sqlite:
        assert files_holding(s.data_dir, SECRET) == set()


def _change_rows(store: Any) -> list[tuple[int, str]]:
    with store._snapshot() as db:
        return [(int(c), str(t)) for c, t in db.execute("SELECT ctx, touched FROM changes ORDER BY seq").fetchall()]


# ----- followers of the change log ------------------------------------------------------------------


def _store(data: Path) -> Any:
    return open_store(str(data), database_url_for(data))


def _fresh(data: Path, name: str) -> Any:
    store = _store(data)
    try:
        ctx = Registry(store).get(name)
        assert ctx is not None
        return observable(ctx)
    finally:
        store.close()


@pytest.mark.parametrize("erase", ["compact", "delete"])
def test_a_follower_keeps_every_other_context_across_an_erasure(tmp_path: Path, erase: str) -> None:
    """The erased context's rows are the oldest of the log (the log's retention dropped what came before,
    as past CHANGES_RETAINED): removing them must not look like a gap to a follower, which would then
    drop every context it holds; the other context's change committed in between is applied."""
    data = tmp_path / "data"
    a = Registry(_store(data), shared=True)
    b = Registry(_store(data), shared=True)

    async def write(reg: Registry, name: str, step: Callable[[Any], None]) -> None:
        async with reg.write_section(deadline=float("inf")):
            ctx = reg.get(name) or reg.create(name, Meta(description="d"))
            step(ctx)
            reg.commit([ctx])

    def marked(ctx: Any) -> None:
        ctx.assert_association(f"{MARKER}-s", "r", "beta", 1.0, SOURCE, None)
        ctx.add_alias(CONCEPT, f"{MARKER}-alias", f"{MARKER}-s")

    async def scenario() -> None:
        await write(a, "other", lambda c: c.assert_association("o1", "r", "o2", 1.0, "o.md", None))
        await write(a, "x", lambda c: c.assert_association("alpha", "r", "beta", 1.0, "keep.md", None))
        b.catch_up()
        held = b.get("other")
        assert held is not None and b.get("x") is not None
        with a.persistence._tx() as db:  # type: ignore[attr-defined]
            db.execute("DELETE FROM changes WHERE seq <= ?", (a.persistence.latest_change(),))
        await write(a, "x", marked)  # the log's oldest row now, and it names an alias
        await write(a, "x", lambda c: c.add_alias(CONCEPT, f"{MARKER}-second", f"{MARKER}-s"))
        await write(a, "other", lambda c: c.assert_association("o3", "r", "o2", 1.0, "o.md", None))
        x_rows_before = _max_seq(a, "x")
        async with a.write_section(deadline=float("inf")):
            ctx = a.get("x")
            assert ctx is not None
            if erase == "compact":
                ctx.retract_source(SOURCE)
                a.commit([ctx])
                a.replace(rebuild(ctx, deadline=float("inf")).context)
            else:
                assert a.delete("x")
        assert rows_holding(a.persistence, SECRET) == set()
        sqlite = not hasattr(a.persistence, "url")
        assert a.persistence.purge_freed() is sqlite
        if sqlite:  # the rewritten and the deleted rows are zeroed on disk too
            assert files_holding(data, SECRET) == set()
        b.catch_up()
        assert b.get("other") is held  # kept: no gap was concluded
        assert "o3" in held.concepts and observable(held) == _fresh(data, "other")
        if erase == "compact":
            got = b.get("x")
            assert got is not None and observable(got) == _fresh(data, "x")
            assert _max_seq(a, "x") > x_rows_before  # the index file's identity only moves forward
        else:
            assert b.get("x") is None and b.names() == ["other"]
        # the log keeps working for both: a later write on either side is seen by the other
        await write(b, "other", lambda c: c.assert_association("o4", "r", "o2", 1.0, "o.md", None))
        a.catch_up()
        mine = a.get("other")
        assert mine is not None and "o4" in mine.concepts

    asyncio.run(scenario())
    a.close()
    b.close()


def _max_seq(reg: Registry, name: str) -> int:
    cid = reg.cid_of(name)
    with reg.persistence._snapshot() as db:  # type: ignore[attr-defined]
        return int(db.execute("SELECT COALESCE(MAX(seq), 0) FROM changes WHERE ctx = ?", (cid,)).fetchone()[0])
