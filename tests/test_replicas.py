"""Process level: replicas on one PostgreSQL database — identical answers, no stale reads, crash safety, HAProxy.

Every test starts real processes: a throwaway PostgreSQL cluster (initdb on a free port), three
`taguru serve` replicas pointed at one database (each with its own data dir), and for the last
test a real HAProxy with `deploy/haproxy.cfg`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_support import Cluster, require_tool
from process_support import ROOT, Server, base_env, cli, free_port

pytestmark = [pytest.mark.slow, pytest.mark.first_pass_only]

BENCH = ROOT / "bench"


@pytest.fixture
def database(cluster: Cluster) -> str:
    return cluster.fresh_url()


@pytest.fixture
def replicas(tmp_path: Path, database: str) -> Iterator[list[Server]]:
    started = [Server(tmp_path / f"r{i}", tmp_path / f"r{i}.log", TAGURU_DATABASE_URL=database) for i in range(3)]
    yield started
    for s in started:
        s.stop()


def post(url: str, path: str, body: Any, timeout: float = 30) -> tuple[int, Any]:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # the proxy's own 502/503 pages are not JSON
        raw = exc.read()
        try:
            return exc.code, json.loads(raw or b"null")
        except ValueError:
            return exc.code, None


def without_time(body: Any) -> Any:
    return {k: v for k, v in body.items() if k != "time"}


def test_three_replicas_answer_like_one_sqlite_server(tmp_path: Path, replicas: list[Server]) -> None:
    sys.path.insert(0, str(BENCH))
    from generate import CONTEXT, generate

    corpus = generate(20_000, seed=7)
    stream = tmp_path / "corpus.jsonl"
    stream.write_text(corpus.text, encoding="utf-8")
    started = time.perf_counter()
    done = cli("import", str(stream), "--url", replicas[0].url, env=base_env(tmp_path / "cli"))
    assert done.returncode == 0, done.stderr
    imported_s = time.perf_counter() - started
    sqlite = Server(tmp_path / "sqlite", tmp_path / "sqlite.log", TAGURU_DATABASE_URL="")
    try:
        assert cli("import", str(stream), "--url", sqlite.url, env=base_env(tmp_path / "cli")).returncode == 0
        names = corpus.world.breweries + corpus.world.toji + corpus.world.brands
        checked = 0
        for i in range(30):
            evidence = {"origins": [names[(7 * i) % len(names)], names[(11 * i + 3) % len(names)]]}
            search = {"query": corpus.sample_paragraphs[i % len(corpus.sample_paragraphs)][:12], "limit": 10}
            for path, body in (
                (f"/contexts/{CONTEXT}/evidence", evidence),
                (f"/contexts/{CONTEXT}/sources/search", search),
            ):
                status, expected = post(sqlite.url, path, body)
                assert status == 200, expected
                for replica in replicas:
                    got_status, got = post(replica.url, path, body)
                    assert got_status == 200 and without_time(got) == without_time(expected), (path, body)
                checked += 1
        assert checked == 60
    finally:
        sqlite.stop()
    print(f"\n20k paragraphs imported through one replica in {imported_s:.1f} s")


def test_a_write_acknowledged_by_one_replica_is_read_at_once_from_another(replicas: list[Server]) -> None:
    replicas[0].ok("PUT", "/contexts/k", {"description": "replicas"})
    stale = []
    for i in range(300):
        writer, reader = replicas[i % 3], replicas[(i + 1) % 3]
        writer.ok(
            "POST", "/contexts/k/associations", [{"subject": f"s{i}", "label": "r", "object": f"o{i}", "weight": 1}]
        )
        got = reader.ok("POST", "/contexts/k/query", {"subject": f"s{i}"})
        if [m["object"] for m in got["matches"]] != [f"o{i}"]:
            stale.append(i)
    assert stale == []


def _writers(
    targets: list[str], stop: threading.Event, acked: list[str], failed: list[float], n: int = 8
) -> list[threading.Thread]:
    def run(w: int) -> None:
        k = 0
        while not stop.is_set():
            k += 1
            name = f"w{w}-{k}"
            try:
                status, _body = post(
                    targets[k % len(targets)],
                    "/contexts/k/associations",
                    [{"subject": name, "label": "r", "object": "x", "weight": 1}],
                    timeout=10,
                )
            except Exception:  # a dead connection, or an answer that is not ours: not acknowledged
                failed.append(time.monotonic())
                continue
            if status == 200:
                acked.append(name)
            else:
                failed.append(time.monotonic())

    return [threading.Thread(target=run, args=(w,)) for w in range(n)]


def _all_visible(server: Server, names: list[str]) -> list[str]:
    return [n for n in names if not server.ok("POST", "/contexts/k/query", {"subject": n})["matches"]]


def test_sigkill_one_replica_while_writers_hit_the_others(
    tmp_path: Path, database: str, replicas: list[Server]
) -> None:
    replicas[0].ok("PUT", "/contexts/k", {"description": "replicas"})
    victim = replicas[2]
    acked: list[str] = []
    failed: list[float] = []
    stop = threading.Event()
    threads = _writers([replicas[0].url, replicas[1].url], stop, acked, failed)
    for t in threads:
        t.start()
    time.sleep(1.0)
    victim.kill()
    time.sleep(1.5)
    started = time.perf_counter()
    replicas[2] = Server(tmp_path / "r2", tmp_path / "r2-restarted.log", TAGURU_DATABASE_URL=database)
    restart_s = time.perf_counter() - started
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    assert len(acked) > 100 and failed == []
    for server in replicas:
        assert _all_visible(server, acked) == []
    print(f"\n{len(acked)} writes acknowledged; the killed replica answered again {restart_s:.2f} s after its restart")


def test_behind_haproxy_a_killed_replica_costs_at_most_one_percent(tmp_path: Path, replicas: list[Server]) -> None:
    require_tool("haproxy")
    port = free_port()
    config = (ROOT / "deploy" / "haproxy.cfg").read_text()
    config = config.replace("127.0.0.1:8248", f"127.0.0.1:{port}")
    for i, replica in enumerate(replicas, 1):
        config = config.replace(f"127.0.0.1:830{i}", f"127.0.0.1:{replica.port}")
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(config)
    proxy = subprocess.Popen(["haproxy", "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    front = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(front + "/ready", timeout=1):
                    break
            except OSError:
                time.sleep(0.05)
        req = urllib.request.Request(
            front + "/contexts/k",
            data=b'{"description": "ha"}',
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10):
            pass
        acked: list[str] = []
        failed: list[float] = []
        stop = threading.Event()
        threads = _writers([front], stop, acked, failed)
        reads = {"ok": 0, "failed": []}

        def reader() -> None:
            while not stop.is_set():
                try:
                    s, _ = post(front, "/contexts/k/query", {"label": "r", "limit": 1}, timeout=10)
                    if s == 200:
                        reads["ok"] += 1
                    else:
                        reads["failed"].append(time.monotonic())
                except Exception:
                    reads["failed"].append(time.monotonic())

        threads += [threading.Thread(target=reader) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(2.0)
        killed_at = time.monotonic()
        replicas[1].kill()
        time.sleep(8.0)
        stop.set()
        for t in threads:
            t.join()
        total = len(acked) + len(failed) + reads["ok"] + len(reads["failed"])
        failures = failed + reads["failed"]
        assert len(failures) <= 0.01 * total, (len(failures), total)
        assert [t for t in failures if t > killed_at + 5.0] == []
        for server in (replicas[0], replicas[2]):
            assert _all_visible(server, acked) == []
        print(f"\n{total} requests through HAProxy, {len(failures)} failed, all within 5 s of the kill")
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(10)


def test_an_sqlite_data_dir_moves_to_postgresql_exactly(tmp_path: Path, database: str) -> None:
    sys.path.insert(0, str(BENCH))
    from generate import CONTEXT, generate

    corpus = generate(3000, seed=9)
    stream = tmp_path / "corpus.jsonl"
    stream.write_text(corpus.text, encoding="utf-8")
    old = tmp_path / "old"
    sqlite_env = base_env(old, TAGURU_DATABASE_URL="")
    assert cli("import", str(stream), env=sqlite_env).returncode == 0
    sqlite = Server(old, tmp_path / "old.log", TAGURU_DATABASE_URL="")
    # a dead edge and a retracted source, which an export would not carry over
    edge = {"subject": "dead-a", "label": "r", "object": "dead-b", "weight": 1.0}
    sqlite.ok("POST", f"/contexts/{CONTEXT}/associations", [edge])
    sqlite.ok(
        "POST", f"/contexts/{CONTEXT}/associations/retract", {"subject": "dead-a", "label": "r", "object": "dead-b"}
    )
    sqlite.stop()
    moved = cli("migrate", "--from-sqlite", str(old), env=base_env(tmp_path / "pg", TAGURU_DATABASE_URL=database))
    assert moved.returncode == 0 and "copied from" in moved.stderr, moved.stderr
    again = cli("migrate", "--from-sqlite", str(old), env=base_env(tmp_path / "pg", TAGURU_DATABASE_URL=database))
    assert again.returncode == 1 and "already holds contexts" in again.stderr and "Traceback" not in again.stderr
    sqlite = Server(old, tmp_path / "old2.log", TAGURU_DATABASE_URL="")
    pg = Server(tmp_path / "pg", tmp_path / "pg.log", TAGURU_DATABASE_URL=database)
    try:
        names = corpus.world.breweries + corpus.world.toji
        calls = (
            [("GET", f"/contexts/{CONTEXT}", None)]
            + [("POST", f"/contexts/{CONTEXT}/evidence", {"origins": [names[i % len(names)]]}) for i in range(10)]
            + [("POST", f"/contexts/{CONTEXT}/query", {"subject": "dead-a"})]
        )
        for method, path, body in calls:
            a = sqlite.call(method, path, body)
            b = pg.call(method, path, body)
            assert a[0] == b[0] == 200 and without_time(a[1]) == without_time(b[1]), path
        with (
            urllib.request.urlopen(sqlite.url + f"/contexts/{CONTEXT}/export") as r1,
            urllib.request.urlopen(pg.url + f"/contexts/{CONTEXT}/export") as r2,
        ):
            assert r1.read() == r2.read()
    finally:
        sqlite.stop()
        pg.stop()
