"""Benchmark of the graph walks (explore, paths, unreachable_from), in process, no HTTP.

    .venv/bin/python bench/graph_reads.py                 # the 100k-paragraph corpus
    .venv/bin/python bench/graph_reads.py --size 10k --n 100 --json out.json

1. The synthetic corpus of bench/generate.py (deterministic, seed 7) is applied to an in-memory
   context: every batch's associations with its source and paragraph, then its aliases
   (passages are not stored: the walks read only the graph; attributions keep their paragraphs).
2. Origins come from the generator's own activate cues (seed 11); paths pairs each cue with the
   next one's first origin as its target.
3. Each walk runs at its default limits (explore: max_depth 10, limit 100; paths: max_depth 10,
   limit 10, budget 100 000 entries; unreachable_from: limit 100), timed per call (wall and
   thread CPU), after a warm-up that also builds the per-graph-version arrays; the time that
   build takes after a write is reported on its own.
4. The same run times the contract's pseudo-code (tests/walks_plain.py) on the first
   `--plain-n` inputs and checks that both give identical answers on them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))  # the plain walks (tests/walks_plain.py)

from run import _pct, _time_each  # noqa: E402  (the store benchmark's percentile and timer)


def corpus_context(size: str, seed: int) -> tuple[Any, dict[str, Any]]:
    from generate import generate, queries

    from taguru_server.store.model.context import CONCEPT, LABEL, AliasRefused, Context, Meta
    from taguru_server.store.transfer.importer import parse_stream

    corpus = generate(size, seed)
    facts: dict[str, Any] = {"paragraphs": corpus.paragraphs, "association_lines": corpus.association_lines}
    qs = queries(corpus)
    batches = parse_stream(corpus.text)
    del corpus
    ctx = Context(1, "bench", Meta())
    for batch in batches:
        ctx.assert_many(list(batch.associations), batch.source)
        for kind in (CONCEPT, LABEL):
            for _k, alias, canonical in sorted(a for a in batch.aliases if a[0] == kind):
                try:
                    ctx.add_alias(kind, alias, canonical)
                except AliasRefused:
                    pass
    live = sum(1 for c in ctx.edges.count if c > 0)
    facts.update(concepts=len(ctx.concepts), labels=len(ctx.labels), edges=len(ctx.edges.subject), live_edges=live)
    facts["queries"] = qs["activate"]
    return ctx, facts


def _nothing() -> None:
    return None


def measure(size: str, seed: int, n: int, plain_n: int) -> dict[str, Any]:
    import walks_plain

    from taguru_server.server.wire.render import walks as walk_wire
    from taguru_server.store.read import walks

    t0 = time.perf_counter()
    ctx, facts = corpus_context(size, seed)
    facts["load_s"] = time.perf_counter() - t0
    origins: list[list[str]] = facts.pop("queries")[: n + 1]
    pairs = [(origins[i], [origins[i + 1][0]]) for i in range(len(origins) - 1)]
    origins = origins[:n]
    ctx.read_cache.pop("walks", None)
    t1 = time.perf_counter()
    walks.walk_graph(ctx)
    facts["arrays_build_ms"] = (time.perf_counter() - t1) * 1e3

    ops: dict[str, tuple[Any, Any, list[Any]]] = {
        "explore": (
            lambda o: walk_wire.explore(ctx, o, 10, 100, None),
            lambda o: walks_plain.plain_explore(ctx, o, 10, 100, None),
            origins,
        ),
        "paths": (
            lambda p: walk_wire.paths(ctx, p[0], p[1], 10, 10),
            lambda p: walks_plain.plain_paths(ctx, p[0], p[1], 10, 10),
            pairs,
        ),
        "unreachable_from": (
            lambda o: walk_wire.unreachable_from(ctx, o, 100, None, _nothing),
            lambda o: walks_plain.plain_unreachable_from(ctx, o, 100, None, _nothing),
            origins,
        ),
        "unreachable_from (no origins)": (
            lambda _o: walk_wire.unreachable_from(ctx, [], 100, None, _nothing),
            lambda _o: walks_plain.plain_unreachable_from(ctx, [], 100, None, _nothing),
            origins[: max(20, plain_n)],
        ),
    }
    out: dict[str, Any] = {"facts": facts, "ops": {}}
    for name, (ours, plain, items) in ops.items():
        row: dict[str, Any] = {"ours": _time_each(ours, items, warmup=5)}
        row["plain"] = _time_each(plain, items[:plain_n], warmup=1)
        row["identical"] = all(ours(x) == plain(x) for x in items[:plain_n])
        results = [ours(x) for x in items]
        totals = [float(r["total"]) for r in results]
        row["total_p50"] = _pct(totals, 0.5)
        row["total_max"] = max(totals)
        if name == "paths":
            row["capped"] = sum(1 for r in results if r["capped"])
        out["ops"][name] = row
    return out


def report(r: dict[str, Any]) -> str:
    f = r["facts"]
    lines = [
        f"corpus: {f['paragraphs']} paragraphs, {f['concepts']} concepts, {f['labels']} labels, "
        f"{f['edges']} edges ({f['live_edges']} live); loaded in {f['load_s']:.1f} s; "
        f"walk arrays built in {f['arrays_build_ms']:.0f} ms (once per graph version)",
        "",
        "| walk (default limits) | n | p50 ms | p99 ms | CPU p50 ms | plain n | plain p50 ms | plain p99 ms "
        "| identical | total p50 / max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in r["ops"].items():
        o, p = row["ours"], row["plain"]
        extra = f"{row['total_p50']:.0f} / {row['total_max']:.0f}"
        if "capped" in row:
            extra += f" (capped {row['capped']}/{o['n']})"
        lines.append(
            f"| {name} | {o['n']} | {o['p50_ms']:.1f} | {o['p99_ms']:.1f} | {o['cpu_p50_ms']:.1f} | {p['n']} "
            f"| {p['p50_ms']:.1f} | {p['p99_ms']:.1f} | {row['identical']} | {extra} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100k", help="1k, 10k or 100k paragraphs")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--n", type=int, default=200, help="timed calls per walk")
    ap.add_argument("--plain-n", type=int, default=20, help="calls of the contract's pseudo-code per walk")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    r = measure(args.size, args.seed, args.n, args.plain_n)
    print(report(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
