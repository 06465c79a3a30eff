"""Worker processes: evidence throughput with 1 and 2 workers side by side, and what the shared store costs.

    .venv/bin/python bench/workers.py                     # 20k paragraphs, wrk at 16 and 200 connections
    .venv/bin/python bench/workers.py --duration 20 --size 20000 --rss-size 100000

1. Throughput: the same generated corpus is imported once; `taguru serve --workers N` is started
   for N = 1 and N = 2 in turn and `wrk` (Debian package) sends evidence requests with rotating
   origins (a Lua script cycles through 64 bodies). Prints req/s, p50/p99, non-2xx and the
   requests per CPU-second the server's processes spent (supervisor and workers, from
   /proc/<pid>/stat) per run, and the 2-worker/1-worker ratio. With --beside-load, every run is
   repeated while one busy process (a Python loop) competes for the machine's CPUs.
2. The consistency check a worker makes before each read when nothing changed (µs), against
   no check at all.
3. A worker applying a large import made by another worker (the change log, record by record),
   against loading the whole context again.
4. With --rss-size: the resident memory of each of 2 workers serving that many paragraphs.
5. With --open-loop F: one worker's capacity is taken from a closed-loop wrk run at 16 connections,
   then requests arrive at F times that rate (a Poisson schedule from a fixed seed, the same
   schedule for 1 and 2 workers) whether or not earlier ones have been answered; latency counts
   from each request's scheduled arrival, so a queue shows in it (wrk waits for an answer before
   sending the next request on a connection and hides the queue). Prints p50/p99 per worker count
   and their ratio, quiet and, with --beside-load, beside a busy process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from generate import CONTEXT, generate  # noqa: E402

PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    env.update({"TAGURU_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}, **extra)
    return env


def import_corpus(data: Path, text: str) -> float:
    stream = data.parent / f"corpus-{data.name}.jsonl"
    stream.write_text(text, encoding="utf-8")
    started = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "-m", "taguru_server.cli", "import", str(stream)],
        env=env_for(data),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"import failed: {done.stderr[-500:]}")
    return time.perf_counter() - started


class Served:
    """`taguru serve --workers N` on a free port until closed."""

    def __init__(self, data: Path, workers: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(data.parent / f"serve-{workers}.log", "ab")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "taguru_server.cli", "serve", "--workers", str(workers)],
            env=env_for(data, TAGURU_ADDR=f"127.0.0.1:{self.port}", TAGURU_MAX_CONCURRENT_REQUESTS="0"),
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        for _ in range(2400):  # until /ready says 200 (the supervisor loads before the workers answer)
            try:
                with urllib.request.urlopen(self.url + "/ready", timeout=2):
                    return
            except OSError:  # not listening yet, or 503 while loading
                time.sleep(0.05)
        raise SystemExit("the server never became ready")

    def cpu_seconds(self) -> float:
        """User and system CPU time of the server's processes so far (the supervisor and its workers)."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in {self.proc.pid, *self.pids()}:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        return total / ticks

    def pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        return [int(p) for p in out] or [self.proc.pid]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


def bodies(world: object, n: int = 64) -> list[str]:
    rng = random.Random(11)
    names = list(world.breweries) + list(world.toji) + list(world.brands)  # type: ignore[attr-defined]
    return [
        json.dumps({"origins": rng.sample(names, 2), "budget": {"max_items": 10}}, ensure_ascii=False) for _ in range(n)
    ]


def lua_script(path: Path, request_bodies: list[str]) -> None:
    lines = ", ".join("[==[" + b + "]==]" for b in request_bodies)
    path.write_text(
        f"""
local bodies = {{{lines}}}
local i = 0
request = function()
  i = i + 1
  return wrk.format("POST", "/contexts/{CONTEXT}/evidence", {{["Content-Type"] = "application/json"}},
                    bodies[(i % #bodies) + 1])
end
""",
        encoding="utf-8",
    )


def warm(url: str, request_bodies: list[str], rounds: int = 200) -> None:
    """Enough fresh connections that every worker has loaded the context."""
    for i in range(rounds):
        req = urllib.request.Request(
            url + f"/contexts/{CONTEXT}/evidence",
            data=request_bodies[i % len(request_bodies)].encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()


def run_wrk(url: str, script: Path, connections: int, duration: int) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
    ).stdout

    def ms(label: str) -> float:
        m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            return float("nan")
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "p50": ms("50"),
        "p99": ms("99"),
        "non2xx": float(non2xx.group(1)) if non2xx else 0.0,
        "socket_errors": 1.0 if errors else 0.0,
    }


def _burn(_: int) -> float:
    started = time.perf_counter()
    x = 0
    for i in range(15_000_000):
        x += i
    return time.perf_counter() - started


def machine_parallelism() -> float:
    """What the machine gives two CPU-bound processes at once, relative to one (the ceiling for 2 workers)."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as pool:
        one = min(pool.submit(_burn, 0).result() for _ in range(2))
        started = time.perf_counter()
        list(pool.map(_burn, range(2)))
        both = time.perf_counter() - started
    return 2 * one / both


def machine_loads(beside_load: bool) -> Iterator[str]:
    """ "quiet", then (with `beside_load`) "beside a CPU load" while one busy process runs."""
    yield "quiet"
    if not beside_load:
        return
    burner = subprocess.Popen([PYTHON, "-c", "x = 0\nwhile True:\n    x += 1\n"])
    try:
        yield "beside a CPU load"
    finally:
        burner.kill()
        burner.wait()


def throughput(data: Path, request_bodies: list[str], duration: int, beside_load: bool = False) -> None:
    script = data.parent / "evidence.lua"
    lua_script(script, request_bodies)
    results: dict[tuple[str, int, int], dict[str, float]] = {}
    for load in machine_loads(beside_load):
        for workers in (1, 2):
            served = Served(data, workers)
            try:
                warm(served.url, request_bodies)
                for connections in (16, 200):
                    before = served.cpu_seconds()
                    r = run_wrk(served.url, script, connections, duration)
                    r["cpu_s"] = served.cpu_seconds() - before
                    r["per_cpu_s"] = r["rps"] * duration / max(r["cpu_s"], 1e-9)
                    results[(load, workers, connections)] = r
            finally:
                served.close()
    print("\n| machine | workers | connections | req/s | p50 ms | p99 ms | non-2xx | server CPU s | req per CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (load, workers, connections), r in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        print(
            f"| {load} | {workers} | {connections} | {r['rps']:.0f} | {r['p50']:.1f} | {r['p99']:.1f} "
            f"| {r['non2xx']:.0f} | {r['cpu_s']:.1f} | {r['per_cpu_s']:.0f} |"
        )
    for load, _workers, connections in sorted(k for k in results if k[1] == 1):
        ratio = results[(load, 2, connections)]["rps"] / max(results[(load, 1, connections)]["rps"], 1e-9)
        print(f"{load}: 2 workers / 1 worker at {connections} connections: {ratio:.2f}x")
    print(f"the machine's own ceiling (two CPU-bound processes at once vs one): {machine_parallelism():.2f}x")


def open_loop(url: str, request_bodies: list[str], rate: float, duration: float, seed: int = 5) -> dict[str, float]:
    """Send requests at `rate` per second (Poisson arrivals) for `duration` s; latency from scheduled arrival."""
    import aiohttp

    rng = random.Random(seed)
    arrivals: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            break
        arrivals.append(t)
    latencies: list[float] = []
    failures = 0

    async def one(session: aiohttp.ClientSession, start: float, at: float, body: str) -> None:
        nonlocal failures
        try:
            async with session.post(
                url + f"/contexts/{CONTEXT}/evidence", data=body, headers={"Content-Type": "application/json"}
            ) as resp:
                await resp.read()
                if resp.status != 200:
                    failures += 1
                    return
        except aiohttp.ClientError:
            failures += 1
            return
        latencies.append(time.perf_counter() - start - at)

    async def drive() -> float:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
            tasks = []
            start = time.perf_counter()
            for i, at in enumerate(arrivals):
                delay = start + at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(session, start, at, request_bodies[i % len(request_bodies)])))
            await asyncio.gather(*tasks)
            return time.perf_counter() - start

    took = asyncio.run(drive())
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else float("nan")

    return {
        "offered": len(arrivals) / duration,
        "answered": len(latencies) / took,
        "p50": pct(0.50),
        "p99": pct(0.99),
        "failures": float(failures),
    }


def offered_load(
    data: Path, request_bodies: list[str], fraction: float, duration: int, beside_load: bool = False
) -> None:
    script = data.parent / "evidence.lua"
    lua_script(script, request_bodies)
    served = Served(data, 1)
    try:
        warm(served.url, request_bodies)
        capacity = run_wrk(served.url, script, 16, duration)["rps"]
    finally:
        served.close()
    rate = fraction * capacity
    print(
        f"\none worker's capacity (wrk, 16 connections, {duration} s): {capacity:.0f} req/s; "
        f"offered {fraction:.0%} of it: {rate:.0f} req/s, Poisson arrivals"
    )
    print("\n| machine | workers | offered req/s | answered req/s | p50 ms | p99 ms | failures | server CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    p99: dict[tuple[str, int], float] = {}
    for load in machine_loads(beside_load):
        for workers in (1, 2):
            served = Served(data, workers)
            try:
                warm(served.url, request_bodies)
                before = served.cpu_seconds()
                r = open_loop(served.url, request_bodies, rate, duration)
                cpu = served.cpu_seconds() - before
            finally:
                served.close()
            p99[(load, workers)] = r["p99"]
            print(
                f"| {load} | {workers} | {r['offered']:.0f} | {r['answered']:.0f} | {r['p50']:.1f} "
                f"| {r['p99']:.1f} | {r['failures']:.0f} | {cpu:.1f} |"
            )
    for load, workers in sorted(p99):
        if workers == 2:
            ratio = p99[(load, 2)] / p99[(load, 1)]
            print(f"{load}: p99 with 2 workers / 1 worker at the same offered load: {ratio:.2f}x")


def consistency_and_apply(tmp: Path, size: int) -> None:
    sys.path.insert(0, str(ROOT))
    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.read.cache import warm
    from taguru_server.store.transfer.importer import parse_stream, run_import

    data = tmp / "shared"
    a = Registry(SqlitePersistence(data), shared=True, warm=warm)
    b = Registry(SqlitePersistence(data), shared=True, warm=warm)
    base = generate(2000, seed=3)
    run_import(a, parse_stream(base.text))
    b.catch_up()
    assert b.get(CONTEXT) is not None
    n = 20000
    started = time.perf_counter()
    for _ in range(n):
        b.catch_up()
    check_us = (time.perf_counter() - started) / n * 1e6
    b.shared = False
    started = time.perf_counter()
    for _ in range(n):
        b.catch_up()
    none_us = (time.perf_counter() - started) / n * 1e6
    b.shared = True
    print(f"\nconsistency check per read, nothing changed: {check_us:.1f} µs (no check: {none_us:.2f} µs)")

    extra = generate(size, seed=5)
    batches = parse_stream(extra.text)

    async def write() -> None:
        async with a.write_section(deadline=float("inf")):
            run_import(a, batches, commit_every=len(batches) + 1)

    started = time.perf_counter()
    asyncio.run(write())
    import_s = time.perf_counter() - started
    started = time.perf_counter()
    b.catch_up()
    apply_s = time.perf_counter() - started
    ctx = b.get(CONTEXT)
    assert ctx is not None
    started = time.perf_counter()
    fresh, _seq = b.persistence.load(ctx.cid, ctx.name, ctx.meta)
    load_s = time.perf_counter() - started
    assert len(fresh.edges.subject) == len(ctx.edges.subject) and len(fresh.passages) == len(ctx.passages)
    print(
        f"another worker's import of {extra.paragraphs} paragraphs ({import_s:.2f} s to import): applied from the "
        f"change log in {apply_s:.2f} s; loading the whole context ({len(ctx.passages)} sources) "
        f"instead: {load_s:.2f} s"
    )
    a.close()
    b.close()


def rss(tmp: Path, size: int, request_bodies: list[str]) -> None:
    data = tmp / f"rss-{size}"
    corpus = generate(size, seed=7)
    import_corpus(data, corpus.text)
    served = Served(data, 2)
    try:
        warm(served.url, bodies(corpus.world), rounds=100)
        for pid in served.pids():
            status = Path(f"/proc/{pid}/status").read_text()
            kb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
            print(f"worker {pid}: RSS {kb / 1024:.0f} MB at {corpus.paragraphs} paragraphs")
    finally:
        served.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=20000, help="paragraphs in the throughput corpus")
    parser.add_argument("--duration", type=int, default=15, help="seconds per wrk run")
    parser.add_argument("--apply-size", type=int, default=10000, help="paragraphs of the import another worker makes")
    parser.add_argument("--rss-size", type=int, default=0, help="also measure each worker's RSS at this size")
    parser.add_argument("--beside-load", action="store_true", help="repeat the throughput runs beside a busy process")
    parser.add_argument("--throughput-only", action="store_true", help="skip the change-log and RSS measurements")
    parser.add_argument(
        "--open-loop",
        type=float,
        default=0.0,
        metavar="F",
        help="only the open-loop run: requests arrive at F times one worker's capacity (e.g. 0.7)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    tmp = Path(tempfile.mkdtemp(prefix="taguru-workers-"))
    try:
        corpus = generate(args.size, seed=7)
        data = tmp / "data"
        took = import_corpus(data, corpus.text)
        print(f"corpus: {corpus.paragraphs} paragraphs, {corpus.batches} sources, imported in {took:.1f} s")
        request_bodies = bodies(corpus.world)
        if args.open_loop:
            offered_load(data, request_bodies, args.open_loop, args.duration, args.beside_load)
            return 0
        throughput(data, request_bodies, args.duration, args.beside_load)
        if args.throughput_only:
            return 0
        consistency_and_apply(tmp, args.apply_size)
        if args.rss_size:
            rss(tmp, args.rss_size, request_bodies)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
