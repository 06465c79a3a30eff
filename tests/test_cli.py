"""The `taguru` command as a person meets it: --version, `evidence`, help, progress, and user errors.

Every user error is one clear line on stderr and a non-zero exit, never a traceback. The
process-level tests (slow) start real commands; the rest drive the pieces in process.
"""

from __future__ import annotations

import io
import json
import os
import pty
import select
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_support import PYTHON, ROOT, Server, base_env, cli, free_port

from taguru_server.cli.demo import demo_stream_path
from taguru_server.cli.demo.run import inspector_url
from taguru_server.cli.envcheck import known_names, unknown
from taguru_server.cli.evidence import render, server_timings
from taguru_server.cli.main import build_parser, main
from taguru_server.client.progress import Progress
from taguru_server.server.version import VERSION

# ----- in process --------------------------------------------------------------------------


def test_version_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"taguru {VERSION}"


def test_every_flag_of_every_command_has_help() -> None:
    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        if name == "evaluate":  # its own hand-written usage text
            continue
        for action in parser._actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                assert action.help, f"taguru {name} {action.option_strings[0]} has no help text"


def test_import_help_names_the_file_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "--help"]) == 0
    text = capsys.readouterr().out
    assert "JSONL" in text and "TAGURU_DATA_DIR" in text and "TAGURU_API_TOKEN" in text


def test_an_unknown_variable_gets_the_closest_known_name() -> None:
    assert {"TAGURU_ADDR", "TAGURU_DATA_DIR", "TAGURU_URL", "TAGURU_EMBED_URL"} <= known_names()
    found = dict(unknown(["TAGURU_ADR", "TAGURU_DATA_DIR", "TAGURU_XYZZY_PLUGH", "TAGURU_TEST_BACKEND", "HOME"]))
    assert found == {"TAGURU_ADR": "TAGURU_ADDR", "TAGURU_XYZZY_PLUGH": None}


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_rate_and_eta_on_a_terminal_only() -> None:
    quiet = io.StringIO()
    bar = Progress("taguru import", 4, quiet, unit="batches")
    bar.update(2)
    bar.close()
    assert quiet.getvalue() == ""
    now = [0.0]
    tty = _Tty()
    bar = Progress("taguru import", 4, tty, unit="batches", clock=lambda: now[0])
    now[0] = 2.0
    bar.update(2)
    assert "2/4" in tty.getvalue() and "1.0 batches/s" in tty.getvalue() and "ETA 0:02" in tty.getvalue()
    bar.close()
    assert tty.getvalue().endswith("\r\x1b[2K")


def test_the_table_shows_items_sources_budget_and_stage_times() -> None:
    package = {
        "items": [
            {
                "kind": "passage",
                "fused_rank": 1,
                "lane_ranks": [{"lane": "passage_fused", "rank": 1}],
                "bytes": 300,
                "estimated_tokens": 80,
                "passage": {"source": "docs/a.md", "paragraph": 2, "text": "x " * 200, "lanes": {"bm25": {"rank": 1}}},
            }
        ],
        "budget": {"items_used": 1, "bytes_used": 300, "tokens_used": 80, "limits": {"max_items": 5}},
        "omitted_total": 3,
        "omitted_by_reason": {"budget_exceeded": 3},
        "plan": {"stages": [{"stage": "passages", "status": "ran"}, {"stage": "rerank", "status": "skipped"}]},
    }
    out = io.StringIO()
    render(package, "passages;dur=0.250, rerank;dur=0.010", out)
    text = out.getvalue()
    assert "docs/a.md ¶2" in text and "passage_fused:1" in text
    assert "omitted: 3 (budget_exceeded 3)" in text and "1/5 items" in text
    assert "passages 0.25ms" in text and "rerank skipped 0.01ms" in text
    assert server_timings("a;dur=1.5, b;desc=x, c;dur=oops") == [("a", 1.5)]


def test_the_inspector_url_keeps_the_question_readable() -> None:
    body = {"origins": ["青嶺酒造", "a&b"], "labels": ["杜氏"], "budget": {"max_items": 6}}
    url = inspector_url("http://127.0.0.1:8248", "demo", body)
    assert url == "http://127.0.0.1:8248/ui?context=demo&origins=青嶺酒造,a%26b&labels=杜氏&max_items=6"


# ----- as processes ------------------------------------------------------------------------


def _one_clear_line(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode != 0, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    server = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        yield server
    finally:
        server.stop()


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the command with stderr (and stdout) on a pseudo-terminal; (status, what it drew)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [PYTHON, "-m", "taguru_server.cli", *args], cwd=ROOT, env=env, stdout=follower, stderr=follower
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
def test_evidence_against_a_real_server(served: Server, tmp_path: Path) -> None:
    env = base_env(tmp_path / "elsewhere")
    quiet = cli("import", "--url", served.url, str(demo_stream_path()), env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert "batches/s" not in quiet.stderr  # no bar off a terminal
    code, drawn = _on_a_terminal(["import", "--dry-run", "--url", served.url, str(demo_stream_path())], env)
    assert code == 0 and "batches/s" in drawn and "9/9" in drawn, drawn

    shown = cli("evidence", "--url", served.url, "demo", "青嶺酒造", "--labels", "杜氏", "--max-items", "3", env=env)
    assert shown.returncode == 0, shown.stderr
    first = served.ok("POST", "/contexts/demo/evidence", {"origins": ["青嶺酒造"], "labels": ["杜氏"]})["items"][0]
    source = (first.get("citation_refs") or [first.get("passage")])[0]["source"]
    assert source in shown.stdout and "budget: 3/3 items" in shown.stdout and "stages:" in shown.stdout

    raw = cli("evidence", "demo", "青嶺酒造", "--json", env=dict(env, TAGURU_URL=served.url))
    assert raw.returncode == 0 and json.loads(raw.stdout)["items"], raw.stderr
    _one_clear_line(cli("evidence", "--url", served.url, "nope", "x", env=env), "context 'nope' not found")


@pytest.mark.slow
def test_serve_on_a_busy_port_says_so_in_a_few_lines(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        env = base_env(tmp_path / "data", TAGURU_ADDR=f"127.0.0.1:{holder.getsockname()[1]}")
        for extra in ([], ["--workers", "2"]):
            proc = cli("serve", *extra, env=env)
            assert proc.returncode != 0, proc
            assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 3, proc.stderr
            assert "cannot listen on 127.0.0.1:" in proc.stderr and "already in use" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_user_errors_are_one_line_each(tmp_path: Path) -> None:
    env = base_env(tmp_path / "data")
    version = cli("--version", env=env)
    assert version.returncode == 0 and version.stdout.strip() == f"taguru {VERSION}", version
    corpus = str(demo_stream_path())
    _one_clear_line(cli("import", "--url", "notaurl", corpus, env=env), "could not be parsed as a URL")
    secret = cli("import", "--url", "http://user:hunter2@host:1", corpus, env=env)
    _one_clear_line(secret, "the URL must not carry credentials")
    assert "hunter2" not in secret.stderr  # a refused URL is echoed only when it carries no credentials
    warned = cli("import", "--dry-run", "--url", "notaurl", corpus, env=dict(env, TAGURU_DATA_DIRR="x"))
    assert "TAGURU_DATA_DIRR is not a taguru setting" in warned.stderr, warned.stderr
    assert "did you mean TAGURU_DATA_DIR?" in warned.stderr and "Traceback" not in warned.stderr


REFUSED_CONFIGS = (
    ({"TAGURU_LOG_LEVEL": "loud"}, [], "configuration refused: TAGURU_LOG_LEVEL must be one of"),
    ({"TAGURU_ADDR": "notanaddr"}, [], "TAGURU_ADDR must be HOST:PORT (for example 127.0.0.1:8248), got 'notanaddr'"),
    ({}, ["--config", "missing.env"], "cannot read the config file "),
    (
        {"TAGURU_CONTEXT_QUOTAS": '{"sake": {}}'},
        [],
        "refusing to start with a broken quota declaration: TAGURU_CONTEXT_QUOTAS declares no ceiling for 'sake'",
    ),
)


def _refused_serves(tmp_path: Path, log_format: str | None) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    env = base_env(tmp_path / "data", **({"TAGURU_LOG_FORMAT": log_format} if log_format else {}))
    runs = []
    for extra_env, flags, text in REFUSED_CONFIGS:
        flags = [str(tmp_path / f) if f.endswith(".env") else f for f in flags]
        proc = cli("serve", *flags, env=dict(env, **extra_env))
        assert proc.returncode == 2 and proc.stdout == "", proc
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        runs.append((text, proc))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["json", None])  # None: the default off a terminal
def test_a_refused_configuration_is_one_json_event_under_json(tmp_path: Path, log_format: str | None) -> None:
    for text, proc in _refused_serves(tmp_path, log_format):
        event = json.loads(proc.stderr)
        assert event["event"] == "config.refused" and event["level"] == "error", event
        assert event["error"].startswith(text), event
    # the did-you-mean warning of a misspelled name is a JSON event too
    env = base_env(tmp_path / "data", TAGURU_ADDR="notanaddr", TAGURU_ADR="127.0.0.1:1")
    proc = cli("serve", env=dict(env, **({"TAGURU_LOG_FORMAT": log_format} if log_format else {})))
    warned, refused = [json.loads(line) for line in proc.stderr.splitlines()]
    assert warned["event"] == "config.unknown_variable" and warned["level"] == "warning", warned
    assert warned["name"] == "TAGURU_ADR" and warned["did_you_mean"] == "TAGURU_ADDR", warned
    assert "TAGURU_ADR is not a taguru setting" in warned["message"] and refused["event"] == "config.refused"


@pytest.mark.slow
def test_a_refused_configuration_is_one_plain_line_under_console(tmp_path: Path) -> None:
    for text, proc in _refused_serves(tmp_path, "console"):
        assert proc.stderr.startswith(f"taguru: {text}"), proc.stderr
    env = base_env(tmp_path / "data", TAGURU_LOG_FORMAT="console", TAGURU_ADDR="notanaddr", TAGURU_ADR="x")
    warned, refused = cli("serve", env=env).stderr.splitlines()
    assert warned == "taguru: warning: TAGURU_ADR is not a taguru setting and is ignored (did you mean TAGURU_ADDR?)"
    assert refused.startswith("taguru: TAGURU_ADDR must be HOST:PORT")


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_130(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        cmd = [PYTHON, "-m", "taguru_server.cli", "evidence", "--url", url, "demo", "x"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=base_env(tmp_path), stderr=subprocess.PIPE, text=True)
        silent.settimeout(60)
        conn, _ = silent.accept()  # the request is in flight
        with conn:
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err == "taguru: interrupted\n", err


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    env = base_env(tmp_path / "data")
    assert cli("import", str(demo_stream_path()), env=env).returncode == 0
    for args in (["export", "demo"], ["import", "--json", "--dry-run", str(demo_stream_path())]):
        reader, writer = os.pipe()
        os.close(reader)  # `| head` that has already stopped reading
        try:
            proc = subprocess.run(
                [PYTHON, "-m", "taguru_server.cli", *args],
                cwd=ROOT,
                env=env,
                stdout=writer,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        finally:
            os.close(writer)
        assert proc.returncode == 141 and proc.stderr == "", (args, proc.stderr)


def _demo(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    env = base_env(tmp_path / "unused", TAGURU_EMBED_URL="")  # no local model: quick to start
    cmd = [PYTHON, "-m", "taguru_server.cli", "demo", "--data-dir", str(tmp_path / "demo"), "--addr"]
    return subprocess.Popen(
        [*cmd, f"127.0.0.1:{port}", *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_the_demo_refuses_a_busy_port(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        started = time.monotonic()
        proc = _demo(tmp_path, holder.getsockname()[1], "--exit")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "already in use by another program" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and out == ""
    assert time.monotonic() - started < 8  # refused at once, not after polling someone else's server


def _port_closed(port: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                pass
        except OSError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_demo_takes_its_server_with_it(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    proc = _demo(tmp_path, port)
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        if "Ctrl-C stops it" in line:
            break
    else:
        raise AssertionError(f"the demo ended early: {proc.wait()}")
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass  # its server is up
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert _port_closed(port), "the demo's server outlived it"
    summary = proc.stdout.read()
    assert f"Inspect it: http://127.0.0.1:{port}/ui?context=demo&origins=青嶺酒造&labels=杜氏" in summary, summary
    assert "docs/aomine.md ¶2" in summary and "budget: 6/6 items" in summary, summary


def test_communities_steps_become_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    from taguru_server.cli import communities

    tty = _Tty()
    monkeypatch.setattr(communities.sys, "stderr", tty)
    show = communities._tty_progress("demo")
    show("reading the analysis")
    show("summarizing 1/4")
    show("summarizing 4/4")
    show("importing 2/2 batches")
    drawn = tty.getvalue()
    assert "demo: reading the analysis" in drawn
    assert "summarizing [" in drawn and "4/4" in drawn and "communities/s" in drawn
    assert "importing [" in drawn and "batches/s" in drawn


def test_progress_without_a_total_counts_and_times() -> None:
    now = [0.0]
    tty = _Tty()
    bar = Progress("taguru import: embedding", 0, tty, unit="texts", clock=lambda: now[0])
    now[0] = 4.0
    bar.update(advance=10)
    assert "embedding 10 texts 2.5 texts/s in 0:04" in tty.getvalue()
