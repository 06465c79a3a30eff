"""Evidence latency when the reranker always times out: bounded by the attempt timeout, not retries.

    python bench/rerank_timeouts.py [--requests 40] [--timeout 1]

Starts the fake provider (tests/fake_reranker.py) in `slow` mode (it answers after 5 s) and a real
`taguru serve` pointed at it with TAGURU_RERANK_TIMEOUT_SECS; sends evidence requests with
`rerank` and reports p50/p99/max, next to the same requests without `rerank` and against a
provider that answers at once. With the breaker, only the first calls wait for the attempt
timeout (two attempts at most per call); once it opens, calls short-circuit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fake_reranker import FakeReranker  # noqa: E402

_TOPICS = [
    "仕込み水",
    "酒米の精米",
    "麹づくり",
    "冬の寒造り",
    "杜氏の系譜",
    "蔵の歴史",
    "瓶詰め",
    "火入れ",
    "酵母の選び方",
    "新酒祭り",
    "霧沢川の伏流水",
    "吟醸香",
]
CORPUS = {
    "passages": {
        f"p{i}.md": f"{topic}について: 青嶺酒造の杜氏は{topic}を重んじる。" + "霧沢" * (i + 1)
        for i, topic in enumerate(_TOPICS)
    },
}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def run(requests: int, timeout: int, mode: str, with_rerank: bool) -> dict[str, float]:
    fake = FakeReranker(mode, delay=5.0)
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            TAGURU_DATA_DIR=tmp,
            TAGURU_ADDR="127.0.0.1:0",
            TAGURU_RERANK_URL=f"http://127.0.0.1:{port}/rerank",
            TAGURU_RERANK_MODEL="fake",
            TAGURU_RERANK_TIMEOUT_SECS=str(timeout),
        )
        server = subprocess.Popen(
            [sys.executable, "-m", "taguru_server.cli", "serve"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            line = server.stdout.readline() if server.stdout else ""
            base = "http://" + line.strip().rsplit(" ", 1)[-1]
            async with aiohttp.ClientSession() as s:
                async with s.put(base + "/contexts/b") as r:
                    assert r.status == 200
                async with s.post(base + "/contexts/b/sources", json=CORPUS) as r:
                    assert r.status == 200
                lat = []
                reasons: dict[str, int] = {}
                body = {"origins": ["青嶺酒造"], "text_fallback_query": "杜氏 霧沢川", "search_limit": 10}
                if with_rerank:
                    body["rerank"] = {}
                for _ in range(requests):
                    t0 = time.perf_counter()
                    async with s.post(base + "/contexts/b/evidence", json=body) as r:
                        doc = await r.json()
                    lat.append((time.perf_counter() - t0) * 1000)
                    assert r.status == 200
                    reason = doc["result"]["plan"]["reranker"].get("reason", "ok" if with_rerank else "-")
                    reasons[reason] = reasons.get(reason, 0) + 1
        finally:
            server.terminate()
            server.wait()
            await runner.cleanup()
    return {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "max": max(lat), "hits": fake.hits, "reasons": reasons}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--timeout", type=int, default=1)
    args = parser.parse_args()
    rows = [
        ("no rerank requested", asyncio.run(run(args.requests, args.timeout, "ok", False))),
        ("provider answers at once", asyncio.run(run(args.requests, args.timeout, "ok", True))),
        (f"provider always slower than {args.timeout}s", asyncio.run(run(args.requests, args.timeout, "slow", True))),
    ]
    print(f"{'case':<34}{'p50 ms':>9}{'p99 ms':>10}{'max ms':>10}{'provider hits':>15}  reasons")
    for name, r in rows:
        print(f"{name:<34}{r['p50']:>9.2f}{r['p99']:>10.2f}{r['max']:>10.2f}{r['hits']:>15}  {r['reasons']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
