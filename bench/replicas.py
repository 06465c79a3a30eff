"""PostgreSQL replicas beside the SQLite store, in one run: import rate, evidence latency, cold start, lag.

    .venv/bin/python bench/replicas.py                         # 20k paragraphs, 100k for the cold start
    .venv/bin/python bench/replicas.py --size 20000 --cold-size 100000 --duration 8

A throwaway PostgreSQL cluster is started (initdb on a free port, default durability settings).
1. Import rate: the same generated stream imported offline (`taguru import`) into SQLite and into
   PostgreSQL.
2. Evidence latency: one SQLite server, then three replicas on the PostgreSQL store; `wrk` sends
   the same rotating evidence requests to each (4 connections each, one server at a time).
3. Cold start at --cold-size paragraphs: process start → `/ready` → the first evidence answer
   (which loads the context), SQLite and PostgreSQL.
4. Write → visible elsewhere: a write acknowledged by replica A, polled on replica B; with the
   default (strong) reads the first poll sees it by construction, so the lag is measured with
   TAGURU_READ_CONSISTENCY=eventual, where only LISTEN/NOTIFY brings it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from generate import CONTEXT, generate  # noqa: E402
from pg_support import Cluster  # noqa: E402
from workers import PYTHON, bodies, env_for, free_port, lua_script, run_wrk  # noqa: E402


def import_offline(data: Path, stream: Path, url: str | None) -> float:
    extra = {"TAGURU_DATABASE_URL": url} if url else {}
    started = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-m", "taguru_server.cli", "import", str(stream)],
        env=env_for(data, **extra),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"import failed: {done.stderr[-400:]}")
    return time.perf_counter() - started


class Node:
    """One `taguru serve` (SQLite in its data dir, or a replica of the PostgreSQL store)."""

    def __init__(self, data: Path, url: str | None, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        extra = {"TAGURU_DATABASE_URL": url} if url else {}
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "taguru_server.cli", "serve"],
            env=env_for(data, TAGURU_ADDR=f"127.0.0.1:{self.port}", **extra, **env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.ready_s = self._until("/ready")

    def _until(self, path: str) -> float:
        for _ in range(6000):
            try:
                with urllib.request.urlopen(self.url + path, timeout=2):
                    return time.perf_counter() - self.started
            except OSError:
                time.sleep(0.02)
        raise SystemExit("a server never became ready")

    def post(self, path: str, body: object) -> dict:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.loads(resp.read())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def latency(nodes: list[tuple[str, Node]], script: Path, duration: int) -> None:
    print("\n| server | req/s | p50 ms | p99 ms | non-2xx |")
    print("|---|---:|---:|---:|---:|")
    for label, node in nodes:
        r = run_wrk(node.url, script, 4, duration)
        print(f"| {label} | {r['rps']:.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['non2xx']:.0f} |")


def cold_start(tmp: Path, cluster: Cluster, size: int, request_bodies: list[str]) -> None:
    corpus = generate(size, seed=7)
    stream = tmp / f"cold-{size}.jsonl"
    stream.write_text(corpus.text, encoding="utf-8")
    url = cluster.fresh_url()
    sqlite_s = import_offline(tmp / "cold-sqlite", stream, None)
    pg_s = import_offline(tmp / "cold-pg", stream, url)
    print(f"\nimport of {corpus.paragraphs} paragraphs: SQLite {sqlite_s:.1f} s, PostgreSQL {pg_s:.1f} s")
    body = json.loads(bodies(corpus.world, 1)[0])
    print("| store | process start → /ready s | → first evidence s |")
    print("|---|---:|---:|")
    for label, data, db in (("SQLite", tmp / "cold-sqlite", None), ("PostgreSQL replica", tmp / "cold-pg", url)):
        node = Node(data, db)
        try:
            node.post(f"/contexts/{CONTEXT}/evidence", body)
            first = time.perf_counter() - node.started
            print(f"| {label} | {node.ready_s:.2f} | {first:.2f} |")
        finally:
            node.close()


def lag(tmp: Path, url: str, rounds: int = 200) -> None:
    a = Node(tmp / "lag-a", url, TAGURU_READ_CONSISTENCY="eventual")
    b = Node(tmp / "lag-b", url, TAGURU_READ_CONSISTENCY="eventual")
    try:
        a.post(f"/contexts/{CONTEXT}/query", {"subject": "warm"})
        req = urllib.request.Request(
            a.url + "/contexts/lag", data=b"{}", method="PUT", headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req).read()
        lags = []
        for i in range(rounds):
            a.post("/contexts/lag/associations", [{"subject": f"s{i}", "label": "r", "object": "o", "weight": 1}])
            acked = time.perf_counter()
            while not b.post("/contexts/lag/query", {"subject": f"s{i}"})["result"]["matches"]:
                pass
            lags.append((time.perf_counter() - acked) * 1000)
        lags.sort()
        print(
            f"\nwrite on replica A → visible on replica B (eventual reads, LISTEN/NOTIFY): "
            f"p50 {statistics.median(lags):.2f} ms, p99 {lags[int(0.99 * len(lags))]:.2f} ms, max {lags[-1]:.2f} ms "
            f"over {rounds} writes (strong reads, the default: visible at the first read)"
        )
    finally:
        a.close()
        b.close()


def check_cost(url: str, n: int = 5000) -> None:
    """The per-read consistency check when nothing changed, in-process: PostgreSQL against SQLite workers."""
    sys.path.insert(0, str(ROOT))
    from taguru_server.store.persist.postgres import PostgresPersistence
    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence

    for label, store in (("PostgreSQL", PostgresPersistence(url)), ("SQLite", SqlitePersistence(tempfile.mkdtemp()))):
        registry = Registry(store, shared=True)
        started = time.perf_counter()
        for _ in range(n):
            registry.catch_up()
        print(
            f"per-read consistency check, nothing changed ({label}): {(time.perf_counter() - started) / n * 1e6:.1f} µs"
        )
        registry.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=20000)
    parser.add_argument("--cold-size", type=int, default=100000)
    parser.add_argument("--duration", type=int, default=8)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    tmp = Path(tempfile.mkdtemp(prefix="taguru-replicas-"))
    cluster = Cluster(fast=False)
    try:
        corpus = generate(args.size, seed=7)
        stream = tmp / "corpus.jsonl"
        stream.write_text(corpus.text, encoding="utf-8")
        url = cluster.fresh_url()
        sqlite_s = import_offline(tmp / "sqlite", stream, None)
        pg_s = import_offline(tmp / "pg0", stream, url)
        n = corpus.paragraphs
        print(
            f"import of {n} paragraphs ({len(corpus.text) / 1e6:.1f} MB): SQLite {sqlite_s:.1f} s "
            f"({n / sqlite_s:,.0f} paragraphs/s), PostgreSQL {pg_s:.1f} s ({n / pg_s:,.0f} paragraphs/s)"
        )
        script = tmp / "evidence.lua"
        request_bodies = bodies(corpus.world)
        lua_script(script, request_bodies)
        nodes = [("SQLite", Node(tmp / "sqlite", None))] + [
            (f"PostgreSQL replica {i + 1}", Node(tmp / f"pg{i}", url)) for i in range(3)
        ]
        try:
            for _label, node in nodes:
                for body in request_bodies[:8]:
                    node.post(f"/contexts/{CONTEXT}/evidence", json.loads(body))  # load the context
            latency(nodes, script, args.duration)
        finally:
            for _label, node in nodes:
                node.close()
        check_cost(url)
        lag(tmp, url)
        cold_start(tmp, cluster, args.cold_size, request_bodies)
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
