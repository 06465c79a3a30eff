"""A real `taguru serve` over a generated corpus: contexts are loaded before `/ready` says 200, the first
evidence request pays no load, and under TAGURU_LOG_FORMAT=json every stderr line is one JSON object.

The corpus is bench/generate.py's 10k-paragraph one (deterministic; about a second to load), so the
load is long enough to be seen from outside: `/live` answers while `/ready` is 503.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_support import backend
from process_support import PYTHON, ROOT, base_env, cli, free_port

pytestmark = pytest.mark.slow

ORIGIN = "海上栄"  # a brewer of the generated world; it must never appear in a log line
REQUEST_TIMEOUT_SECS = 30


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("preload")
    stream = tmp / "corpus.jsonl"
    subprocess.run(
        [PYTHON, str(ROOT / "bench" / "generate.py"), "--size", "10k", "--out", str(stream)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    data = tmp / "data"
    done = cli("import", str(stream), env=base_env(data))
    assert done.returncode == 0, done.stderr
    return data


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _evidence(url: str, request_id: str) -> tuple[int, float, dict[str, str]]:
    req = urllib.request.Request(
        url + "/contexts/bench/evidence",
        data=json.dumps({"origins": [ORIGIN]}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "X-Request-Id": request_id},
    )
    started = time.monotonic()
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_SECS) as resp:
        resp.read()
        return resp.status, time.monotonic() - started, dict(resp.headers)


class Serving:
    """`taguru serve` with stdout and stderr kept apart (stderr must be all JSON)."""

    def __init__(self, data: Path, tmp: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out, self.err = tmp / "stdout", tmp / "stderr"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "taguru_server.cli", "serve"],
                cwd=ROOT,
                stdout=out,
                stderr=err,
                env=base_env(data, TAGURU_ADDR=f"127.0.0.1:{self.port}", TAGURU_LOG_FORMAT="json", **env),
            )

    def wait_ready(self) -> list[tuple[int, bytes]]:
        """Poll `/ready` until it says 200; every answer seen, in order."""
        seen: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 120  # a readiness wait, not an assertion on time
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.err.read_text()
            try:
                status, body = _get(self.url + "/ready")
            except OSError:
                time.sleep(0.02)
                continue
            seen.append((status, body))
            if status == 200:
                return seen
            time.sleep(0.02)
        raise AssertionError("never ready")

    def events(self) -> list[dict[str, Any]]:
        lines = self.err.read_text().splitlines()
        parsed = [json.loads(line) for line in lines]  # every line one JSON object, or this fails
        assert all(isinstance(e, dict) for e in parsed)
        return parsed

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


@pytest.fixture
def serving() -> Iterator[list[Serving]]:
    started: list[Serving] = []
    yield started
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(timeout=30)


def _ready_lines_follow_the_load(events: list[dict[str, Any]]) -> None:
    """Per process: each `/ready` 200 comes after that process's `contexts.ready`, each 503 before it."""
    done: set[Any] = set()
    for e in events:
        pid = e.get("worker_pid")
        if e["event"] == "contexts.ready":
            done.add(pid)
        if e["event"] == "request.finished" and e["route"] == "/ready":
            assert (e["status"] == 200) == (pid in done), e


def test_ready_after_the_load_json_logs_and_one_line_per_request(
    corpus_dir: Path, tmp_path: Path, serving: list[Serving]
) -> None:
    server = Serving(corpus_dir, tmp_path)
    serving.append(server)
    seen = server.wait_ready()
    assert all(status == 503 for status, _ in seen[:-1])
    for _status, body in seen[:-1]:
        refusal = json.loads(body)
        assert refusal["code"] == "unhealthy" and refusal["error"].startswith("loading contexts into memory")
    assert json.loads(seen[-1][1])["status"] == "ready"

    status, metrics = _get(server.url + "/metrics")
    text = metrics.decode()
    assert status == 200
    assert "taguru_contexts_loaded 1.0" in text and "taguru_ready 1.0" in text
    assert "taguru_build_info{" in text and "process_resident_memory_bytes" in text
    assert "taguru_inflight_requests" in text

    status, elapsed, headers = _evidence(server.url, "first-evidence")
    assert status == 200 and elapsed < 5  # no load paid: well inside the 30 s request timeout
    assert headers["Server-Timing"].split(", ")[-1].startswith("total;dur=")
    _status, metrics = _get(server.url + "/metrics")
    assert 'taguru_evidence_stage_duration_seconds_bucket{le="1e-05",stage="resolve"}' in metrics.decode()
    server.stop()

    assert server.out.read_text().splitlines() == [f"listening on 127.0.0.1:{server.port}"]
    events = server.events()
    names = [e["event"] for e in events]
    for expected in ("server.starting", "server.listening", "contexts.loading", "context.loaded", "contexts.ready"):
        assert expected in names
    assert names[-2:] == ["server.stopping", "server.stopped"]
    loaded = next(e for e in events if e["event"] == "context.loaded")
    assert loaded["context"] == "bench" and loaded["duration_ms"] > 0
    if loaded["duration_ms"] > 500:  # a load that long is seen from outside: /ready said 503 meanwhile
        assert len(seen) > 1
    _ready_lines_follow_the_load(events)
    mine = [e for e in events if e.get("request_id") == "first-evidence"]
    assert [e["event"] for e in mine] == ["request.finished"]  # one INFO line per request, stages summarised
    assert set(mine[0]["stages_ms"]) >= {"resolve", "activate", "budget"} and mine[0]["status"] == 200
    assert ORIGIN not in server.err.read_text()


def _two_workers(
    corpus_dir: Path, tmp_path: Path, serving: list[Serving], start: str
) -> tuple[Serving, list[tuple[int, bytes]]]:
    """`--workers 2` in the given start mode, polled until one worker is ready; also every `/ready` answer."""
    server = Serving(corpus_dir, tmp_path, TAGURU_WORKERS="2", TAGURU_WORKER_START=start)
    serving.append(server)
    return server, server.wait_ready()


@pytest.mark.parametrize("start", ["fork", "exec"])
def test_two_workers_load_before_ready_and_follow_new_contexts(
    corpus_dir: Path, tmp_path: Path, serving: list[Serving], start: str
) -> None:
    server, seen = _two_workers(corpus_dir, tmp_path, serving, start)
    for status, body in seen[:-1]:  # from the supervisor while it loads (fork), or from a loading worker (exec)
        assert status == 503 and json.loads(body)["error"].startswith("loading contexts into memory"), body
    deadline = time.monotonic() + 120
    while len({e.get("worker_pid") for e in server.events() if e["event"] == "contexts.ready"}) < 2:
        assert time.monotonic() < deadline, "the workers never finished loading"
        time.sleep(0.05)
    for i in range(6):
        status, elapsed, _h = _evidence(server.url, f"ev-{i}")
        assert status == 200 and elapsed < 5

    # a context made through one worker is loaded by the other in the background (change-log poll)
    later_name = f"later-{start}"  # the corpus is shared by the module's tests
    req = urllib.request.Request(server.url + f"/contexts/{later_name}", data=b"{}", method="PUT")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 201)
    deadline = time.monotonic() + 20
    while not any(e["event"] == "context.loaded" and e["context"] == later_name for e in server.events()):
        assert time.monotonic() < deadline, "the other worker never loaded the new context"
        time.sleep(0.1)
    server.stop()

    assert server.out.read_text().splitlines() == [f"listening on 127.0.0.1:{server.port}"]
    events = server.events()
    _ready_lines_follow_the_load(events)
    if backend() == "sqlite":  # (PostgreSQL has no file check)
        # the supervisor checks the store at most once; the workers (and the fork loader) trust its check
        assert sum(e["event"] == "store.checking" for e in events) <= 1
        skipped = [e["reason"] for e in events if e["event"] == "store.check_skipped"]
        assert skipped.count("checked by the supervisor") == 2 + (start == "fork"), skipped
    later = [e for e in events if e["event"] == "context.loaded" and e["context"] == later_name]
    assert "request_id" not in later[0]  # loaded by the background follower, not inside a request
    bench = [e for e in events if e["event"] in ("context.loaded", "context.inherited") and e["context"] == "bench"]
    if start == "exec":  # each worker loads it
        assert [e["event"] for e in bench] == ["context.loaded"] * 2 and len({e["worker_pid"] for e in bench}) == 2
    else:  # the supervisor loads it once, before any worker exists; both workers inherit it
        assert bench[0]["event"] == "context.loaded" and "worker_pid" not in bench[0]
        assert [e["event"] for e in bench[1:]] == ["context.inherited"] * 2
        assert len({e["worker_pid"] for e in bench[1:]}) == 2
    assert "server.stopped" in [e["event"] for e in events]


def _post(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_SECS) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _answers(url: str) -> list[Any]:
    """Search and evidence bodies (the envelope's time left out) that a restart must not change."""
    out = []
    for query in (ORIGIN, "酒蔵 杜氏", "river brewery"):
        status, body = _post(url, "/contexts/bench/sources/search", {"query": query, "limit": 50})
        assert status == 200 and body.pop("time", None) is not None
        out.append(body)
    status, body = _post(url, "/contexts/bench/evidence", {"origins": [ORIGIN], "query": "酒蔵"})
    assert status == 200 and body.pop("time", None) is not None
    return [*out, body]


@pytest.mark.sqlite_only  # the store is copied as files; tests/test_index_files.py runs the same logic on both backends
def test_a_restart_reuses_the_persisted_index_and_never_trusts_a_damaged_one(
    corpus_dir: Path, tmp_path: Path, serving: list[Serving]
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus_dir, data, ignore=shutil.ignore_patterns("indexes", "LOCK"))

    def run(label: str) -> tuple[dict[str, Any], list[Any], Serving]:
        (tmp_path / label).mkdir()
        server = Serving(data, tmp_path / label)
        serving.append(server)
        server.wait_ready()
        answers = _answers(server.url)
        return next(e for e in server.events() if e["event"] == "context.loaded"), answers, server

    first, before, server = run("first")
    assert (first["index"], first["index_reason"]) == ("rebuilt", "missing")
    checks = [e["event"] for e in server.events() if e["event"].startswith("store.check")]
    assert checks == ["store.checking", "store.checked"]  # a copied database: its whole file is checked
    index_file = data / "indexes" / "ctx-1.bm25"
    assert index_file.exists()
    text = "酒蔵の川の水で仕込む。\n\n杜氏が麹を見る。"
    status, _ = _post(server.url, "/contexts/bench/sources", {"passages": {"added/one.md": text}})
    assert status == 200
    after_write = _answers(server.url)
    server.stop()

    second, answers, server = run("second")
    assert second["index"] == "partial" and second["index_tokenized_docs"] == 2
    checks = [e["event"] for e in server.events() if e["event"].startswith("store.check")]
    assert checks == ["store.check_skipped"]  # as the clean stop before left it (store/persist/seal.py)
    assert answers == after_write != before
    server.stop()

    third, answers, server = run("third")
    assert third["index"] == "reused" and third["index_tokenized_docs"] == 0
    assert answers == after_write
    server.stop()

    raw = bytearray(index_file.read_bytes())
    raw[-3] ^= 0x40  # inside the last array
    index_file.write_bytes(bytes(raw))
    fourth, answers, server = run("fourth")
    assert fourth["index"] == "rebuilt" and "checksum" in fourth["index_reason"]
    assert answers == after_write
    server.stop()
    assert ORIGIN not in "".join((tmp_path / d / "stderr").read_text() for d in ("first", "second", "third", "fourth"))


@pytest.mark.parametrize("start", ["fork", "exec"])
def test_workers_do_not_outlive_a_killed_supervisor(
    corpus_dir: Path, tmp_path: Path, serving: list[Serving], start: str
) -> None:
    import os

    server, _seen = _two_workers(corpus_dir, tmp_path, serving, start)
    deadline = time.monotonic() + 60
    while len(pids := {e["worker_pid"] for e in server.events() if e["event"] == "worker.ready"}) < 2:
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.05)
    server.proc.kill()  # SIGKILL: the supervisor cannot ask them to stop
    server.proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid) for pid in pids):
        assert time.monotonic() < deadline, "a worker outlived its supervisor"
        time.sleep(0.05)
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)  # not ours to reap; only its exit matters
        except ChildProcessError:
            pass


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "zombie"


@pytest.mark.sqlite_only  # the store is copied as files; tests/test_index_files.py runs the import on both backends
def test_the_first_start_after_an_offline_import_reuses_the_index_it_left(
    corpus_dir: Path, tmp_path: Path, serving: list[Serving]
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus_dir, data, ignore=shutil.ignore_patterns("LOCK"))  # as `taguru import` left it
    index_file = data / "indexes" / "ctx-1.bm25"
    assert index_file.exists()

    def run(label: str) -> tuple[dict[str, Any], list[Any]]:
        (tmp_path / label).mkdir()
        server = Serving(data, tmp_path / label)
        serving.append(server)
        server.wait_ready()
        answers = _answers(server.url)
        server.stop()
        return next(e for e in server.events() if e["event"] == "context.loaded"), answers

    first, after_import = run("after-import")
    assert (first["index"], first["index_tokenized_docs"]) == ("reused", 0) and "index_reason" not in first
    index_file.unlink()
    rebuilt, built_here = run("rebuilt")
    assert (rebuilt["index"], rebuilt["index_reason"]) == ("rebuilt", "missing")
    assert after_import == built_here
