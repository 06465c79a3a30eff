"""GET /contexts/{name}/export (export spec A.1-A.4): the worked examples byte for byte, refusals, round trips."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import Client, settings_factory, start_client  # noqa: F401

pytestmark = pytest.mark.anyio

NDJSON = "application/x-ndjson; charset=utf-8"


def jl(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


async def export(client: Client, name: str) -> str:
    async with client.session.get(f"{client.base}/contexts/{quote(name, safe='')}/export") as resp:
        body = await resp.read()
        assert resp.status == 200, body
        assert resp.headers["Content-Type"] == NDJSON
        return body.decode("utf-8")


async def refused(client: Client, name: str) -> tuple[int, dict[str, Any]]:
    status, body, headers = await client.call("GET", f"/contexts/{quote(name, safe='')}/export")
    assert headers["Content-Type"].startswith("application/json")
    return status, body


async def stored_at(client: Client, name: str, source: str) -> int:
    got = await client.ok("GET", f"/contexts/{name}/sources")
    return next(e["stored_at"] for e in got["result"]["entries"] if e["name"] == source)


async def build_sake(client: Client) -> None:
    """Worked example 2 (A.3), built through the public API in the spec's order."""
    meta = {"description": "酒蔵の知識", "pinned": True, "dice_floor": 0.25, "semantic_floor": 0.5}
    stream = jl(
        {"taguru_batch": 1, "context": "sake", "source": "a.md", "create": meta},
        {
            "passage": "青嶺酒造は1907年創業。\n\n代表銘柄は青嶺。",
            "stored_at": 1700000000,
            "date": 1181600000,
            "tags": ["酒", "蔵"],
        },
        {"paragraph": 0, "question": "いつ創業した?"},
        {"paragraph": 0, "section": "沿革"},
        {"paragraph": 0, "locator": {"kind": "page", "value": "12"}},
        {"subject": "青嶺酒造", "label": "代表銘柄", "object": "青嶺", "weight": 1.0, "paragraph": 0},
        {"subject": "青嶺酒造", "label": "代表銘柄", "object": "青嶺", "weight": 1.0},
        {"taguru_batch": 1, "context": "sake", "source": "b.md"},
        {"passage": "杜氏の紹介。\n\n代表銘柄の解説。"},
        {"subject": "青嶺酒造", "label": "代表銘柄", "object": "青嶺", "weight": 2.5, "paragraph": 1},
    )
    await client.ok("POST", "/import", raw=stream, content_type="application/x-ndjson")
    await client.ok(
        "POST",
        "/contexts/sake/associations",
        [
            {"subject": "青嶺酒造", "label": "杜氏", "object": "高瀬", "weight": 1.5},
            {"subject": "青嶺酒造", "label": "廃止銘柄", "object": "旧銘", "weight": 1.0, "source": "gone.md"},
        ],
    )
    await client.ok(
        "POST",
        "/contexts/sake/aliases",
        {"concepts": {"Aomine": "青嶺酒造", "Kyumei": "旧銘"}, "labels": {"とじ": "杜氏"}},
    )
    await client.ok("POST", "/contexts/sake/sources/retract", {"source": "gone.md"})


SAKE = """\
{"taguru_batch":1,"context":"sake","source":"a.md","create":{"description":"酒蔵の知識","pinned":true,"dice_floor":0.25,"semantic_floor":0.5}}
{"passage":"青嶺酒造は1907年創業。\\n\\n代表銘柄は青嶺。","stored_at":1700000000,"date":1181600000,"tags":["蔵","酒"]}
{"paragraph":0,"question":"いつ創業した?"}
{"paragraph":0,"section":"沿革"}
{"paragraph":0,"locator":{"kind":"page","value":"12"}}
{"subject":"青嶺酒造","label":"代表銘柄","object":"青嶺","weight":1.0,"paragraph":0}
{"subject":"青嶺酒造","label":"代表銘柄","object":"青嶺","weight":1.0}
{"taguru_batch":1,"context":"sake","source":"b.md"}
{"passage":"杜氏の紹介。\\n\\n代表銘柄の解説。","stored_at":T}
{"subject":"青嶺酒造","label":"代表銘柄","object":"青嶺","weight":2.5,"paragraph":1}
{"taguru_batch":1,"context":"sake","source":"export:unsourced"}
{"subject":"青嶺酒造","label":"杜氏","object":"高瀬","weight":1.5}
{"alias":"Aomine","canonical":"青嶺酒造","kind":"concept"}
{"alias":"とじ","canonical":"杜氏","kind":"label"}
"""


async def test_worked_example_2_byte_for_byte(client: Client) -> None:
    await build_sake(client)
    t = await stored_at(client, "sake", "b.md")
    assert await export(client, "sake") == SAKE.replace("T}", f"{t}}}")


async def test_worked_example_1(client: Client) -> None:
    await client.ok("PUT", "/contexts/corpus-a", {"description": "wire-contract corpus"})
    await client.ok(
        "POST",
        "/contexts/corpus-a/associations",
        [
            {
                "subject": "alpha",
                "label": "connects_to",
                "object": "beta",
                "weight": 2.0,
                "source": "doc.md",
                "paragraph": 0,
            }
        ],
    )
    await client.ok(
        "POST",
        "/contexts/corpus-a/sources",
        {
            "passages": {"doc.md": "alpha connects to beta."},
            "locators": {"doc.md": [{"paragraph": 0, "locator": {"kind": "page", "value": "1"}}]},
        },
    )
    t = await stored_at(client, "corpus-a", "doc.md")
    assert await export(client, "corpus-a") == (
        '{"taguru_batch":1,"context":"corpus-a","source":"doc.md","create":{"description":"wire-contract corpus"}}\n'
        f'{{"passage":"alpha connects to beta.","stored_at":{t}}}\n'
        '{"paragraph":0,"locator":{"kind":"page","value":"1"}}\n'
        '{"subject":"alpha","label":"connects_to","object":"beta","weight":2.0,"paragraph":0}\n'
    )


async def test_empty_context_is_one_header_only_batch(client: Client) -> None:
    await client.ok("PUT", "/contexts/空 box", {})
    assert await export(client, "空 box") == (
        '{"taguru_batch":1,"context":"空 box","source":"export:empty","create":{"description":""}}\n'
    )
    # a context whose only edge is dead and whose aliases are all dead is empty too
    await client.ok("PUT", "/contexts/dead", {"description": "d"})
    await client.ok(
        "POST",
        "/contexts/dead/associations",
        [{"subject": "a", "label": "r", "object": "b", "weight": 1.0, "source": "s"}],
    )
    await client.ok("POST", "/contexts/dead/aliases", {"concepts": {"A": "a"}})
    await client.ok("POST", "/contexts/dead/associations/retract", {"subject": "a", "label": "r", "object": "b"})
    text = await export(client, "dead")
    assert text == '{"taguru_batch":1,"context":"dead","source":"export:empty","create":{"description":"d"}}\n'
    # importing the header-only batch into an empty server creates the context
    server, other, session = await start_client(client_settings(client))
    try:
        await other.ok("POST", "/import", raw=text, content_type="application/x-ndjson")
        assert await export(other, "dead") == text
    finally:
        await session.close()
        await server.close()


def client_settings(client: Client) -> Any:
    from taguru_server.server.config import load_settings

    return load_settings({"TAGURU_DATA_DIR": str(Path(SCRATCH[0]) / f"other{len(SCRATCH)}")})


SCRATCH: list[str] = []


@pytest.fixture(autouse=True)
def _scratch(tmp_path: Path) -> None:
    SCRATCH[:] = [str(tmp_path)]


async def test_unknown_context_is_404(client: Client) -> None:
    status, body = await refused(client, "nope")
    assert status == 404 and body["code"] == "no_context" and body["error"] == "context 'nope' not found"


RESERVED = "source id '{}' is reserved by export — rename the source and re-export"


async def test_reserved_source_ids_are_refused_before_the_stream(client: Client) -> None:
    await client.ok("PUT", "/contexts/r1", {})
    await client.ok(
        "POST",
        "/contexts/r1/associations",
        [{"subject": "a", "label": "r", "object": "b", "weight": 1.0, "source": "export:empty"}],
    )
    status, body = await refused(client, "r1")
    assert (status, body["code"], body["error"]) == (409, "conflict", RESERVED.format("export:empty"))
    # once that attribution is retracted, the interned source name alone is no reason to refuse
    await client.ok("POST", "/contexts/r1/sources/retract", {"source": "export:empty"})
    assert (await export(client, "r1")).endswith('"source":"export:empty","create":{"description":""}}\n')

    await client.ok("PUT", "/contexts/r2", {})
    await client.ok("POST", "/contexts/r2/sources", {"passages": {"export:unsourced": "x"}})
    status, body = await refused(client, "r2")
    assert (status, body["error"]) == (409, RESERVED.format("export:unsourced"))

    await client.ok("PUT", "/contexts/r3", {})
    await client.ok("POST", "/contexts/r3/sources", {"passages": {"export:empty": "x", "export:unsourced": "y"}})
    status, body = await refused(client, "r3")
    assert (status, body["error"]) == (409, RESERVED.format("export:empty"))

    # live attributions under `export:unsourced` are not refused: they fold into the residual batch
    await client.ok("PUT", "/contexts/r4", {})
    await client.ok(
        "POST",
        "/contexts/r4/associations",
        [
            {"subject": "a", "label": "r", "object": "b", "weight": 1.0, "source": "export:unsourced"},
            {"subject": "a", "label": "r", "object": "b", "weight": 3.0},
        ],
    )
    assert await export(client, "r4") == (
        '{"taguru_batch":1,"context":"r4","source":"export:unsourced","create":{"description":""}}\n'
        '{"subject":"a","label":"r","object":"b","weight":2.0}\n'
        '{"subject":"a","label":"r","object":"b","weight":2.0}\n'
    )


async def test_round_trip_on_a_generated_corpus(tmp_path: Path) -> None:
    """A -> E(A) -> I(E(A)): same sources, searches and evidence; E(I(E(A))) is a fixed point."""
    from export_support import answers, exact_corpus, export_bytes, import_bytes, server

    stream, queries = exact_corpus(3000)
    async with server(tmp_path / "a") as a:
        await import_bytes(a, stream.encode("utf-8"))
        e_a = await export_bytes(a, "bench")
        before = await answers(a, "bench", queries)
    async with server(tmp_path / "b") as b:
        await import_bytes(b, e_a)
        assert await answers(b, "bench", queries) == before
        e_b = await export_bytes(b, "bench")
        # re-importing the same stream is idempotent
        await import_bytes(b, e_a)
        assert await export_bytes(b, "bench") == e_b
    async with server(tmp_path / "c") as c:
        await import_bytes(c, e_b)
        assert await export_bytes(c, "bench") == e_b


def reduce_matches(matches: list[dict[str, Any]]) -> dict[tuple[str, str, str], Any]:
    """Per live triple: count, the real attributions (source, weight, count, paragraph), the sourceless share (A.4)."""
    out: dict[tuple[str, str, str], Any] = {}
    for m in matches:
        if m["count"] == 0:
            continue
        real = sorted(
            (a["source"], a["weight"], a["count"], a["paragraph"])
            for a in m["attributions"]
            if a["source"] != "export:unsourced"
        )
        attributed = sum(a["count"] for a in m["attributions"] if a["source"] != "export:unsourced")
        out[(m["subject"], m["label"], m["object"])] = (m["count"], real, m["count"] - attributed)
    return out


async def test_conformance_round_trip_of_the_sake_context(client: Client, tmp_path: Path) -> None:
    """A.4's conformance test on worked example 2 (corroboration, unsourced weight, a dead edge, a dead alias)."""
    from export_support import export_bytes, import_bytes, server

    await build_sake(client)
    query = {"subject": ["青嶺酒造"]}
    before = (await client.ok("POST", "/contexts/sake/query", query))["result"]["matches"]
    lookup = {"sources": ["a.md", "b.md", "gone.md"]}
    passages = await client.ok("POST", "/contexts/sake/sources/lookup", lookup)
    listing = await client.ok("GET", "/contexts/sake/sources")
    e_a = await export_bytes(client, "sake")
    async with server(tmp_path / "b") as b:
        await import_bytes(b, e_a)
        after = (await b.ok("POST", "/contexts/sake/query", query))["result"]["matches"]
        assert reduce_matches(after) == reduce_matches(before)
        assert any(a["source"] == "export:unsourced" for m in after for a in m["attributions"])  # D2
        assert (await b.ok("POST", "/contexts/sake/sources/lookup", lookup))["result"] == passages["result"]
        assert (await b.ok("GET", "/contexts/sake/sources"))["result"] == listing["result"]
        got = await b.ok("GET", "/contexts/sake")
        assert {k: got["result"][k] for k in ("description", "pinned")} == {"description": "酒蔵の知識", "pinned": True}
        aliases = (await b.ok("GET", "/contexts/sake/aliases"))["result"]
        assert aliases["concepts"] == {"Aomine": "青嶺酒造"} and aliases["labels"] == {"とじ": "杜氏"}  # D5
        e_b = await export_bytes(b, "sake")
    async with server(tmp_path / "c") as c:
        await import_bytes(c, e_b)
        assert await export_bytes(c, "sake") == e_b


def test_attributions_find_their_source_by_key(tmp_path: Path) -> None:
    """The planner once scanned every source per attribution record (minutes on 20k paragraphs)."""
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.transfer.export import _ATTRIBUTIONS

    store = SqlitePersistence(tmp_path / "data")
    try:
        plan = [row[3] for row in store.db.execute("EXPLAIN QUERY PLAN " + _ATTRIBUTIONS, (1, "x"))]
    finally:
        store.close()
    assert "SEARCH src USING PRIMARY KEY (ctx=? AND id=?)" in plan, plan
    assert plan.index("SEARCH e USING PRIMARY KEY (ctx=?)") < plan.index(
        "SEARCH src USING PRIMARY KEY (ctx=? AND id=?)"
    )


async def test_the_stream_is_one_snapshot_and_ends_it(tmp_path: Path) -> None:
    """A write landing mid-stream is not in the stream; an abandoned stream releases its snapshot."""
    import sqlite3

    from export_support import exact_corpus, export_bytes, import_bytes, server

    from taguru_server.store.persist.sqlite import DB_NAME

    stream, _queries = exact_corpus(3000)
    write = [{"subject": "zz-new", "label": "r", "object": "zz-obj", "weight": 1.0, "source": "000001-late.md"}]
    async with server(tmp_path / "a") as a:
        await import_bytes(a, stream.encode("utf-8"))
        whole = await export_bytes(a, "bench")
        assert len(whole) > 4 * 256 * 1024
        async with a.session.get(f"{a.base}/contexts/bench/export") as resp:
            first = await resp.content.readexactly(1024)
            await a.ok("POST", "/contexts/bench/associations", write)  # the loop serves others meanwhile
            rest = await resp.read()
        assert first + rest == whole
        assert b"zz-new" in await export_bytes(a, "bench")
        # a client that goes away mid-stream: the snapshot is ended, so a checkpoint can complete
        async with a.session.get(f"{a.base}/contexts/bench/export") as resp:
            await resp.content.readexactly(1024)
            resp.close()
        db = sqlite3.connect(tmp_path / "a" / DB_NAME)
        try:
            for _ in range(100):
                busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                if not busy:
                    break
                await asyncio.sleep(0.05)
            assert busy == 0
        finally:
            db.close()


@pytest.mark.slow
async def test_round_trip_at_20k_paragraphs(tmp_path: Path) -> None:
    """The acceptance's scale: E(A) re-imports with the same answers; E(I(E(A))) is a fixed point."""
    from export_support import answers, exact_corpus, export_bytes, import_bytes, server

    stream, queries = exact_corpus(20000)
    async with server(tmp_path / "a") as a:
        await import_bytes(a, stream.encode("utf-8"))
        e_a = await export_bytes(a, "bench")
        before = await answers(a, "bench", queries)
    async with server(tmp_path / "b") as b:
        await import_bytes(b, e_a)
        assert await answers(b, "bench", queries) == before
        e_b = await export_bytes(b, "bench")
    async with server(tmp_path / "c") as c:
        await import_bytes(c, e_b)
        assert await export_bytes(c, "bench") == e_b


async def test_a_deadline_while_opening_is_an_envelope_and_the_late_snapshot_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3
    import time

    from export_support import server

    from taguru_server.server.routes import export as route
    from taguru_server.store.persist.sqlite import DB_NAME
    from taguru_server.store.transfer.export import ContextExport

    opened: list[ContextExport] = []

    class Slow(ContextExport):
        @classmethod
        def open(cls, db_file: Path, name: str) -> ContextExport:
            time.sleep(1.3)  # past the 1 s budget, in the worker thread
            opened.append(ContextExport.open(db_file, name))
            return opened[-1]

    monkeypatch.setattr(route, "ContextExport", Slow)
    async with server(tmp_path / "a", TAGURU_REQUEST_TIMEOUT_SECS="1") as a:
        await a.ok("PUT", "/contexts/c", {})
        status, body, headers = await a.call("GET", "/contexts/c/export")
        assert status == 408 and body["code"] == "timeout" and headers["Content-Type"].startswith("application/json")
        for _ in range(100):
            if opened and opened[0].closed:
                break
            await asyncio.sleep(0.05)
        assert opened and opened[0].closed
        db = sqlite3.connect(tmp_path / "a" / DB_NAME)
        try:
            assert db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        finally:
            db.close()
