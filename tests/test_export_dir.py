"""`taguru export --out DIR [CONTEXT...]`: one stream per context and per group, stems escaped byte by byte,
stale files pruned by a full export only, offline and from a server; the files re-import into a fresh
server with every read equal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Client, start_client
from pg_support import database_url_for

from taguru_server.cli.export_dir import stem
from taguru_server.cli.main import main

pytestmark = pytest.mark.anyio


def test_stems_keep_only_the_safe_bytes() -> None:
    assert stem("sake") == "sake"
    assert stem("k.g") == "k%2Eg"
    assert stem("酒") == "%E9%85%92"
    assert stem("a b~c_d-e") == "a%20b%7Ec_d-e"


SEED: list[tuple[str, str, Any]] = [
    ("PUT", "/contexts/sake", {"description": "酒蔵"}),
    ("PUT", "/contexts/k.g", {"description": "dots"}),
    ("PUT", "/contexts/酒", None),
    ("POST", "/contexts/sake/sources", {"passages": {"a.md": "青嶺酒造の杜氏は高瀬。"}}),
    (
        "POST",
        "/contexts/sake/associations",
        [{"subject": "青嶺酒造", "label": "杜氏", "object": "高瀬", "weight": 1.0, "source": "a.md"}],
    ),
    (
        "POST",
        "/contexts/k.g/associations",
        [{"subject": "a", "label": "b", "object": "c", "weight": 2.0, "source": "s"}],
    ),
    ("PUT", "/groups/breweries", {"description": "g", "contexts": ["sake", "酒"]}),
]
READS: list[tuple[str, str, Any]] = [
    ("GET", "/contexts", None),
    ("POST", "/contexts/sake/recall", {"cue": "青嶺酒造"}),
    ("POST", "/contexts/k.g/query", {"subject": "a"}),
    ("GET", "/groups/breweries", None),
    ("POST", "/contexts/sake/sources/search", {"query": "杜氏"}),
]


async def _answers(client: Client) -> list[Any]:
    out = []
    for method, path, body in READS:
        result = (await client.ok(method, path, body))["result"]
        if path == "/contexts":  # usage counters and sizes move with the reads themselves
            result = [{k: c[k] for k in ("name", "description", "stats")} for c in result["contexts"]]
            for c in result:
                c["stats"] = {k: v for k, v in c["stats"].items() if k in ("associations", "concepts", "sources")}
        out.append(result)
    return out


async def _seeded(settings: Any) -> list[Any]:
    server, client, session = await start_client(settings)
    try:
        for method, path, body in SEED:
            await client.ok(method, path, body)
        return await _answers(client)
    finally:
        await session.close()
        await server.close()


async def test_offline_full_export_prunes_and_reimports_equal(
    settings_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    settings = settings_factory()
    before = await _seeded(settings)
    monkeypatch.setenv("TAGURU_DATA_DIR", settings.data_dir)
    url = database_url_for(Path(settings.data_dir))
    if url:
        monkeypatch.setenv("TAGURU_DATABASE_URL", url)
    out = tmp_path / "backup"
    out.mkdir()
    (out / "gone.jsonl").write_text("{}\n", encoding="utf-8")
    (out / "notes.txt").write_text("kept", encoding="utf-8")
    assert await asyncio.to_thread(main, ["export", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    files = sorted(p.name for p in out.iterdir())
    assert files == ["%E9%85%92.jsonl", "breweries.group.jsonl", "k%2Eg.jsonl", "notes.txt", "sake.jsonl"]
    assert f"{out / 'gone.jsonl'}: removed — no longer exists at the source" in said
    assert f"{out / 'breweries.group.jsonl'}: group 'breweries' → 2 member context(s), 0 child group(s)" in said
    assert f"export: 3 of 3 context(s) and 1 of 1 group(s) written to {out}" in said
    # a subset export writes the named contexts only and removes nothing
    (out / "stale.jsonl").write_text("{}\n", encoding="utf-8")
    assert await asyncio.to_thread(main, ["export", "--out", str(out), "sake"]) == 0
    assert (out / "stale.jsonl").exists()
    assert f"export: 1 of 1 context(s) written to {out}" in capsys.readouterr().out
    (out / "stale.jsonl").unlink()
    # the files restore a fresh server: contexts first, then the group
    fresh = settings_factory(TAGURU_DATA_DIR=str(tmp_path / "fresh"))
    server, client, session = await start_client(fresh)
    try:
        for path in sorted(out.glob("*.jsonl"), key=lambda p: p.name.endswith(".group.jsonl")):
            status, body, _h = await client.call(
                "POST", "/import", raw=path.read_bytes(), content_type="application/x-ndjson"
            )
            assert status == 200, (path, body)
        assert await _answers(client) == before
    finally:
        await session.close()
        await server.close()


async def test_remote_full_export(client: Client, tmp_path: Path, capsys: Any) -> None:
    for method, path, body in SEED:
        await client.ok(method, path, body)
    out = tmp_path / "remote"
    assert await asyncio.to_thread(main, ["export", "--out", str(out), "--url", client.base]) == 0
    captured = capsys.readouterr()
    assert "this is not a point-in-time snapshot across contexts" in captured.err
    assert f"{out / 'sake.jsonl'}: context 'sake' → 1 batch(es), " in captured.out
    assert sorted(p.name for p in out.iterdir()) == [
        "%E9%85%92.jsonl",
        "breweries.group.jsonl",
        "k%2Eg.jsonl",
        "sake.jsonl",
    ]
    group = json.loads((out / "breweries.group.jsonl").read_text(encoding="utf-8"))
    assert group == {"taguru_group": 1, "name": "breweries", "description": "g", "contexts": ["sake", "酒"]}
    missing = await asyncio.to_thread(main, ["export", "--out", str(out), "--url", client.base, "nope"])
    assert missing == 1
    assert "taguru: export: context 'nope': context 'nope' not found" in capsys.readouterr().err


def test_export_usage(capsys: Any) -> None:
    assert main(["export"]) == 2
    assert "name one context" in capsys.readouterr().err
    assert main(["export", "a", "b"]) == 2


async def test_taguru_import_of_the_directory_restores_groups_after_their_contexts(
    settings_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    settings = settings_factory()
    before = await _seeded(settings)
    for key, value in (
        ("TAGURU_DATA_DIR", settings.data_dir),
        ("TAGURU_DATABASE_URL", database_url_for(Path(settings.data_dir))),
    ):
        if value:
            monkeypatch.setenv(key, value)
    out = tmp_path / "backup"
    assert await asyncio.to_thread(main, ["export", "--out", str(out)]) == 0
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("TAGURU_DATA_DIR", str(fresh))
    url = database_url_for(fresh)
    if url:
        monkeypatch.setenv("TAGURU_DATABASE_URL", url)
    assert await asyncio.to_thread(main, ["import", "--no-embed", str(out)]) == 0, capsys.readouterr().err
    server, client, session = await start_client(settings_factory(TAGURU_DATA_DIR=str(fresh)))
    try:
        assert await _answers(client) == before
    finally:
        await session.close()
        await server.close()
