"""Tail latency on the hub-heavy corpus (bench/generate_hubs.py): evidence, resolve, BM25 vs tantivy.

    .venv/bin/python bench/tails.py --size 100k                  # generate, import, measure once
    .venv/bin/python bench/tails.py --size 100k --keep DIR       # keep the imported store in DIR
    .venv/bin/python bench/tails.py --reuse DIR --runs 3         # measure an existing store again

One measurement, in fresh processes against the imported store:
1. in-process (`lanes`): cold load, then p50/p99 of `server.wire.lanes.resolve` (hub-weighted cues), the
   `sources/search` lane at limit 5 (`server.wire.lanes.search_passages`) and the BM25 core
   (`passages.top_documents` on pre-tokenized terms), and tantivy over the same paragraph terms
   with the same term sets, in the same process;
2. over HTTP (`http`) against `taguru serve`: evidence p50/p99 with hub-weighted origin pairs
   (default; +2 labels; search_limit 200), and `sources/search` at limit 5.

With `--graph-passages`, a third phase starts a fresh server and sends it default evidence requests and
`include_graph_passages` requests interleaved (each over its own origin pairs, so neither finds the
other's activations kept): the same load and process state for both, and the mode's added p99 is the
difference (target ≤ 5 ms).

With `--runs N` the phases run N times in turn and the table shows the median of the
runs with [min–max]. Every latency item is warmed once (its first 20 items) and then timed once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

TARGETS = {
    "evidence_default_p99": 40.0,
    "evidence_labels_p99": 60.0,
    "evidence_limit200_p99": 100.0,
    "resolve_p99": 5.0,
    "bm25_p99_ratio": 1.5,
    "http_search_p50_ratio": 1.2,
    "graph_lane_added_p99": 5.0,
}


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))] if s else float("nan")


def _stats(took: list[float]) -> dict[str, float]:
    return {"p50": _pct(took, 0.5), "p99": _pct(took, 0.99), "n": len(took)}


# ----- import ------------------------------------------------------------------------------


def import_phase(size: str, seed: int, data_dir: Path) -> dict[str, Any]:
    from generate_hubs import CONTEXT, generate, queries

    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.read.cache import warm
    from taguru_server.store.transfer.importer import parse_stream, run_import

    corpus = generate(size if size in ("1k", "10k", "100k", "1m") else int(size), seed)
    (data_dir / "queries.json").write_text(json.dumps(queries(corpus), ensure_ascii=False), encoding="utf-8")
    t0 = time.perf_counter()
    registry = Registry(SqlitePersistence(data_dir / "store"), warm=warm)
    run_import(registry, parse_stream(corpus.text), commit_every=2000)
    ctx = registry.get(CONTEXT)
    assert ctx is not None
    facts = {
        "paragraphs": corpus.paragraphs,
        "association_lines": corpus.association_lines,
        "concepts": len(ctx.concepts),
        "edges": len(ctx.edges.subject),
        "max_degree": max(ctx.out_edges.degree(c) + ctx.in_edges.degree(c) for c in range(len(ctx.concepts))),
        "import_s": time.perf_counter() - t0,
    }
    registry.close()
    (data_dir / "facts.json").write_text(json.dumps(facts), encoding="utf-8")
    return facts


# ----- in-process lanes ----------------------------------------------------------------------


def _time_each(fn: Any, items: list[Any], warmup: int = 20) -> dict[str, float]:
    for item in items[:warmup]:
        fn(item)
    gc.collect()
    gc.disable()
    try:
        took = []
        for item in items:
            t0 = time.perf_counter_ns()
            fn(item)
            took.append((time.perf_counter_ns() - t0) / 1e6)
    finally:
        gc.enable()
    return _stats(took)


def _lane_times(ctx: Any, qs: dict[str, Any]) -> tuple[dict[str, Any], list[list[str]]]:
    from taguru_server.server.wire.render import lanes as lane_wire
    from taguru_server.store.model.context import CONCEPT
    from taguru_server.store.read import passages
    from taguru_server.store.text import query_terms

    out: dict[str, Any] = {}
    out["resolve"] = _time_each(lambda cue: lane_wire.resolve(ctx, CONCEPT, cue, 0.3, 10), qs["resolve"])
    out["search5"] = _time_each(lambda q: lane_wire.search_passages(ctx, q, 5), qs["search"])
    term_sets = [t for t in (query_terms(q) for q in qs["search"]) if t]
    out["bm25_5"] = _time_each(lambda t: passages.top_documents(ctx, t, 5, None), term_sets)
    return out, term_sets


def lanes_phase(data_dir: Path) -> dict[str, Any]:
    from generate_hubs import CONTEXT
    from run import _document_terms, _tantivy

    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.read import cache
    from taguru_server.store.read.cache import warm

    qs = json.loads((data_dir / "queries.json").read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    registry = Registry(SqlitePersistence(data_dir / "store"), warm=warm)
    ctx = registry.get(CONTEXT)
    assert ctx is not None
    cache.warm(ctx)
    load_s = time.perf_counter() - t0
    out, term_sets = _lane_times(ctx, qs)
    out["load_s"] = load_s
    docs = _document_terms(ctx)
    del ctx, registry
    gc.collect()
    t = _tantivy(docs, term_sets)["search5"]
    out["tantivy5"] = {"p50": t["p50_ms"], "p99": t["p99_ms"], "n": t["n"]}
    return out


# ----- over HTTP -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(base: str) -> None:
    """Until the server at `base` answers `/ready` 200 (two minutes at most)."""
    import aiohttp

    async with aiohttp.ClientSession() as s:
        for _ in range(1200):
            try:
                async with s.get(base + "/ready") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("server did not become ready")


async def _measure(base: str, path: str, bodies: list[dict[str, Any]], warmup: int = 20) -> dict[str, float]:
    import aiohttp

    took: list[float] = []
    async with aiohttp.ClientSession() as s:
        for i, body in enumerate(bodies):
            t0 = time.perf_counter()
            async with s.post(base + path, json=body) as r:
                await r.read()
                assert r.status == 200, r.status
            if i >= warmup:
                took.append((time.perf_counter() - t0) * 1000)
    return _stats(took)


async def _measure_paired(
    base: str, path: str, first: list[dict[str, Any]], second: list[dict[str, Any]], warmup: int = 20
) -> tuple[dict[str, float], dict[str, float]]:
    """Two request lists sent interleaved (one of each in turn) to one server: the same load and the same
    process state for both, so their difference is the requests' own."""
    import aiohttp

    took: tuple[list[float], list[float]] = ([], [])
    async with aiohttp.ClientSession() as s:
        for i, pair in enumerate(zip(first, second, strict=True)):
            for side, body in enumerate(pair):
                t0 = time.perf_counter()
                async with s.post(base + path, json=body) as r:
                    await r.read()
                    assert r.status == 200, r.status
                if i >= warmup:
                    took[side].append((time.perf_counter() - t0) * 1000)
    return _stats(took[0]), _stats(took[1])


def http_phase(data_dir: Path, graph: bool = False) -> dict[str, Any]:
    """The HTTP measurements; with `graph`, a fresh server answers default requests and graph-passages
    requests interleaved, each kind over its own origin pairs (keys `graph_…`), and nothing else."""
    from generate_hubs import CONTEXT

    qs = json.loads((data_dir / "queries.json").read_text(encoding="utf-8"))
    port = _free_port()
    env = dict(os.environ, TAGURU_DATA_DIR=str(data_dir / "store"), TAGURU_ADDR=f"127.0.0.1:{port}")
    server = subprocess.Popen(
        [sys.executable, "-m", "taguru_server.cli", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    root = f"/contexts/{CONTEXT}"
    out: dict[str, Any] = {}
    try:
        asyncio.run(wait_ready(base))
        # loads the context (and with `graph`, builds its concept–paragraph graph)
        first = {"origins": qs["pairs"][0], "include_graph_passages": True} if graph else {"origins": qs["pairs"][0]}
        asyncio.run(_measure(base, root + "/evidence", [first], warmup=0))
        # each kind gets its own origin pairs, so no kind finds the others' activations kept
        n = len(qs["labels"])
        pairs = qs["pairs"]
        default = [{"origins": p} for p in pairs[:n]]
        if graph:
            with_lane = [{"origins": p, "include_graph_passages": True} for p in pairs[n : 2 * n]]
            plain, lane = asyncio.run(_measure_paired(base, root + "/evidence", default, with_lane))
            out["graph_plain_default"], out["graph_evidence_default"] = plain, lane
            return out
        out["evidence_default"] = asyncio.run(_measure(base, root + "/evidence", default))
        labelled = [{"origins": p, "labels": ls} for p, ls in zip(pairs[n : 2 * n], qs["labels"], strict=True)]
        out["evidence_labels"] = asyncio.run(_measure(base, root + "/evidence", labelled))
        wide = [{"origins": p, "search_limit": 200} for p in pairs[2 * n : 3 * n]]
        out["evidence_limit200"] = asyncio.run(_measure(base, root + "/evidence", wide))
        search = [{"query": q, "limit": 5} for q in qs["search"]]
        out["http_search5"] = asyncio.run(_measure(base, root + "/sources/search", search))
    finally:
        server.terminate()
        server.wait()
    return out


# ----- report --------------------------------------------------------------------------------


def _child(phase: str, data_dir: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--reuse", str(data_dir)]
    if phase == "graph":
        cmd[3] = "http"
        cmd.append("--graph-passages")
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _summary(runs: list[dict[str, Any]], path: tuple[str, ...]) -> tuple[float, float, float]:
    vals = []
    for r in runs:
        v: Any = r
        for p in path:
            v = v[p]
        vals.append(float(v))
    return statistics.median(vals), min(vals), max(vals)


def report(facts: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    lines = [
        f"hub corpus: {facts['paragraphs']} paragraphs, {facts['association_lines']} association lines, "
        f"{facts['concepts']} concepts, {facts['edges']} edges, max degree {facts['max_degree']}; "
        f"{len(runs)} run(s), median [min–max]"
    ]

    def row(name: str, path: tuple[str, ...], target: float | None = None, unit: str = "ms") -> None:
        if path[0] not in runs[0]:  # a phase that did not run (--http-only)
            return
        med, lo, hi = _summary(runs, path)
        verdict = "" if target is None else f"  (target <= {target:g}{unit}: {'ok' if med <= target else 'MISS'})"
        lines.append(f"  {name:<40}{med:9.2f} [{lo:.2f}–{hi:.2f}] {unit}{verdict}")

    row("evidence default p50", ("evidence_default", "p50"))
    row("evidence default p99", ("evidence_default", "p99"), TARGETS["evidence_default_p99"])
    row("evidence +2 labels p50", ("evidence_labels", "p50"))
    row("evidence +2 labels p99", ("evidence_labels", "p99"), TARGETS["evidence_labels_p99"])
    if "graph_evidence_default" in runs[0]:
        row("interleaved: evidence default p50", ("graph_plain_default", "p50"))
        row("interleaved: evidence default p99", ("graph_plain_default", "p99"))
        row("interleaved: evidence graph-passages p50", ("graph_evidence_default", "p50"))
        row("interleaved: evidence graph-passages p99", ("graph_evidence_default", "p99"))
        for r in runs:
            r["graph_delta_p50"] = r["graph_evidence_default"]["p50"] - r["graph_plain_default"]["p50"]
            r["graph_delta_p99"] = r["graph_evidence_default"]["p99"] - r["graph_plain_default"]["p99"]
        row("graph-passages added p50", ("graph_delta_p50",))
        row("graph-passages added p99", ("graph_delta_p99",), TARGETS["graph_lane_added_p99"])
    row("evidence search_limit 200 p50", ("evidence_limit200", "p50"))
    row("evidence search_limit 200 p99", ("evidence_limit200", "p99"), TARGETS["evidence_limit200_p99"])
    row("resolve p50 (in-process)", ("resolve", "p50"))
    row("resolve p99 (in-process)", ("resolve", "p99"), TARGETS["resolve_p99"])
    row("sources/search lane limit 5 p50", ("search5", "p50"))
    row("sources/search lane limit 5 p99", ("search5", "p99"))
    row("bm25 core limit 5 p50", ("bm25_5", "p50"))
    row("bm25 core limit 5 p99", ("bm25_5", "p99"))
    row("tantivy limit 5 p50", ("tantivy5", "p50"))
    row("tantivy limit 5 p99", ("tantivy5", "p99"))
    row("HTTP sources/search limit 5 p50", ("http_search5", "p50"))
    for r in runs:
        if "tantivy5" not in r:
            continue
        r["ratio_lane_p99"] = r["search5"]["p99"] / r["tantivy5"]["p99"]
        r["ratio_core_p99"] = r["bm25_5"]["p99"] / r["tantivy5"]["p99"]
        r["ratio_http_p50"] = r["http_search5"]["p50"] / r["tantivy5"]["p50"]
    row("BM25 lane p99 / tantivy p99", ("ratio_lane_p99",), TARGETS["bm25_p99_ratio"], "x")
    row("BM25 core p99 / tantivy p99", ("ratio_core_p99",), TARGETS["bm25_p99_ratio"], "x")
    row("HTTP search p50 / tantivy p50", ("ratio_http_p50",), TARGETS["http_search_p50_ratio"], "x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tail latency on the hub-heavy corpus")
    ap.add_argument("--size", default="10k")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--keep", default=None, help="import into this (empty) directory and keep it")
    ap.add_argument("--reuse", default=None, help="measure the store a previous --keep imported")
    ap.add_argument("--json", default=None, help="also write every run's figures here")
    ap.add_argument("--graph-passages", action="store_true", help="also measure the graph-passages mode")
    ap.add_argument("--http-only", action="store_true", help="skip the in-process phase (no tantivy needed)")
    ap.add_argument("--phase", default="all", choices=["all", "lanes", "http"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.phase == "lanes":
        print(json.dumps(lanes_phase(Path(args.reuse))))
        return 0
    if args.phase == "http":
        print(json.dumps(http_phase(Path(args.reuse), graph=args.graph_passages)))
        return 0
    tmp = None
    if args.reuse:
        data_dir = Path(args.reuse)
    else:
        if args.keep:
            data_dir = Path(args.keep)
            data_dir.mkdir(parents=True, exist_ok=True)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="taguru-tails-")
            data_dir = Path(tmp.name)
        print(f"[tails] generating and importing {args.size} ...", file=sys.stderr, flush=True)
        import_phase(args.size, args.seed, data_dir)
    try:
        facts = json.loads((data_dir / "facts.json").read_text(encoding="utf-8"))
        runs = []
        for i in range(args.runs):
            print(f"[tails] run {i + 1}/{args.runs} ...", file=sys.stderr, flush=True)
            r = {} if args.http_only else _child("lanes", data_dir)
            r.update(_child("http", data_dir))
            if args.graph_passages:
                r.update(_child("graph", data_dir))
            runs.append(r)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(report(facts, runs))
    if args.json:
        Path(args.json).write_text(json.dumps({"facts": facts, "runs": runs}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
