"""`taguru compact`: its flags' usage errors, an offline rebuild of a real store (lines, summary, --json,
--dry-run, --parallel), and the same through a running server (`--url`: per context and the sweep)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pg_support import database_url_for
from process_support import Server, base_env, cli

from taguru_server.cli.datadir import LOCKED, DataDirLock
from taguru_server.cli.main import main
from taguru_server.cli.sizes import human_bytes
from taguru_server.store.model.context import Meta
from taguru_server.store.persist.backend import open_store
from taguru_server.store.persist.registry import Registry


def _env(monkeypatch: pytest.MonkeyPatch, data: Path) -> None:
    for name in [n for n in os.environ if n.startswith("TAGURU_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TAGURU_DATA_DIR", str(data))
    url = database_url_for(data)
    if url:
        monkeypatch.setenv("TAGURU_DATABASE_URL", url)


def _with_dead_edges(data: Path) -> None:
    """Context `k`: two live edges, then source `s` retracted (one dead edge); context `clean`: none dead."""
    registry = Registry(open_store(str(data), database_url_for(data)))
    try:
        ctx = registry.create("k", Meta())
        ctx.assert_association("a", "r", "b", 1.0, "s", None)
        ctx.assert_association("c", "r", "d", 1.0, "t", None)
        clean = registry.create("clean", Meta())
        clean.assert_association("x", "r", "y", 1.0, "u", None)
        registry.commit([ctx, clean])
        ctx.retract_source("s")
        registry.commit([ctx])
    finally:
        registry.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config"], "--config needs a file path"),
        (["--config", "a", "--config", "b"], "--config given twice"),
        (["--url", "--json"], "--url needs a server URL"),
        (["--url", "http://a", "--url", "http://b"], "--url given twice"),
        (["--parallel", "0"], "--parallel needs an integer of at least 1"),
        (["--parallel", "x"], "--parallel needs an integer of at least 1"),
        (["--parallel", "1", "--parallel", "2"], "--parallel given twice"),
        (["--nope"], "unknown flag '--nope'"),
        (["--url", "ftp://h"], "'ftp://h' uses 'ftp', but --url only supports http/https"),
        (
            ["--url", "http://u:p@h"],
            "the URL must not carry credentials (user:password@…) — set TAGURU_API_TOKEN (or TAGURU_API_TOKENS) "
            "instead",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _env(monkeypatch, tmp_path / "data")
    assert main(["compact", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"taguru: compact: {message} — try 'taguru compact --help'\n" and captured.out == ""


def test_help_goes_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compact", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: taguru compact [--config FILE] [--url URL]")


def test_byte_sizes_print_as_the_reference_prints_them() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 1048524, 1048575, 3 * 2**30)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "1023.9 KiB",
        "1.0 MiB",
        "3.0 GiB",
    ]


def test_an_empty_or_absent_data_dir_holds_no_contexts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _env(monkeypatch, tmp_path / "data")
    assert main(["compact"]) == 1
    assert capsys.readouterr().err == "taguru: compact: the data directory holds no contexts\n"
    if not database_url_for(tmp_path / "data"):
        assert not (tmp_path / "data").exists()  # a look at nothing creates nothing


def test_offline_compaction_sheds_the_dead_edges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    _env(monkeypatch, data)
    _with_dead_edges(data)
    assert main(["compact", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "context 'clean': 1 associations, 0 dead edge(s) (0.0% dead), 0 unlinked attribution(s), 0 B arena slack",
        "context 'k': 2 associations, 1 dead edge(s) (50.0% dead), 1 unlinked attribution(s), 0 B arena slack",
        "dry run: 1 of 2 context(s) carry dead weight, nothing rewritten",
    ]
    assert main(["compact", "--dry-run", "--json", "k"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert list(row) == [
        "context",
        "associations",
        "dead_edges",
        "dead_ratio",
        "dead_attributions",
        "arena_slack",
        "footprint_bytes",
        "stats_are_snapshot",
    ]
    assert (row["dead_edges"], row["dead_ratio"], row["stats_are_snapshot"]) == (1, 0.5, False)

    assert main(["compact", "--parallel", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("context 'clean': ") and lines[0].endswith(" (0 dead edge(s) shed)")
    assert lines[1].startswith("context 'k': ") and lines[1].endswith(" (1 dead edge(s) shed)")
    assert lines[2] == "compact: 2 of 2 context(s) rewritten"
    assert main(["compact", "--dry-run", "k"]) == 0
    assert "2 associations" not in capsys.readouterr().out  # the dead edge is gone from the store
    assert main(["compact", "--json", "k"]) == 0
    (done,) = json.loads(capsys.readouterr().out)
    assert list(done) == [
        "name",
        "bytes_before",
        "bytes_after",
        "dead_edges",
        "aliases_dropped",
        "passages_compacted",
        "image_persisted",
    ]
    assert (done["name"], done["dead_edges"], done["image_persisted"]) == ("k", 0, True)


def test_an_unknown_context_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    _env(monkeypatch, data)
    _with_dead_edges(data)
    assert main(["compact", "nope", "k"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "taguru: compact: context 'nope': no such context\n"
    assert captured.out.splitlines()[-1] == "compact: 1 of 2 context(s) rewritten"


@pytest.mark.sqlite_only
def test_offline_compaction_refuses_a_data_dir_a_server_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    _env(monkeypatch, data)
    _with_dead_edges(data)
    with DataDirLock(str(data)):
        assert main(["compact"]) == 1
    assert capsys.readouterr().err == f"taguru: compact: {LOCKED}\n"


@pytest.mark.slow
def test_compaction_through_a_running_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _with_dead_edges(data)
    server = Server(data, tmp_path / "server.log")
    try:
        env = base_env(data)
        named = cli("compact", "--url", server.url + "/", "clean", "nope", env=env)
        assert named.returncode == 1
        assert named.stderr.splitlines()[0] == f"compact → {server.url}"
        assert f"taguru: compact: context 'nope': {server.url}/contexts/nope/compact answered 404: " in named.stderr
        assert named.stdout.splitlines()[0].startswith("context 'clean': ")
        assert named.stdout.splitlines()[0].endswith(" (0 dead edge(s) shed)")
        assert named.stdout.splitlines()[-1] == "compact: 1 of 2 context(s) rewritten"
        dry = cli("compact", "--dry-run", env={**env, "TAGURU_URL": server.url})  # TAGURU_URL stands for --url
        assert dry.returncode == 0 and dry.stderr.splitlines()[0] == f"compact --dry-run → {server.url}"
        assert dry.stdout.splitlines()[-1] == "dry run: 1 of 2 context(s) carry dead weight, nothing rewritten"
        sweep = cli("compact", "--url", server.url, env=env)  # the sweep takes the contexts with dead edges
        assert sweep.returncode == 0, sweep.stderr
        assert sweep.stdout.splitlines()[0].startswith("context 'k': ")
        assert sweep.stdout.splitlines()[0].endswith(" (1 dead edge(s) shed)")
        assert sweep.stdout.splitlines()[1] == "compact: server sweep rewrote 1 context(s)"
        again = cli("compact", "--url", server.url, "--json", "--dry-run", "k", env=env)
        assert again.returncode == 0 and json.loads(again.stdout)[0]["dead_edges"] == 0
    finally:
        server.stop()


def test_a_config_file_that_cannot_be_used_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _env(monkeypatch, tmp_path / "data")
    bad = tmp_path / "bad.conf"
    bad.write_text("pasted secret=x\n", encoding="utf-8")
    assert main(["compact", "--config", str(bad)]) == 2
    assert (
        capsys.readouterr().err
        == f"taguru: compact: config {bad}: line 1: the name before '=' is not a variable name\n"
    )
    assert main(["compact", "--config", str(tmp_path / "none.conf")]) == 2
    assert capsys.readouterr().err == (
        f"taguru: compact: cannot read the config file {tmp_path / 'none.conf'}: No such file or directory\n"
    )
