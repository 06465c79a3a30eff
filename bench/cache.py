"""The retrieval cache's hit path against its miss path and against the cache off, over real HTTP.

    python bench/cache.py                      # the 10k corpus, 300 requests per operation
    python bench/cache.py --size 100k --requests 200

1. The synthetic corpus of bench/generate.py (seed 7) is imported offline into a fresh SQLite data dir.
2. `taguru serve` runs on it twice, one after the other, started as documented: once with
   `TAGURU_RETRIEVAL_CACHE_BYTES=0` (the cache off), once with the default budget (32 MiB).
3. The same requests, in the same order, go to both: recall (a cue), query (a subject),
   sources/search (a query) and cross-context recall, from the generator's cues (seed 11), and two
   larger answers: recall on the cue's first character with limit 500, search with limit 100. With the
   cache on, the first pass over the distinct bodies is the miss path (computed, then stored) and a
   second pass over the same bodies the hit path. Each request is timed on the client (one
   keep-alive connection, sequential), after a warm-up of 20 requests on the cache-off server.
4. Every hit's body is checked to be the cache-off body byte for byte, the envelope's `time` aside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
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

from tails import wait_ready  # noqa: E402

TIME = re.compile(rb',"time":[-+0-9.eE]+')


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def build_store(size: str, data_dir: Path) -> tuple[dict[str, Any], list[tuple[str, str, dict[str, Any]]]]:
    """Import the corpus offline; the requests per operation (op, path, body)."""
    from generate import CONTEXT, generate, queries

    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.read.cache import warm
    from taguru_server.store.transfer.importer import parse_stream, run_import

    corpus = generate(size, 7)
    qs = queries(corpus)
    registry = Registry(SqlitePersistence(data_dir), warm=warm)
    run_import(registry, parse_stream(corpus.text), commit_every=2000)
    ctx = registry.get(CONTEXT)
    assert ctx is not None
    facts = {"paragraphs": corpus.paragraphs, "edges": len(ctx.edges.subject)}
    registry.close()
    root = f"/contexts/{CONTEXT}"
    requests: list[tuple[str, str, dict[str, Any]]] = []
    for origins in qs["activate"]:
        requests.append(("recall", f"{root}/recall", {"cue": origins[0], "limit": 20}))
        requests.append(("query", f"{root}/query", {"subject": origins[0], "limit": 20}))
        requests.append(("cross recall", "/recall", {"contexts": [CONTEXT], "cue": origins[0], "limit": 20}))
        requests.append(("recall, limit 500", f"{root}/recall", {"cue": origins[0][:1], "limit": 500}))
    for text in qs["search"]:
        requests.append(("sources/search", f"{root}/sources/search", {"query": text, "limit": 10}))
        requests.append(("search, limit 100", f"{root}/sources/search", {"query": text, "limit": 100}))
    return facts, requests


async def run_pass(base: str, requests: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, float, bytes]]:
    """Each request once, in order: (op, milliseconds, body without `time`)."""
    out: list[tuple[str, float, bytes]] = []
    async with aiohttp.ClientSession() as s:
        for op, path, body in requests:
            data = json.dumps(body, ensure_ascii=False).encode()
            t0 = time.perf_counter()
            async with s.post(base + path, data=data, headers={"Content-Type": "application/json"}) as r:
                raw = await r.read()
            elapsed = (time.perf_counter() - t0) * 1000
            assert r.status == 200, raw[:200]
            out.append((op, elapsed, TIME.sub(b"", raw)))
    return out


def serve(data: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    full = dict(os.environ, TAGURU_DATA_DIR=str(data), TAGURU_ADDR=f"127.0.0.1:{port}", **env)
    return subprocess.Popen(
        [sys.executable, "-m", "taguru_server.cli", "serve"],
        env=full,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def measured(base: str, requests: list[tuple[str, str, dict[str, Any]]], passes: int) -> list[list[Any]]:
    asyncio.run(wait_ready(base))
    return [asyncio.run(run_pass(base, requests)) for _ in range(passes)]


def main() -> int:
    parser = argparse.ArgumentParser(description="retrieval cache benchmark")
    parser.add_argument("--size", default="10k", choices=["1k", "10k", "100k"])
    parser.add_argument("--requests", type=int, default=300, help="requests per operation")
    parser.add_argument("--port", type=int, default=8293)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        facts, requests = build_store(args.size, data)
        by_op: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
        for item in requests:
            by_op.setdefault(item[0], []).append(item)
        chosen = [item for items in by_op.values() for item in items[: args.requests]]
        unique = list({json.dumps(r[1:], ensure_ascii=False): r for r in chosen}.values())
        base = f"http://127.0.0.1:{args.port}"
        results: dict[str, list[Any]] = {}
        for mode, env in (("off", {"TAGURU_RETRIEVAL_CACHE_BYTES": "0"}), ("on", {})):
            server = serve(data, args.port, **env)
            try:
                asyncio.run(wait_ready(base))
                asyncio.run(run_pass(base, unique[:20]))  # warm-up (the cache-on server stores these)
                passes = measured(base, unique, 2)
            finally:
                server.terminate()
                server.wait()
            results[mode] = passes
    off = results["off"][1]  # the cache-off server's second pass (as warm as the cache-on hit pass)
    miss, hit = results["on"]  # the warm-up stored the first 20: their first pass was a hit, left out below
    assert [b for _o, _t, b in hit] == [b for _o, _t, b in off], "a hit differs from the uncached answer"
    print(
        f"corpus {args.size}: {facts['paragraphs']} paragraphs, {facts['edges']} edges; {len(unique)} distinct requests"
    )
    print(f"{'operation':<20}{'off p50':>9}{'off p99':>9}{'miss p50':>10}{'miss p99':>10}{'hit p50':>9}{'hit p99':>9}")
    report: dict[str, Any] = {}
    for op in by_op:
        rows = {}
        for name, run in (("off", off), ("miss", miss[20:]), ("hit", hit)):
            samples = [t for o, t, _b in run if o == op]
            rows[name] = (pct(samples, 0.5), pct(samples, 0.99))
        report[op] = rows
        print(
            f"{op:<20}{rows['off'][0]:>9.3f}{rows['off'][1]:>9.3f}{rows['miss'][0]:>10.3f}{rows['miss'][1]:>10.3f}"
            f"{rows['hit'][0]:>9.3f}{rows['hit'][1]:>9.3f}"
        )
    print(json.dumps({"size": args.size, "ms": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
