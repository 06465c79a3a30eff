"""Benchmark of the communities build: detection (louvain-cc/1) plus extractive summaries, no HTTP.

    .venv/bin/python bench/communities.py                      # 10k and 100k paragraphs
    .venv/bin/python bench/communities.py --sizes 10k --stress-edges 500000

Each size runs in a fresh child process:
1. generate the synthetic corpus with bench/generate.py (deterministic, seed 7) — or, when that
   module is absent, a planted-partition graph of comparable size;
2. apply its batches' associations and aliases to an in-memory context (passages are skipped: the
   build reads only the graph);
3. reset the process's peak-RSS mark, then time the build exactly as `taguru communities` does it
   minus HTTP: snapshot + `server.communities.analysis.analyze`, then
   `server.communities.summaries.extractive_summaries`.

`--stress-edges N` adds a synthetic graph of N distinct associations over N/5 concepts (90% of the
edges inside planted groups of 50), which is harder than the corpus graph: every edge is distinct,
so it has about three times as many edges as the 100k corpus. Figures go to stdout as a table;
`--json PATH` also writes them.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from run import _rss_mb  # noqa: E402  (the store benchmark's reading of VmRSS/VmHWM)


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux: write 5 to clear_refs); False when not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _corpus_context(size: str, seed: int) -> tuple[Any, dict[str, Any]]:
    from taguru_server.store.model.context import CONCEPT, LABEL, AliasRefused, Context, Meta
    from taguru_server.store.transfer.importer import parse_stream

    try:
        from generate import generate  # bench/generate.py, another benchmark's corpus generator
    except ImportError:
        return _planted_context(int(size.rstrip("k")) * 5_000, seed), {"source": "planted partition"}
    corpus = generate(size, seed)
    facts = {
        "source": "bench/generate.py",
        "paragraphs": corpus.paragraphs,
        "association_lines": corpus.association_lines,
    }
    batches = parse_stream(corpus.text)
    del corpus
    ctx = Context(1, "bench", Meta())
    for batch in batches:
        for s, lab, o, w, _p in batch.associations:
            ctx.assert_association(s, lab, o, w, batch.source, None)
        for kind in (CONCEPT, LABEL):
            for _k, alias, canonical in sorted(a for a in batch.aliases if a[0] == kind):
                try:
                    ctx.add_alias(kind, alias, canonical)
                except AliasRefused:
                    pass
    return ctx, facts


def _planted_context(edges: int, seed: int) -> Any:
    from taguru_server.store.model.context import Context, Meta

    rng = random.Random(seed)
    ctx = Context(1, "stress", Meta())
    concepts = max(edges // 5, 2)
    labels = [f"rel{i}" for i in range(20)]
    seen: set[tuple[int, int, int]] = set()
    while len(seen) < edges:
        a = rng.randrange(concepts)
        b = (a // 50) * 50 + rng.randrange(50) if rng.random() < 0.9 else rng.randrange(concepts)
        lab = rng.randrange(len(labels))
        if a == b or (a, lab, b) in seen:
            continue
        seen.add((a, lab, b))
        ctx.assert_association(f"c{a}", labels[lab], f"c{b}", rng.choice((1.0, 0.5, 2.0, -1.0)), None, None)
    return ctx


def measure(kind: str, size: str, seed: int) -> dict[str, Any]:
    """One measurement, in this process: load the graph, then time and watch the build."""
    from taguru_server.server.communities.analysis import analyze
    from taguru_server.server.communities.louvain import GraphSnapshot
    from taguru_server.server.communities.summaries import extractive_summaries

    t0 = time.perf_counter()
    if kind == "corpus":
        ctx, facts = _corpus_context(size, seed)
    else:
        ctx, facts = _planted_context(int(size), seed), {"source": "planted partition"}
    load_s = time.perf_counter() - t0
    gc.collect()
    rss_before, _ = _rss_mb()
    peak_reset = _reset_peak()
    t1 = time.perf_counter()
    analysis = analyze(GraphSnapshot.of(ctx))
    t2 = time.perf_counter()
    summaries = extractive_summaries(analysis["communities"])
    t3 = time.perf_counter()
    _rss, peak = _rss_mb()
    leaves = sum(1 for c in analysis["communities"] if c["level"] == 0)
    return {
        "kind": kind,
        "size": size,
        **facts,
        "concepts": len(ctx.concepts),
        "edges": len(ctx.edges.subject),
        "graph_nodes": analysis["concept_count"],
        "graph_pairs": analysis["edge_count"],
        "levels": analysis["levels"],
        "communities": len(analysis["communities"]),
        "leaves": leaves,
        "summary_mb": sum(len(s.encode()) for s in summaries.values()) / 1e6,
        "load_s": round(load_s, 2),
        "detect_s": round(t2 - t1, 2),
        "summarize_s": round(t3 - t2, 2),
        "build_s": round(t3 - t1, 2),
        "rss_before_build_mb": round(rss_before, 1),
        "peak_rss_build_mb": round(peak, 1),
        "peak_is_build_only": peak_reset,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10k,100k", help="comma-separated corpus sizes (1k, 10k, 100k)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--stress-edges", type=int, default=0, help="also measure a planted graph of N associations")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "SIZE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], args.seed)))
        return 0
    runs = [("corpus", s.strip()) for s in args.sizes.split(",") if s.strip()]
    if args.stress_edges:
        runs.append(("planted", str(args.stress_edges)))
    results = []
    for kind, size in runs:
        out = subprocess.run(
            [sys.executable, __file__, "--seed", str(args.seed), "--child", kind, size],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(
            f"{kind:8} {size:>7}: {r['edges']:>7} edges, {r['graph_nodes']:>6} nodes, {r['communities']:>5} "
            f"communities / {r['levels']} levels; detect {r['detect_s']:.2f}s + summaries {r['summarize_s']:.2f}s "
            f"= {r['build_s']:.2f}s; RSS {r['rss_before_build_mb']:.0f} MB before, "
            f"peak {r['peak_rss_build_mb']:.0f} MB",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
