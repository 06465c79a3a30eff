"""Process level: `taguru serve` with 2 workers over one store — no stale reads, a killed worker is replaced."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from process_support import Server, base_env, cli

pytestmark = pytest.mark.slow


def serving_pids(log: Path) -> set[int]:
    pids = set()
    for line in log.read_text(errors="replace").splitlines():
        if '"request.finished"' in line:
            m = re.search(r'"worker_pid": (\d+)', line)
            if m:
                pids.add(int(m.group(1)))
    return pids


def test_a_read_after_an_acknowledged_write_sees_it_on_any_worker(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_WORKERS="2")
    servers.append(server)
    server.ok("PUT", "/contexts/k", {"description": "workers"})
    stale = []
    for i in range(300):  # every call is a fresh connection (urllib does not keep them alive)
        if i % 2:
            server.ok(
                "POST", "/contexts/k/associations", [{"subject": f"s{i}", "label": "r", "object": f"o{i}", "weight": 1}]
            )
            got = server.ok("POST", "/contexts/k/query", {"subject": f"s{i}"})
            if [m["object"] for m in got["matches"]] != [f"o{i}"]:
                stale.append((i, got))
        else:
            server.ok("POST", "/contexts/k/sources", {"passages": {f"d{i}.md": f"marker{i}word appears here."}})
            got = server.ok("POST", "/contexts/k/sources/search", {"query": f"marker{i}word", "limit": 3})
            if f"d{i}.md" not in json.dumps(got):
                stale.append((i, got))
    assert stale == []
    assert len(serving_pids(server.log_path)) == 2  # both workers answered


def test_a_killed_worker_loses_no_acknowledged_write_and_is_replaced(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_WORKERS="2")
    servers.append(server)
    server.ok("PUT", "/contexts/k", {"description": "workers"})
    acked: list[str] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            name = f"w{w}-{n}"
            try:
                status, _body = server.call(
                    "POST", "/contexts/k/associations", [{"subject": name, "label": "r", "object": "x", "weight": 1}]
                )
            except OSError:
                continue  # the connection died with the worker: not acknowledged
            if status == 200:
                acked.append(name)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    victim = sorted(serving_pids(server.log_path))[0]
    os.kill(victim, signal.SIGKILL)
    time.sleep(2.0)
    stop.set()
    for t in threads:
        t.join()
    assert len(acked) > 50
    deadline = time.monotonic() + 20
    while len(serving_pids(server.log_path) - {victim}) < 2 and time.monotonic() < deadline:
        server.call("GET", "/contexts/k")  # until the replacement worker has answered something
    assert len(serving_pids(server.log_path) - {victim}) == 2, "the killed worker was not replaced"
    for _round in range(6):  # fresh connections land on both workers
        missing = [a for a in acked if not server.ok("POST", "/contexts/k/query", {"subject": a})["matches"]]
        assert missing == []
    server.stop()
    assert b"worker.exited" in server.log_path.read_bytes()


@pytest.mark.sqlite_only  # the data-dir lock guards the SQLite store only
def test_offline_import_is_refused_while_workers_serve(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_WORKERS="2")
    servers.append(server)
    stream = tmp_path / "in.jsonl"
    stream.write_text('{"taguru_batch": 1, "context": "c", "source": "s", "create": {}}\n')
    done = cli("import", str(stream), env=base_env(tmp_path / "data"))
    assert done.returncode != 0 and "in use by another process" in done.stderr


def test_sigterm_drains_in_flight_requests(tmp_path: Path, servers: list[Server]) -> None:
    import sys
    import urllib.request

    from process_support import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    from generate import generate

    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_WORKERS="2", TAGURU_MAX_BODY_BYTES="67108864")
    servers.append(server)
    body = generate(20000, seed=3).text.encode()
    answer: dict[str, object] = {}

    def send() -> None:
        req = urllib.request.Request(server.url + "/import", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer["status"] = resp.status
            answer["batches"] = len(json.loads(resp.read())["result"]["batches"])
        answer["done"] = time.monotonic()

    t = threading.Thread(target=send)
    t.start()
    time.sleep(0.5)  # the import is in flight
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert answer.get("status") == 200 and answer["batches"] > 0
    assert answer["done"] > signalled  # it was still running when the signal came, and was answered
    assert server.proc.wait(60) == 0


def test_compaction_and_rename_are_seen_by_every_worker(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_WORKERS="2")
    servers.append(server)
    server.ok("PUT", "/contexts/k", {"description": "workers"})
    rows = [
        {"subject": "a", "label": "r", "object": f"o{i}", "weight": 1.0, "source": f"s{i % 2}.md"} for i in range(6)
    ]
    server.ok("POST", "/contexts/k/associations", rows)
    server.ok("POST", "/contexts/k/sources/retract", {"source": "s0.md"})
    for _ in range(10):  # both workers have the context loaded, dead edges and all
        assert server.ok("GET", "/contexts/k")["stats"]["dead_edges"] == 3
    outcome = server.ok("POST", "/contexts/k/compact")
    assert outcome["dead_edges"] == 3
    for _ in range(20):  # every call is a fresh connection, so both workers answer
        stats = server.ok("GET", "/contexts/k")["stats"]
        assert (stats["dead_edges"], stats["associations"], stats["concepts"]) == (0, 3, 4)
        objects = [m["object"] for m in server.ok("POST", "/contexts/k/query", {"subject": "a"})["matches"]]
        assert objects == ["o1", "o3", "o5"]
    server.ok("POST", "/contexts/k/rename", {"to": "k2"})
    for _ in range(20):
        assert server.call("GET", "/contexts/k")[0] == 404
        assert server.ok("GET", "/contexts/k2")["stats"]["associations"] == 3
    assert len(serving_pids(server.log_path)) == 2
