"""Benchmark of the time windows: windowed against unwindowed recall, query, activate and explore, in process.

    .venv/bin/python bench/windows.py                     # the 100k-paragraph corpus
    .venv/bin/python bench/windows.py --size 10k --n 100 --json out.json

1. The synthetic corpus of bench/generate.py (deterministic, seed 7) is applied to an in-memory
   context: every batch's associations with its source and paragraph, its aliases, and its passage
   with the batch's `date` (the generator dates batches an hour apart, so every source has an
   effective time).
2. The window is `{"until": T}` with T the median of the sources' dates: it keeps about half the
   sources, and with them about half of each edge's evidence.
3. Inputs come from the generator's activate cues (seed 11): recall takes each cue's first origin as
   its cue, query pins it as the subject, activate (decay 0.5, limit 20) and explore (depth 10,
   limit 100) take the origins as they are.
4. Each read runs through the same renderers the routes call, timed per call (wall and thread CPU)
   after a warm-up. The unwindowed activate keeps results per read version; that memo is cleared
   before every unwindowed call, so both sides walk. The windowed view (eligible sources, the
   attribution columns, the windowed activation and walk graphs) is built once per read version
   and window; the time that build takes after a write is reported on its own. As the registry
   does with a loaded context, the loaded objects are frozen out of the collector's full passes.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from run import _time_each  # noqa: E402  (the store benchmark's timer)

TARGET = 1.5  # windowed p50 at most this many times the unwindowed p50


def dated_context(size: str, seed: int) -> tuple[Any, dict[str, Any]]:
    """The corpus in one context, passages stored with their batch's date; the facts and the cues."""
    from generate import generate, queries

    from taguru_server.store.model.context import CONCEPT, LABEL, AliasRefused, Context, Meta
    from taguru_server.store.transfer.importer import parse_stream

    corpus = generate(size, seed)
    facts: dict[str, Any] = {"paragraphs": corpus.paragraphs}
    cues = queries(corpus)["activate"]
    batches = parse_stream(corpus.text)
    del corpus
    ctx = Context(1, "bench", Meta())
    dates: list[int] = []
    for batch in batches:
        ctx.assert_many(list(batch.associations), batch.source)
        for kind in (CONCEPT, LABEL):
            for _k, alias, canonical in sorted(a for a in batch.aliases if a[0] == kind):
                try:
                    ctx.add_alias(kind, alias, canonical)
                except AliasRefused:
                    pass
        if batch.passage is not None:
            ctx.store_passage(
                batch.source,
                batch.passage,
                batch.questions,
                batch.sections,
                batch.locators,
                batch.tags,
                batch.stored_at,
                batch.date,
            )
            if batch.date is not None:
                dates.append(batch.date)
    ctx.seal_indexes()
    dates.sort()
    facts.update(
        concepts=len(ctx.concepts),
        edges=len(ctx.edges.subject),
        sources=len(ctx.sources),
        dated_sources=len(dates),
        until=dates[len(dates) // 2] if dates else 0,
    )
    return ctx, {"facts": facts, "cues": cues}


def measure(size: str, seed: int, n: int) -> dict[str, Any]:
    from taguru_server.server.wire.render import lanes as lane_wire
    from taguru_server.server.wire.render import walks as walk_wire
    from taguru_server.store.read import query as query_lane
    from taguru_server.store.read.walks import walk_graph
    from taguru_server.store.read.window import Window, attribution_columns, window_view

    t0 = time.perf_counter()
    ctx, got = dated_context(size, seed)
    facts, cues = got["facts"], got["cues"][:n]
    facts["load_s"] = time.perf_counter() - t0
    gc.freeze()  # as the registry does with a loaded context: its objects stay out of full collections
    window = Window(None, facts["until"])
    walk_graph(ctx)  # the unwindowed walk graph a windowed one is cut from (built once per graph version)
    steps: list[tuple[str, Any]] = [
        ("eligible sources", lambda: window_view(ctx, window)),
        ("attribution columns", lambda: attribution_columns(ctx)),
        ("windowed counts and sums", lambda: window_view(ctx, window).arrays()),
        ("activation graph", lambda: window_view(ctx, window).activation_graph()),
        ("walk graph", lambda: window_view(ctx, window).walk_graph()),
    ]
    facts["view_steps_ms"] = {}
    for step, build in steps:
        t1 = time.perf_counter()
        build()
        facts["view_steps_ms"][step] = (time.perf_counter() - t1) * 1e3
    facts["view_build_ms"] = sum(facts["view_steps_ms"].values())
    view = window_view(ctx, window)
    facts["eligible_sources"] = int(view.mask.sum())
    live = view.arrays()[0] > 0
    facts["window_live_edges"] = int(live.sum())
    facts["live_edges"] = sum(1 for c in ctx.edges.count if c > 0)

    def unwindowed_activate(origins: list[str]) -> Any:
        ctx.read_cache.pop("activations", None)
        return lane_wire.activate(ctx, origins, 0.5, 20)

    def windowed_recall(origins: list[str]) -> Any:
        v = window_view(ctx, window)
        edges = [e for e in query_lane.recall_edges(ctx, origins[0]) if v.alive(e)]
        return lane_wire.windowed_page_matches(ctx, v, edges, 100, None)

    def windowed_query(origins: list[str]) -> Any:
        v = window_view(ctx, window)
        edges = [e for e in query_lane.query_edges(ctx, [origins[0]], None, None) if v.alive(e)]
        return lane_wire.windowed_page_matches(ctx, v, edges, 100, None)

    ops: dict[str, tuple[Any, Any]] = {
        "recall": (
            lambda o: lane_wire.page_matches(ctx, query_lane.recall_edges(ctx, o[0]), 100, None),
            windowed_recall,
        ),
        "query": (
            lambda o: lane_wire.page_matches(ctx, query_lane.query_edges(ctx, [o[0]], None, None), 100, None),
            windowed_query,
        ),
        "activate": (
            unwindowed_activate,
            lambda o: lane_wire.windowed_activate(ctx, window_view(ctx, window), o, 0.5, 20),
        ),
        "explore": (
            lambda o: walk_wire.explore(ctx, o, 10, 100, None),
            lambda o: walk_wire.explore(ctx, o, 10, 100, None, window_view(ctx, window)),
        ),
    }
    out: dict[str, Any] = {"facts": facts, "ops": {}}
    for name, (plain, windowed) in ops.items():
        row = {"plain": _time_each(plain, cues, warmup=5), "windowed": _time_each(windowed, cues, warmup=5)}
        row["ratio"] = row["windowed"]["p50_ms"] / max(row["plain"]["p50_ms"], 1e-9)
        row["total_plain_p50"] = sorted(plain(c)["total"] for c in cues)[len(cues) // 2]
        row["total_windowed_p50"] = sorted(windowed(c)["total"] for c in cues)[len(cues) // 2]
        out["ops"][name] = row
    return out


def report(r: dict[str, Any]) -> str:
    f = r["facts"]
    lines = [
        f"corpus: {f['paragraphs']} paragraphs, {f['concepts']} concepts, {f['edges']} edges ({f['live_edges']} "
        f"live), {f['sources']} sources; loaded in {f['load_s']:.1f} s",
        f"window: until {f['until']} keeps {f['eligible_sources']} of {f['dated_sources']} dated sources and "
        f"{f['window_live_edges']} live edges; its view built in {f['view_build_ms']:.0f} ms (once per read version)",
        "view build, ms: " + ", ".join(f"{k} {v:.0f}" for k, v in f["view_steps_ms"].items()),
        "",
        "| read | n | unwindowed p50 / p99 ms | windowed p50 / p99 ms | ratio (p50) "
        "| total p50 unwindowed / windowed |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in r["ops"].items():
        p, w = row["plain"], row["windowed"]
        mark = "✓" if row["ratio"] <= TARGET else "✗"
        lines.append(
            f"| {name} | {p['n']} | {p['p50_ms']:.2f} / {p['p99_ms']:.2f} | {w['p50_ms']:.2f} / {w['p99_ms']:.2f} "
            f"| **{row['ratio']:.2f}×** {mark} | {row['total_plain_p50']} / {row['total_windowed_p50']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100k", help="1k, 10k or 100k paragraphs")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--n", type=int, default=200, help="timed calls per read")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    r = measure(args.size, args.seed, args.n)
    print(report(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
