"""Benchmark of the store at a given corpus size: import, cold start, RSS and lane latencies.

    .venv/bin/python bench/run.py --size 10k

Phases (all in one run):
1. generate the synthetic corpus (bench/generate.py) in memory;
2. import it through the real offline path (``parse_stream`` + ``run_import`` into a fresh
   ``SqlitePersistence`` data dir in a temp dir, committing every 2000 batches as the CLI does);
3. in a fresh child process: cold start (``Registry(SqlitePersistence(dir), warm=warm).get(name)``), RSS,
   then p50/p99 of resolve, activate (limit 20) and sources/search (limit 5 and 200) over a
   deterministic set of queries drawn from the corpus, then the same BM25 queries, over the same
   paragraph terms, with tantivy and with bm25s.

The table goes to stdout; ``--json`` also writes the figures (default bench/out/results-SIZE.json).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TARGETS = {
    "import_pps": 10_000.0,
    "cold_start_s": 15.0,
    "rss_mb": 2048.0,
    "resolve_p50_ms": 5.0,
    "activate_p50_ms": 5.0,
    "search5_p50_ms": 5.0,
    "tantivy_ratio": 2.0,
}


def _rss_mb() -> tuple[float, float]:
    rss = hwm = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return rss, hwm


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    if not s:
        return float("nan")
    i = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[i]


def _time_each(fn: Callable[[Any], Any], items: list[Any], warmup: int = 20) -> dict[str, float]:
    for item in items[:warmup]:
        fn(item)
    gc.collect()
    gc.disable()
    try:
        took = []
        cpu = []
        for item in items:
            c0 = time.thread_time_ns()
            t0 = time.perf_counter_ns()
            fn(item)
            took.append((time.perf_counter_ns() - t0) / 1e6)
            cpu.append((time.thread_time_ns() - c0) / 1e6)
    finally:
        gc.enable()
    return {
        "p50_ms": _pct(took, 0.5),
        "p99_ms": _pct(took, 0.99),
        "mean_ms": sum(took) / len(took),
        "n": len(took),
        "cpu_p50_ms": _pct(cpu, 0.5),
        "cpu_p99_ms": _pct(cpu, 0.99),
    }


# ----- parent: generate and import ----------------------------------------------------


def run_import_phase(size: str, seed: int, data_dir: Path) -> dict[str, Any]:
    from generate import CONTEXT, generate, queries

    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.read.cache import warm
    from taguru_server.store.transfer.importer import parse_stream, run_import

    t0 = time.perf_counter()
    corpus = generate(size, seed)
    gen_s = time.perf_counter() - t0
    qs = queries(corpus)
    (data_dir / "queries.json").write_text(json.dumps(qs, ensure_ascii=False), encoding="utf-8")
    text = corpus.text
    stats = {
        "size": size,
        "seed": seed,
        "paragraphs": corpus.paragraphs,
        "batches": corpus.batches,
        "association_lines": corpus.association_lines,
        "corpus_mb": len(text.encode()) / 1e6,
        "generate_s": gen_s,
        "context": CONTEXT,
    }
    del corpus
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    batches = parse_stream(text)
    t1 = time.perf_counter()
    registry = Registry(SqlitePersistence(data_dir / "store"), warm=warm)
    run_import(registry, batches, commit_every=2000)
    t2 = time.perf_counter()
    import_cpu = time.process_time() - c0
    ctx = registry.get(CONTEXT)
    assert ctx is not None
    stats.update(
        parse_s=t1 - t0,
        apply_commit_s=t2 - t1,
        import_s=t2 - t0,
        import_pps=stats["paragraphs"] / (t2 - t0),
        import_cpu_s=import_cpu,
        concepts=len(ctx.concepts),
        labels=len(ctx.labels),
        edges=len(ctx.edges.subject),
        sources=len(ctx.sources),
        db_mb=sum(p.stat().st_size for p in (data_dir / "store").iterdir()) / 1e6,
    )
    registry.close()
    return stats


# ----- child: cold start, latencies, baselines ----------------------------------------


def run_query_phase(data_dir: Path, context: str, skip_baselines: bool) -> dict[str, Any]:
    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence
    from taguru_server.store.read import passages
    from taguru_server.store.read.cache import warm

    out: dict[str, Any] = {}
    rss0, _ = _rss_mb()
    c0 = time.process_time()
    t0 = time.perf_counter()
    registry = Registry(SqlitePersistence(data_dir / "store"), warm=warm)
    ctx = registry.get(context)
    out["cold_start_s"] = time.perf_counter() - t0
    out["cold_start_cpu_s"] = time.process_time() - c0
    assert ctx is not None
    gc.collect()
    out["rss_mb"], out["rss_peak_mb"] = _rss_mb()
    out["rss_before_load_mb"] = rss0
    qs = json.loads((data_dir / "queries.json").read_text(encoding="utf-8"))
    latencies, term_sets = _lane_latencies(ctx, qs)
    out.update(latencies)
    out["baselines_missing"] = [] if skip_baselines else missing_baselines()
    if skip_baselines or len(out["baselines_missing"]) == len(BASELINES):
        return out
    docs = _document_terms(ctx)
    ours_top = [[d for d, _s in passages.top_documents(ctx, t, 5, None)] for t in term_sets]
    del ctx, registry
    gc.collect()
    if "tantivy" not in out["baselines_missing"]:
        out["tantivy"] = _tantivy(docs, term_sets)
    if "bm25s" not in out["baselines_missing"]:
        out["bm25s"] = _bm25s(docs, term_sets, ours_top)
    return out


BASELINES = ("tantivy", "bm25s")  # the `bench` extra: pip install -e '.[bench]'
BASELINES_HINT = "install them with: .venv/bin/pip install -e '.[bench]'"


def missing_baselines() -> list[str]:
    """The baseline engines (the `bench` extra) that are not installed here."""
    import importlib.util

    return [name for name in BASELINES if importlib.util.find_spec(name) is None]


def skipped_note(r: dict[str, Any]) -> str | None:
    """The line saying which baseline comparisons were skipped and how to get them, or None."""
    missing = r.get("baselines_missing") or []
    if not missing:
        return None
    return f"skipped: the {' and '.join(missing)} comparison(s) (not installed); {BASELINES_HINT}"


def _lane_latencies(ctx: Any, qs: dict[str, Any]) -> tuple[dict[str, Any], list[list[str]]]:
    """Latencies of resolve, activate, passage search and the BM25 core, and the search term sets."""
    # The timed callables take the context as a parameter: the caller drops its own reference
    # to the context before the baselines, so no closure may outlive that.
    from taguru_server.server.wire.render import lanes as lane_wire
    from taguru_server.store.model.context import CONCEPT
    from taguru_server.store.read import passages
    from taguru_server.store.text import query_terms

    out: dict[str, Any] = {}
    floor = 0.3
    out["resolve"] = _time_each(lambda cue: lane_wire.resolve(ctx, CONCEPT, cue, floor, 1000), qs["resolve"])
    out["activate"] = _time_each(lambda origins: lane_wire.activate(ctx, origins, 0.5, 20), qs["activate"])
    out["search5"] = _time_each(lambda q: lane_wire.search_passages(ctx, q, 5), qs["search"])
    out["search200"] = _time_each(lambda q: lane_wire.search_passages(ctx, q, 200), qs["search"])
    term_sets = [query_terms(q) for q in qs["search"]]
    term_sets = [t for t in term_sets if t]
    out["bm25_5"] = _time_each(lambda t: passages.top_documents(ctx, t, 5, None), term_sets)
    out["bm25_200"] = _time_each(lambda t: passages.top_documents(ctx, t, 200, None), term_sets)
    act = [lane_wire.activate(ctx, o, 0.5, 20)["total"] for o in qs["activate"]]
    out["activate_total_p50"] = _pct([float(a) for a in act], 0.5)
    out["activate_total_max"] = max(act)
    return out, term_sets


def _document_terms(ctx: Any) -> list[list[str]]:
    """Each live BM25 document's terms, in our document-id order (paragraph plus its questions)."""
    from taguru_server.store.text import terms

    bm = ctx.bm25
    questions: dict[tuple[int, int], list[str]] = {}
    for sid, passage in ctx.passages.items():
        for p, q in passage.questions:
            questions.setdefault((sid, p), []).append(q)
    docs = []
    for doc in range(len(bm.doc_len)):
        if not bm.doc_alive[doc]:
            docs.append([])
            continue
        sid, par = bm.doc_source[doc], bm.doc_par[doc]
        t = terms(ctx.passages[sid].paragraphs[par])
        for q in questions.get((sid, par), ()):
            t.extend(terms(q))
        docs.append(t)
    return docs


def _tantivy(docs: list[list[str]], term_sets: list[list[str]]) -> dict[str, Any]:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("body", stored=False, tokenizer_name="whitespace", index_option="freq")
    schema = sb.build()
    index = tantivy.Index(schema)
    t0 = time.perf_counter()
    writer = index.writer(heap_size=100_000_000, num_threads=1)
    for t in docs:
        doc = tantivy.Document()
        doc.add_text("body", " ".join(t))
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    build_s = time.perf_counter() - t0
    searcher = index.searcher()
    should = tantivy.Occur.Should

    def run(terms: list[str], limit: int) -> Any:
        q = tantivy.Query.boolean_query(
            [(should, tantivy.Query.term_query(schema, "body", t, index_option="freq")) for t in terms]
        )
        return searcher.search(q, limit, count=False).hits

    return {
        "build_s": build_s,
        "search5": _time_each(lambda t: run(t, 5), term_sets),
        "search200": _time_each(lambda t: run(t, 200), term_sets),
    }


def _bm25s(docs: list[list[str]], term_sets: list[list[str]], ours_top: list[list[int]]) -> dict[str, Any]:
    import bm25s
    import numpy as np

    t0 = time.perf_counter()
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in d] for d in docs]
    retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
    build_s = time.perf_counter() - t0
    queries = [[t for t in ts if t in vocab] for ts in term_sets]

    def run(terms: list[str], limit: int) -> Any:
        if not terms:
            return None
        return retriever.retrieve([terms], k=limit, show_progress=False, n_threads=1)

    agree = 0
    for ts, mine in zip(queries, ours_top, strict=False):
        if not ts:
            continue
        res, _scores = run(ts, 5)
        agree += len(set(np.asarray(res[0]).tolist()) & set(mine))
    return {
        "build_s": build_s,
        "search5": _time_each(lambda t: run(t, 5), queries),
        "search200": _time_each(lambda t: run(t, 200), queries),
        "top5_overlap": agree / max(1, sum(min(5, len(m)) for m in ours_top)),
    }


# ----- report -------------------------------------------------------------------------


def report(r: dict[str, Any]) -> str:
    lines = []
    lines.append(
        f"corpus {r['size']} (seed {r['seed']}): {r['paragraphs']} paragraphs, {r['batches']} batches, "
        f"{r['association_lines']} association lines ({r['edges']} edges, {r['concepts']} concepts, "
        f"{r['labels']} labels), {r['corpus_mb']:.1f} MB JSONL, generated in {r['generate_s']:.2f}s"
    )
    lines.append("")
    rows: list[tuple[str, str, str, str]] = []

    def ok(value: float, target: float, lower_is_better: bool = True) -> str:
        good = value <= target if lower_is_better else value >= target
        return "ok" if good else "MISS"

    rows.append(
        (
            "import (paragraphs/s)",
            f"{r['import_pps']:,.0f}",
            f"parse {r['parse_s']:.2f}s + apply/commit {r['apply_commit_s']:.2f}s (cpu {r['import_cpu_s']:.2f}s)",
            f">= {TARGETS['import_pps']:,.0f} {ok(r['import_pps'], TARGETS['import_pps'], False)}",
        )
    )
    rows.append(
        (
            "cold start (s)",
            f"{r['cold_start_s']:.2f}",
            f"sqlite {r['db_mb']:.0f} MB, cpu {r['cold_start_cpu_s']:.2f}s",
            f"<= {TARGETS['cold_start_s']:.0f} {ok(r['cold_start_s'], TARGETS['cold_start_s'])}",
        )
    )
    rows.append(
        (
            "RSS after load (MB)",
            f"{r['rss_mb']:.0f}",
            f"peak {r['rss_peak_mb']:.0f} MB",
            f"<= {TARGETS['rss_mb']:.0f} {ok(r['rss_mb'], TARGETS['rss_mb'])}",
        )
    )
    for key, name, target in (
        ("resolve", "resolve", TARGETS["resolve_p50_ms"]),
        ("activate", "activate limit 20", TARGETS["activate_p50_ms"]),
        ("search5", "sources/search limit 5", TARGETS["search5_p50_ms"]),
        ("search200", "sources/search limit 200", None),
        ("bm25_5", "  bm25 core, limit 5", None),
        ("bm25_200", "  bm25 core, limit 200", None),
    ):
        m = r[key]
        verdict = f"p50 <= {target:.0f} ms {ok(m['p50_ms'], target)}" if target else ""
        rows.append(
            (
                f"{name} (ms)",
                f"p50 {m['p50_ms']:.3f}",
                f"p99 {m['p99_ms']:.3f}",
                f"{verdict}{'  ' if verdict else ''}(cpu p50 {m['cpu_p50_ms']:.3f})",
            )
        )
    engines = [eng for eng in BASELINES if eng in r]
    if engines:
        for eng in engines:
            e = r[eng]
            for lim in ("5", "200"):
                m = e[f"search{lim}"]
                rows.append(
                    (
                        f"{eng} limit {lim} (ms)",
                        f"p50 {m['p50_ms']:.3f}",
                        f"p99 {m['p99_ms']:.3f}",
                        f"index built in {e['build_s']:.1f}s" if lim == "5" else "",
                    )
                )
    width = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        lines.append("  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip())
    if engines:
        lines.append("")
        lines.append("ratios (ours / baseline, p50; p99 in brackets):")
        for eng in engines:
            for lim in ("5", "200"):
                b = r[eng][f"search{lim}"]
                full = r[f"search{lim}"]
                core = r[f"bm25_{lim}"]
                lines.append(
                    f"  vs {eng:7s} limit {lim:>3s}: sources/search {full['p50_ms'] / b['p50_ms']:.2f}x "
                    f"({full['p99_ms'] / b['p99_ms']:.2f}x), bm25 core {core['p50_ms'] / b['p50_ms']:.2f}x "
                    f"({core['p99_ms'] / b['p99_ms']:.2f}x)"
                )
        if "bm25s" in r:
            lines.append(f"  bm25s top-5 overlap with ours: {r['bm25s']['top5_overlap']:.1%}")
    lines.append(f"activate scored edges per query: p50 {r['activate_total_p50']:.0f}, max {r['activate_total_max']}")
    note = skipped_note(r)
    if note is not None:
        lines.append(note)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="taguru store benchmark")
    ap.add_argument("--size", default="1k", help="1k, 10k, 100k (or a paragraph count)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", default=None, help="write figures here (default bench/out/results-SIZE.json)")
    ap.add_argument("--skip-baselines", action="store_true", help="do not build tantivy / bm25s indexes")
    ap.add_argument("--keep", default=None, help="import into this directory and keep it")
    ap.add_argument("--phase", default="all", choices=["all", "query"], help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--context", default="bench", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.phase == "query":
        res = run_query_phase(Path(args.data), args.context, args.skip_baselines)
        print(json.dumps(res))
        return 0

    size = args.size
    tmp = None
    if args.keep:
        data_dir = Path(args.keep)
        data_dir.mkdir(parents=True, exist_ok=True)
        if (data_dir / "store").exists():
            raise SystemExit(f"{data_dir}/store exists; give an empty --keep directory")
    else:
        tmp = tempfile.TemporaryDirectory(prefix="taguru-bench-")
        data_dir = Path(tmp.name)
    try:
        print(f"[bench] generating and importing {size} ...", file=sys.stderr, flush=True)
        stats = run_import_phase(size if size in ("1k", "10k", "100k") else int(size), args.seed, data_dir)
        stats["size"] = size
        if not args.skip_baselines and missing_baselines():
            print(f"[bench] {skipped_note({'baselines_missing': missing_baselines()})}", file=sys.stderr, flush=True)
        print(
            f"[bench] imported in {stats['import_s']:.1f}s; querying in a fresh process ...",
            file=sys.stderr,
            flush=True,
        )
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--phase",
            "query",
            "--data",
            str(data_dir),
            "--context",
            stats["context"],
        ]
        if args.skip_baselines:
            cmd.append("--skip-baselines")
        child = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
        stats.update(json.loads(child.stdout.strip().splitlines()[-1]))
    finally:
        if tmp is not None:
            tmp.cleanup()
    stats["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    print(report(stats))
    out = Path(args.json) if args.json else ROOT / "bench" / "out" / f"results-{size}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"[bench] figures written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
