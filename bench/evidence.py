"""Evidence endpoint latency over real HTTP, with a per-stage breakdown from Server-Timing.

    python bench/evidence.py --size 100k            # generate, import offline, serve, measure
    python bench/evidence.py --size 10k --requests 300

Measures, against a real `taguru serve` process on loopback:
- default request (2 origins), and `search_limit: 200` with `labels`;
- the alternative a client would otherwise run: the same lanes as separate HTTP calls
  (resolve per origin, activate, sources/search, citations per cited paragraph), composed
  client-side without fusion or budgets;
and prints p50/p99 plus the per-stage p50 from the Server-Timing header.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def build_store(size: str, data_dir: Path) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    from generate import CONTEXT, generate, queries

    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.read.cache import warm
    from taguru_server.store.transfer.importer import parse_stream, run_import

    corpus = generate(size, 7)
    qs = queries(corpus)
    t0 = time.perf_counter()
    registry = Registry(SqlitePersistence(data_dir), warm=warm)
    run_import(registry, parse_stream(corpus.text), commit_every=2000)
    ctx = registry.get(CONTEXT)
    assert ctx is not None
    facts = {"paragraphs": corpus.paragraphs, "edges": len(ctx.edges.subject), "import_s": time.perf_counter() - t0}
    registry.close()
    world = corpus.world
    rng = random.Random(5)
    pairs = [[rng.choice(world.breweries), rng.choice(world.toji)] for _ in range(400)]
    return facts, {"pairs": pairs, "search": qs["search"]}


async def wait_live(base: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(600):
            try:
                async with s.get(base + "/live") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("server did not come up")


async def measure(base: str, context: str, bodies: list[dict[str, Any]], warmup: int = 20) -> dict[str, Any]:
    lat: list[float] = []
    stages: dict[str, list[float]] = {}
    items: list[int] = []
    async with aiohttp.ClientSession() as s:
        url = f"{base}/contexts/{context}/evidence"
        for i, body in enumerate(bodies):
            t0 = time.perf_counter()
            async with s.post(url, json=body) as r:
                doc = await r.json()
                timing = r.headers.get("Server-Timing", "")
            elapsed = (time.perf_counter() - t0) * 1000
            assert r.status == 200, doc
            if i < warmup:
                continue
            lat.append(elapsed)
            items.append(len(doc["result"]["items"]))
            for part in timing.split(","):
                name, _, dur = part.strip().partition(";dur=")
                if name:
                    stages.setdefault(name, []).append(float(dur))
    return {
        "p50": pct(lat, 0.5),
        "p99": pct(lat, 0.99),
        "mean_items": statistics.mean(items),
        "stages": {k: pct(v, 0.5) for k, v in stages.items()},
    }


async def measure_separate_calls(base: str, context: str, pairs: list[list[str]], warmup: int = 20) -> dict[str, Any]:
    """The client-side alternative: each lane as its own HTTP call, no fusion or budget."""
    lat: list[float] = []
    async with aiohttp.ClientSession() as s:
        root = f"{base}/contexts/{context}"
        for i, origins in enumerate(pairs):
            t0 = time.perf_counter()
            anchors = []
            for cue in origins:
                async with s.post(root + "/resolve", json={"cue": cue, "limit": 1}) as r:
                    found = (await r.json())["result"]
                if found:
                    anchors.append(found[0]["name"])
            async with s.post(root + "/activate", json={"origins": anchors}) as r:
                act = (await r.json())["result"]
            async with s.post(root + "/sources/search", json={"query": "; ".join(origins)}) as r:
                await r.json()
            wanted = sorted(
                {
                    (a["source"], a["paragraph"])
                    for m in act["matches"]
                    for a in m["association"]["attributions"]
                    if a["paragraph"] is not None
                }
            )
            for source, paragraph in wanted:
                async with s.post(root + "/citations", json={"source": source, "paragraph": paragraph}) as r:
                    await r.read()
            if i >= warmup:
                lat.append((time.perf_counter() - t0) * 1000)
    return {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99)}


def main() -> int:
    parser = argparse.ArgumentParser(description="evidence latency benchmark")
    parser.add_argument("--size", default="10k", choices=["1k", "10k", "100k"])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--port", type=int, default=8291)
    args = parser.parse_args()
    from generate import CONTEXT

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        facts, q = build_store(args.size, data)
        env = dict(os.environ, TAGURU_DATA_DIR=str(data), TAGURU_ADDR=f"127.0.0.1:{args.port}")
        server = subprocess.Popen(
            [sys.executable, "-m", "taguru_server.cli", "serve"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{args.port}"
        try:
            asyncio.run(wait_live(base))
            t0 = time.perf_counter()
            first = asyncio.run(measure(base, CONTEXT, [{"origins": q["pairs"][0]}], warmup=0))
            cold_ms = (time.perf_counter() - t0) * 1000
            n = args.requests
            default = [{"origins": p} for p in q["pairs"][:n]]
            heavy = [
                {"origins": p, "labels": ["杜氏", "創業", "仕込み水"], "search_limit": 200, "text_fallback_query": s}
                for p, s in zip(q["pairs"][:n], q["search"][:n], strict=False)
            ]
            r_default = asyncio.run(measure(base, CONTEXT, default))
            r_heavy = asyncio.run(measure(base, CONTEXT, heavy))
            r_separate = asyncio.run(measure_separate_calls(base, CONTEXT, q["pairs"][:n]))
        finally:
            server.terminate()
            server.wait()
    del first
    print(
        f"corpus {args.size}: {facts['paragraphs']} paragraphs, {facts['edges']} edges "
        f"(offline import {facts['import_s']:.1f} s); first request incl. context load {cold_ms:.0f} ms"
    )
    print(f"{'request':<44}{'p50 ms':>9}{'p99 ms':>9}{'items':>7}")
    print(
        f"{'evidence, default (2 origins)':<44}{r_default['p50']:>9.2f}{r_default['p99']:>9.2f}"
        f"{r_default['mean_items']:>7.1f}"
    )
    print(
        f"{'evidence, search_limit 200 + labels':<44}{r_heavy['p50']:>9.2f}{r_heavy['p99']:>9.2f}"
        f"{r_heavy['mean_items']:>7.1f}"
    )
    print(f"{'separate lane calls (client-side composition)':<44}{r_separate['p50']:>9.2f}{r_separate['p99']:>9.2f}")
    print(f"ratio evidence/separate (p50): {r_default['p50'] / r_separate['p50']:.2f}")
    print("per-stage p50 (ms, from Server-Timing):")
    for name in r_default["stages"]:
        print(f"  {name:<12} default {r_default['stages'][name]:7.3f}   heavy {r_heavy['stages'].get(name, 0):7.3f}")
    print(json.dumps({"size": args.size, "default": r_default, "heavy": r_heavy, "separate": r_separate}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
