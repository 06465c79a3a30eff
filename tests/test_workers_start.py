"""Process level: `taguru serve --workers 2` and `TAGURU_WORKERS=2` start alike over an imported store.

The supervisor loads the contexts once and forks the workers; each worker inherits them at the
change-log position the supervisor read at and applies only what came after, so it is ready
almost at once. Both ways of asking for two workers must take that path and log the same position.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pg_support import database_url_for
from process_support import ROOT, Server, base_env, cli

pytestmark = pytest.mark.slow

FILES = 3  # the corpus is imported as three streams: three commits, so the store's position is 3 or more
READY_WITHIN_SECS = 2.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A data dir holding a generated corpus imported by `taguru import`, and its change-log position."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    from generate import generate

    tmp = tmp_path_factory.mktemp("workers-start")
    lines = generate(3000, seed=5).text.splitlines(keepends=True)
    headers = [i for i, line in enumerate(lines) if line.startswith('{"taguru_batch"')]
    cuts = [0, *(headers[len(headers) * k // FILES] for k in range(1, FILES)), len(lines)]
    streams = tmp / "streams"
    streams.mkdir()
    for k in range(FILES):
        (streams / f"part{k}.jsonl").write_text("".join(lines[cuts[k] : cuts[k + 1]]), encoding="utf-8")
    data = tmp / "data"
    done = cli("import", str(streams), env=base_env(data))
    assert done.returncode == 0, done.stderr
    return data, _position(data)


def _position(data: Path) -> int:
    from taguru_server.store.persist.backend import open_store

    persistence = open_store(str(data), database_url_for(data))
    try:
        return persistence.latest_change()
    finally:
        persistence.close()


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]


def _at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"]).timestamp()


def _start(data: Path, log: Path, args: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    """Serve with two workers until both are ready; what the supervisor and each worker logged."""
    server = Server(data, log, args, TAGURU_LOG_FORMAT="json", **env)
    try:
        deadline = time.monotonic() + 120
        while True:  # a readiness wait; the timing asserted is taken from the log lines' own timestamps
            events = _events(log)
            ready = {e["worker_pid"] for e in events if e["event"] == "contexts.ready" and "worker_pid" in e}
            listening = {e["worker_pid"] for e in events if e["event"] == "worker.ready"}
            if len(ready & listening) == 2:
                break
            assert time.monotonic() < deadline, "the workers never became ready"
            time.sleep(0.05)
        with urllib.request.urlopen(server.url + "/ready", timeout=10) as resp:
            assert resp.status == 200
    finally:
        server.stop()
    events = _events(log)
    supervisor = [e for e in events if "worker_pid" not in e]
    loaded = next(e for e in supervisor if e["event"] == "contexts.ready")
    workers: dict[int, dict[str, Any]] = {}
    for e in events:
        pid = e.get("worker_pid")
        if pid is None:
            continue
        mine = workers.setdefault(pid, {"inherited": [], "ready_at": 0.0})
        if e["event"] == "context.inherited":
            mine["inherited"].append(e)
        elif e["event"] in ("contexts.ready", "worker.ready"):  # ready once listening and done loading
            mine["ready_at"] = max(mine["ready_at"], _at(e))
    assert len(workers) == 2, workers.keys()
    return {"supervisor_ready_at": _at(loaded), "supervisor_contexts": loaded["contexts"], "workers": workers}


def _check(started: dict[str, Any], position: int) -> list[int]:
    """Every worker inherited every context at the supervisor's position and was ready within the bound."""
    positions = []
    for pid, worker in started["workers"].items():
        inherited = worker["inherited"]
        assert len(inherited) == started["supervisor_contexts"] == 1, (pid, inherited)
        positions += [e["from_change"] for e in inherited]
        late = worker["ready_at"] - started["supervisor_ready_at"]
        assert late < READY_WITHIN_SECS, f"worker {pid} was ready {late:.2f} s after the supervisor"
    assert positions == [position] * 2, positions
    return positions


def test_the_workers_flag_inherits_at_the_supervisors_position(store: tuple[Path, int], tmp_path: Path) -> None:
    data, position = store
    assert position >= FILES
    flag = _check(_start(data, tmp_path / "flag.log", ("--workers", "2")), position)
    env = _check(_start(data, tmp_path / "env.log", TAGURU_WORKERS="2"), position)
    assert flag == env
