"""Mixed traffic over many connections against a seeded server: req/s and p50/p99 latency per route kind.

    .venv/bin/python bench/load.py                              # 200 connections, 20 s, own server
    .venv/bin/python bench/load.py --connections 200 --duration 60 --url http://127.0.0.1:8248

Each connection loops over the weighted mix below (probes, reads, graph queries, passage search,
resolve, evidence, small writes to a scratch context); every answer must be 200. A started server
is seeded like the attack run (the demo corpus, context `demo`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from attack import served

SCRATCH = "load-scratch"

# (kind, weight, method, path, body)
MIX: list[tuple[str, int, str, str, Any]] = [
    ("probe", 10, "GET", "/health", None),
    ("read", 15, "GET", "/contexts/demo", None),
    ("query", 20, "POST", "/contexts/demo/query", {"subject": "青嶺酒造"}),
    ("resolve", 15, "POST", "/contexts/demo/resolve", {"cue": "青嶺"}),
    ("search", 15, "POST", "/contexts/demo/sources/search", {"query": "杜氏 仕込み水", "limit": 5}),
    ("evidence", 15, "POST", "/contexts/demo/evidence", {"origins": ["青嶺酒造"], "budget": {"max_items": 10}}),
    ("write", 10, "POST", f"/contexts/{SCRATCH}/associations", None),
]


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def worker(
    session: aiohttp.ClientSession, url: str, stop_at: float, rng: random.Random, out: dict[str, list[float]]
) -> list[str]:
    """One connection's loop; returns what went wrong (non-200 answers)."""
    problems: list[str] = []
    kinds = list(MIX)
    weights = [m[1] for m in MIX]
    n = 0
    while time.perf_counter() < stop_at:
        kind, _w, method, path, body = rng.choices(kinds, weights)[0]
        if kind == "write":
            n += 1
            body = [{"subject": f"s{rng.randrange(1000)}", "label": "rel", "object": f"o{n}", "weight": 1.0}]
        data = None if body is None else json.dumps(body).encode()
        started = time.perf_counter()
        async with session.request(
            method, url + path, data=data, headers={"Content-Type": "application/json"} if data else None
        ) as resp:
            await resp.read()
            status = resp.status
        out.setdefault(kind, []).append(time.perf_counter() - started)
        if status != 200:
            problems.append(f"{kind} {status}")
    return problems


async def load(url: str, connections: int, duration: float, seed: int) -> str:
    """Run the mix and render the figures."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as session:
        async with session.put(url + f"/contexts/{SCRATCH}") as resp:
            await resp.read()
        latencies: dict[str, list[float]] = {}
        stop_at = time.perf_counter() + duration
        started = time.perf_counter()
        results = await asyncio.gather(
            *(worker(session, url, stop_at, random.Random(seed + i), latencies) for i in range(connections))
        )
        elapsed = time.perf_counter() - started
    problems = [p for r in results for p in r]
    total = sum(len(v) for v in latencies.values())
    lines = [f"{connections} connections, {elapsed:.1f} s, {total} requests, {total / elapsed:.0f} req/s"]
    lines.append(f"{'kind':<9} {'requests':>8} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8}")
    for kind, *_rest in MIX:
        values = sorted(latencies.get(kind, []))
        lines.append(
            f"{kind:<9} {len(values):>8} {len(values) / elapsed:>7.0f} "
            f"{percentile(values, 0.5) * 1000:>8.1f} {percentile(values, 0.99) * 1000:>8.1f}"
        )
    lines.append(f"non-200 answers: {len(problems)}" + (f" (first: {problems[0]})" if problems else ""))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of traffic")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--url", help="load a running server already holding the demo corpus")
    args = parser.parse_args()
    if args.url:
        print(asyncio.run(load(args.url.rstrip("/"), args.connections, args.duration, args.seed)))
        return 0
    with tempfile.TemporaryDirectory() as tmp, served(Path(tmp) / "data", Path(tmp) / "server.log") as url:
        print(asyncio.run(load(url, args.connections, args.duration, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
