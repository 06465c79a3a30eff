"""`taguru inspect`: a real store verified read-only (nothing written beside it, no lock taken), the
boot checks' refusals as corrupt rows and exit 1, a context that does not load, a stale BM25 file
as a note, the groups' warnings, the JSON envelope, and a PostgreSQL store by URL."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from pg_support import database_url_for

from taguru_server.cli.datadir import DataDirLock
from taguru_server.cli.main import main
from taguru_server.store.model.context import Meta
from taguru_server.store.persist.backend import open_store
from taguru_server.store.persist.groups import GroupRecord
from taguru_server.store.persist.registry import Registry


def _store(data: Path, url: str | None = None) -> None:
    """Context `k` (one dead edge, a passage), context `z`, and groups: one sound, one dangling, a cycle."""
    persistence = open_store(str(data), url)
    if url is None:
        persistence.index_dir = data / "indexes"
    registry = Registry(persistence)
    try:
        k = registry.create("k", Meta())
        k.assert_association("a", "r", "b", 1.0, "s", None)
        k.assert_association("c", "r", "d", 1.0, "t", None)
        z = registry.create("z", Meta())
        z.assert_association("x", "r", "y", 1.0, "u", None)
        registry.commit([k, z])
        k.retract_source("s")
        registry.commit([k])
        persistence.write_groups(
            {
                "good": GroupRecord.of("", ["k"], []),
                "holey": GroupRecord.of("", ["k", "gone"], ["missing"]),
                "loop-a": GroupRecord.of("", ["z"], ["loop-b"]),
                "loop-b": GroupRecord.of("", ["z"], ["loop-a"]),
            }
        )
    finally:
        registry.close()


def _listing(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(directory.rglob("*"))}


@pytest.mark.sqlite_only
def test_a_sound_store_is_ok_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    _store(data)
    before = _listing(data)
    with DataDirLock(str(data)):  # a live server holds the lock: inspect never takes it
        assert main(["inspect", str(data)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "k: ok  2 associations · 4 concepts · 1 labels · 2 sources · footprint 1.2 KiB · 1 dead edge(s) (50.0% dead) "
        "· 1 dead attribution(s) · 0 unsourced edge(s) · 0 passages"
    )
    assert lines[1].startswith("z: ok  1 associations")
    assert "good: ok  1 member context(s) · 0 child group(s)" in lines
    assert (
        "holey: ok  2 member context(s) · 1 child group(s) · WARNING: member context 'gone' does not exist "
        "· WARNING: child group 'missing' does not exist"
    ) in lines
    assert (
        "groups: WARNING — boot drops the nesting edge 'loop-b' → 'loop-a' (it would close a cycle or stack more "
        "than 3 groups)"
    ) in lines
    assert lines[-1].startswith("total: 2 contexts · 4 groups · store ")
    after = _listing(data)
    after.pop("LOCK", None)
    before.pop("LOCK", None)
    assert after == before  # no -wal, no -shm, no opened_at, no index rewrite


@pytest.mark.sqlite_only
def test_the_json_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    _store(data)
    assert main(["inspect", "--json", str(data)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["target", "kind", "contexts", "groups", "notices", "total", "corrupt"]
    assert (doc["target"], doc["kind"], doc["corrupt"]) == (str(data), "directory", 0)
    k = doc["contexts"][0]
    assert list(k) == [
        "name",
        "status",
        "associations",
        "concepts",
        "labels",
        "sources",
        "footprint_bytes",
        "dead_edges",
        "dead_ratio",
        "dead_attributions",
        "unsourced_edges",
        "unsourced_weight",
        "passage_count",
    ]
    assert (k["name"], k["status"], k["dead_edges"], k["dead_ratio"]) == ("k", "ok", 1, 0.5)
    kinds = sorted(n["kind"] for n in doc["notices"])
    assert kinds == ["dangling_child_group_reference", "dangling_context_reference", "dropped_nesting_edge"]
    assert {n["level"] for n in doc["notices"]} == {"warning"}
    assert list(doc["total"]) == [
        "contexts",
        "groups",
        "store_bytes",
        "index_bytes",
        "passage_count",
        "footprint_bytes",
    ]


@pytest.mark.sqlite_only
def test_a_bare_store_file_and_an_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    _store(data)
    assert main(["inspect", "--json", str(data / "taguru.sqlite3")]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "store"
    (tmp_path / "empty").mkdir()
    assert main(["inspect", str(tmp_path / "empty")]) == 0
    assert capsys.readouterr().out == f"no taguru store under {tmp_path / 'empty'}\n"


@pytest.mark.sqlite_only
def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAGURU_DATABASE_URL", raising=False)
    monkeypatch.delenv("TAGURU_CONFIG", raising=False)
    assert main(["inspect", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: taguru inspect PATH [--json]   (")
    for argv in (["a", "b"], ["--bogus", "a"], []):
        assert main(["inspect", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith("usage: taguru inspect PATH [--json]") and captured.out == ""
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"taguru: inspect: {tmp_path / 'nope'} is neither a file nor a directory\n"


@pytest.mark.sqlite_only
def test_a_damaged_store_is_one_corrupt_row_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "taguru.sqlite3").write_bytes(b"not a database at all" * 100)
    assert main(["inspect", "--json", str(data)]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    (row,) = doc["contexts"]
    assert row["status"] == "corrupt_store" and doc["corrupt"] == 1 and "total" not in doc
    assert row["error"].startswith(f"the store {data / 'taguru.sqlite3'} ")
    assert captured.err == "taguru: inspect: 1 corrupt\n"


@pytest.mark.sqlite_only
def test_a_swapped_database_is_refused_as_boot_refuses_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    _store(data)
    (data / "STORE_ID").write_text("0" * 32 + "\n", encoding="ascii")
    assert main(["inspect", str(data)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{data}: CORRUPT store — the store {data / 'taguru.sqlite3'} is store ")
    assert "but the data dir held store 00000000000000000000000000000000 (replaced?)" in out


@pytest.mark.sqlite_only
def test_a_context_that_does_not_load_is_corrupt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    _store(data)
    with sqlite3.connect(data / "taguru.sqlite3") as db:
        db.execute("UPDATE edges SET attrs = '{broken' WHERE ctx = (SELECT id FROM contexts WHERE name = 'z')")
    assert main(["inspect", str(data)]) == 1
    captured = capsys.readouterr()
    assert "z: CORRUPT context — the context cannot be loaded (JSONDecodeError)" in captured.out.splitlines()
    assert captured.out.splitlines()[0].startswith("k: ok  ")
    assert captured.err == "taguru: inspect: 1 corrupt\n"


def imported_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data dir `taguru import` made from a one-passage stream (context `p`)."""
    monkeypatch.delenv("TAGURU_DATABASE_URL", raising=False)
    data = tmp_path / "data"
    stream = tmp_path / "p.jsonl"
    stream.write_text(
        '{"taguru_batch": 1, "context": "p", "source": "a.md", "create": {}}\n'
        '{"passage": "The brewmaster came from Noto.\\n\\nThe brewery stands by the port."}\n',
        encoding="utf-8",
    )
    assert main(["import", "--data-dir", str(data), "--no-embed", str(stream)]) == 0
    return data


@pytest.mark.sqlite_only
def test_a_stale_index_file_is_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = imported_offline(tmp_path, monkeypatch)
    persistence = open_store(str(data), None)
    persistence.index_dir = data / "indexes"
    registry = Registry(persistence)
    assert registry.get("p") is not None  # the server's load writes the index file
    registry.close()
    (index,) = (data / "indexes").glob("*.bm25")
    assert main(["inspect", "--json", str(data)]) == 0
    assert "notices" not in json.loads(capsys.readouterr().out)  # the file holds: nothing to say
    raw = bytearray(index.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    index.write_bytes(bytes(raw))
    assert main(["inspect", "--json", str(data)]) == 0
    doc = json.loads(capsys.readouterr().out)
    (note,) = doc["notices"]
    assert (note["level"], note["kind"], note["subject"]) == ("note", "stale_index", "p")
    assert note["message"].startswith("the persisted BM25 index is rebuilt at the next load (")
    assert index.read_bytes() == bytes(raw)  # the note changed nothing


def test_a_postgresql_store_by_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = database_url_for(tmp_path / "data")
    if url is None:
        pytest.skip("the PostgreSQL pass of the suite inspects a PostgreSQL store")
    _store(tmp_path / "data", url)
    assert main(["inspect", "--json", url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "postgresql" and doc["target"].startswith("postgresql://")
    assert [row["name"] for row in doc["contexts"]] == ["k", "z"] and doc["corrupt"] == 0
    assert "password" not in doc["target"] and "@" not in doc["target"]
