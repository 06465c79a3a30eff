"""The newcomer's CLI: one settings-file dialect, one rule for the server URL, the flags `serve` and
`import` share, and a PostgreSQL store that cannot be reached said in one clear line.

The in-process tests drive `taguru` through its main function; the process tests (slow) start it.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

import pytest
from process_support import PYTHON, ROOT, base_env, free_port

from taguru_server.cli.main import main
from taguru_server.cli.serve import flag_overrides
from taguru_server.client.config import MalformedConfig, read_config_file
from taguru_server.client.http import base_url
from taguru_server.store.persist.postgres import connect_failure, store_location

BATCH = '{"taguru_batch": 1, "context": "sake", "source": "a.md", "create": {}}\n'


def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No TAGURU_* variable of the caller's shell, and a working directory of the test's own."""
    import os

    for name in [n for n in os.environ if n.startswith("TAGURU_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


# ----- the settings file -----------------------------------------------------------------------


def test_a_shell_export_prefix_and_a_bom_read_as_plain_lines(tmp_path: Path) -> None:
    cfg = tmp_path / "taguru.env"
    cfg.write_text("\ufeffexport TAGURU_ADDR=127.0.0.1:9\n  export   TAGURU_DATA_DIR = d \nTAGURU_ADDR=x:1\n", "utf-8")
    assert read_config_file(cfg) == {"TAGURU_ADDR": "x:1", "TAGURU_DATA_DIR": "d"}


def test_a_name_with_whitespace_is_refused_without_echoing_the_line(tmp_path: Path) -> None:
    cfg = tmp_path / "taguru.env"
    cfg.write_text("# keys\nTAGURU_API_TOKEN=ok\nsk-secret pasted=value-secret\n", "utf-8")
    with pytest.raises(MalformedConfig) as err:
        read_config_file(cfg)
    assert str(err.value) == f"config {cfg}: line 3: the name before '=' is not a variable name"


def test_import_refuses_a_malformed_config_with_exit_2_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean_env(monkeypatch, tmp_path)
    cfg = tmp_path / "taguru.env"
    cfg.write_text("my token=hunter2\n", "utf-8")
    (tmp_path / "b.jsonl").write_text(BATCH, "utf-8")
    with pytest.raises(SystemExit) as exited:  # the settings refusal ends the command (exit 2)
        main(["import", "--config", str(cfg), "b.jsonl"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert (
        "line 1: the name before '=' is not a variable name" in err and "hunter2" not in err and "my token" not in err
    )


def test_serve_reads_an_export_prefixed_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exported line is the address `taguru health` then probes (it read nothing before)."""
    from taguru_server.cli.health import target

    cfg = tmp_path / "taguru.env"
    cfg.write_text("export TAGURU_ADDR=127.0.0.1:18999\n", "utf-8")
    assert target(str(cfg), None, {}) == "http://127.0.0.1:18999"


# ----- the server URL: --url, else TAGURU_URL, else TAGURU_ADDR --------------------------------


def test_every_client_command_reads_taguru_url_and_the_flag_wins() -> None:
    env = {"TAGURU_URL": "http://from-env:1/", "TAGURU_ADDR": "127.0.0.1:2"}
    assert base_url(None, env) == "http://from-env:1"
    assert base_url("http://flag:3", env) == "http://flag:3"
    assert base_url(None, {"TAGURU_ADDR": "127.0.0.1:2"}) == "http://127.0.0.1:2"


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_import_goes_to_the_server_of_taguru_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean_env(monkeypatch, tmp_path)
    dead = _dead_url()
    monkeypatch.setenv("TAGURU_URL", dead)
    (tmp_path / "b.jsonl").write_text(BATCH, "utf-8")
    assert main(["import", "b.jsonl"]) == 1
    assert "taguru import: cannot reach the server" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # nothing was written offline
    # --data-dir asks for the data directory: TAGURU_URL does not apply
    assert main(["import", "--data-dir", str(tmp_path / "mine"), "b.jsonl"]) == 0
    assert (tmp_path / "mine" / "taguru.sqlite3").exists() and not (tmp_path / "data").exists()
    assert main(["import", "--url", dead, "--data-dir", "x", "b.jsonl"]) == 2


def test_export_and_communities_and_evaluate_follow_taguru_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean_env(monkeypatch, tmp_path)
    dead = _dead_url()
    monkeypatch.setenv("TAGURU_URL", dead)
    assert main(["export", "--out", "o"]) == 1
    assert main(["communities", "--context", "sake"]) == 1
    (tmp_path / "eval.jsonl").write_text('{"taguru_eval": 1}\n{"case_id": "a", "query": "q"}\n', "utf-8")
    assert main(["evaluate", "--eval", "eval.jsonl", "--context", "sake"]) == 1
    err = capsys.readouterr().err
    assert err.count(dead.removeprefix("http://")) >= 3, err


# ----- --addr and --data-dir -------------------------------------------------------------------


def test_the_flags_stand_for_their_variables() -> None:
    import argparse

    args = argparse.Namespace(addr="127.0.0.1:1", data_dir="d")
    assert flag_overrides(args) == {"TAGURU_ADDR": "127.0.0.1:1", "TAGURU_DATA_DIR": "d"}
    assert flag_overrides(argparse.Namespace(addr=None, data_dir=None)) == {}


@pytest.mark.slow
@pytest.mark.sqlite_only
def test_serve_flags_beat_the_environment_and_the_config_file(tmp_path: Path) -> None:
    import subprocess
    import time

    port = free_port()
    cfg = tmp_path / "taguru.env"
    cfg.write_text(f"TAGURU_ADDR=127.0.0.1:{free_port()}\nTAGURU_DATA_DIR={tmp_path / 'from-file'}\n", "utf-8")
    env = base_env(tmp_path / "from-env", TAGURU_ADDR="127.0.0.1:1", TAGURU_LOG_FORMAT="json")
    chosen = tmp_path / "from-flag"
    args = ["serve", "--config", str(cfg), "--addr", f"127.0.0.1:{port}", "--data-dir", str(chosen)]
    proc = subprocess.Popen([PYTHON, "-m", "taguru_server.cli", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().decode().strip() == f"listening on 127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                    assert json.loads(resp.read())["status"] == "ok"
                    break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert (chosen / "taguru.sqlite3").exists()
        assert not (tmp_path / "from-env").exists() and not (tmp_path / "from-file").exists()
    finally:
        proc.terminate()
        proc.wait(20)


# ----- an unreachable PostgreSQL -----------------------------------------------------------------


def test_a_connect_failure_names_where_and_why_but_never_the_password() -> None:
    url = "postgresql://alice:s3cret-pw@db.example:6543/taguru"
    assert store_location(url) == "db.example:6543/taguru"
    assert store_location("postgresql:///x") == "localhost:5432/x"

    class Refused(Exception):
        pass

    exc = Refused('connection failed: connection to server at "10.0.0.1", port 6543 failed: Connection refused\n\tIs…')
    assert connect_failure(url, exc) == (
        "the PostgreSQL store at db.example:6543/taguru cannot be reached: Connection refused"
    )
    leaky = Refused("password s3cret-pw rejected")
    assert "s3cret-pw" not in connect_failure(url, leaky)


@pytest.mark.parametrize("command", [["migrate"], ["import", "b.jsonl"], ["export", "--out", "o"]])
def test_an_unreachable_postgresql_is_one_clear_line_and_exit_1(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg")
    _clean_env(monkeypatch, tmp_path)
    (tmp_path / "b.jsonl").write_text(BATCH, "utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TAGURU_DATABASE_URL", f"postgresql://bob:pw-never-shown@127.0.0.1:{port}/taguru")
    assert main(command) == 1
    err = capsys.readouterr().err
    assert f"the PostgreSQL store at 127.0.0.1:{port}/taguru cannot be reached: Connection refused" in err, err
    assert "pw-never-shown" not in err and "bob" not in err and "OperationalError" not in err


# ----- the example settings file -----------------------------------------------------------------

EXAMPLE = ROOT / "examples" / "taguru.conf"


def test_the_example_config_is_accepted_as_it_ships() -> None:
    from taguru_server.server.config import load_configuration

    settings = load_configuration({}, str(EXAMPLE)).server()
    assert (settings.addr, settings.data_dir, settings.request_timeout_secs) == ("127.0.0.1:8248", "data", 30)


def test_every_name_the_example_mentions_is_a_setting_and_uncommented_they_load(tmp_path: Path) -> None:
    """The commented-out lines are real settings with values the server takes (the PostgreSQL URL and the
    tracing endpoint aside: they need a database and a collector)."""
    import re

    from taguru_server.cli.envcheck import known_names
    from taguru_server.server.config import load_configuration

    text = EXAMPLE.read_text(encoding="utf-8")
    named = set(re.findall(r"^#? ?((?:TAGURU|OTEL)_[A-Z_]+)=", text, flags=re.M))
    assert len(named) >= 25 and named <= known_names() | {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}
    skip = ("TAGURU_DATABASE_URL", "OTEL_")
    setting = re.compile(r"^# ((?:TAGURU|OTEL)_[A-Z_]+)=")
    opened = [line[2:] if setting.match(line) and not line[2:].startswith(skip) else line for line in text.splitlines()]
    full = tmp_path / "full.conf"
    full.write_text("\n".join(opened) + "\n", encoding="utf-8")
    configuration = load_configuration({}, str(full))
    settings = configuration.server()
    assert settings.addr == "127.0.0.1:8248" and configuration.values["TAGURU_EMBED_AUTO"] == "1"
