"""Two versions of the server, paired request by request on copies of one store.

    python bench/paired.py --before ../other-checkout --size 100k
    python bench/paired.py --before ../other-checkout --size 10k --requests 100 --rounds 2
    python bench/paired.py --before ../older-checkout --size 100k --import-each

For a change that must not make anything slower (a restructuring, a refactor), comparing two
separate runs of bench/evidence.py is at the mercy of whatever else the machine does between
them. This script generates the benchmark corpus once (bench/generate.py, seed 7), imports it
with this checkout's `taguru import`, copies the data dir, and starts `taguru serve` from each
checkout (`<checkout>/.venv/bin/taguru`, so each runs its own code) on its own copy. Then every
request is sent to both servers, in alternating order, and the two latencies form one pair; the
figure that matters is the median of the per-pair ratios after/before, which slow spells of the
machine affect both sides of alike. Each round starts both servers afresh with their start order
and ports swapped, so neither version keeps the advantage of a slot. Every pair of bodies must be
equal (ignoring the envelope's `time`): the script stops at the first difference.

Request kinds: evidence default (2 origins), evidence heavy (`search_limit` 200 + 3 labels + a
text fallback query), resolve (limit 5), sources/search (limit 5).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def _post(base: str, path: str, body: dict[str, Any]) -> tuple[float, bytes]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
    return (time.perf_counter() - t0) * 1000, raw


def _without_time(raw: bytes) -> Any:
    doc = json.loads(raw)
    doc.pop("time", None)
    return doc


def _wait_live(base: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"server at {base} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/live", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server at {base} did not come up")


def _serve(checkout: Path, data: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    env.update(TAGURU_DATA_DIR=str(data), TAGURU_ADDR=f"127.0.0.1:{port}")
    taguru = checkout / ".venv" / "bin" / "taguru"
    return subprocess.Popen(
        [str(taguru), "serve"], env=env, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _kinds(q: dict[str, list[Any]], n: int) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    from generate import CONTEXT

    root = f"/contexts/{CONTEXT}"
    pairs = q["pairs"][:n]
    search = q["search"][:n]
    return {
        "evidence, default": [(root + "/evidence", {"origins": p}) for p in pairs],
        "evidence, search_limit 200 + 3 labels": [
            (
                root + "/evidence",
                {"origins": p, "labels": ["杜氏", "創業", "仕込み水"], "search_limit": 200, "text_fallback_query": s},
            )
            for p, s in zip(pairs, search, strict=False)
        ],
        "resolve, limit 5": [(root + "/resolve", {"cue": p[0], "limit": 5}) for p in pairs],
        "sources/search, limit 5": [(root + "/sources/search", {"query": s, "limit": 5}) for s in search],
    }


def _paired(bases: tuple[str, str], requests: list[tuple[str, dict[str, Any]]], warmup: int) -> tuple[list[float], ...]:
    before: list[float] = []
    after: list[float] = []
    for i, (path, body) in enumerate(requests):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        took: dict[int, tuple[float, bytes]] = {}
        for side in order:
            took[side] = _post(bases[side], path, body)
        if _without_time(took[0][1]) != _without_time(took[1][1]):
            raise SystemExit(f"bodies differ for {path} request {i}")
        if i >= warmup:
            before.append(took[0][0])
            after.append(took[1][0])
    return before, after


def main() -> int:
    parser = argparse.ArgumentParser(description="paired before/after latency of two checkouts")
    parser.add_argument("--before", required=True, type=Path, help="the other checkout (with its own .venv)")
    parser.add_argument("--after", type=Path, default=ROOT, help="default: this checkout")
    parser.add_argument("--size", default="10k", choices=["1k", "10k", "100k"])
    parser.add_argument("--requests", type=int, default=180, help="timed requests per kind and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--import-each",
        action="store_true",
        help="each checkout imports the corpus with its own `taguru import` (for a before version that cannot "
        "read a store written by this one) instead of one import copied",
    )
    args = parser.parse_args()
    from generate import generate, queries

    corpus = generate(args.size, 7)
    qs = queries(corpus)
    rng = random.Random(5)
    world = corpus.world
    qs["pairs"] = [[rng.choice(world.breweries), rng.choice(world.toji)] for _ in range(400)]
    n = min(args.requests + args.warmup, len(qs["search"]), len(qs["pairs"]))
    with tempfile.TemporaryDirectory() as tmp:
        stream = Path(tmp) / "corpus.jsonl"
        stream.write_text(corpus.text, encoding="utf-8")
        data_a = Path(tmp) / "after"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
        env["TAGURU_DATA_DIR"] = str(data_a)
        t0 = time.perf_counter()
        subprocess.run(
            [str(args.after / ".venv" / "bin" / "taguru"), "import", str(stream)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(f"corpus {args.size}: {corpus.paragraphs} paragraphs, imported in {time.perf_counter() - t0:.1f} s")
        data_b = Path(tmp) / "before"
        if args.import_each:
            env["TAGURU_DATA_DIR"] = str(data_b)
            subprocess.run(
                [str(args.before / ".venv" / "bin" / "taguru"), "import", str(stream)],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        else:
            shutil.copytree(data_a, data_b)
        results: dict[str, tuple[list[float], list[float], list[float]]] = {}
        for round_no in range(args.rounds):
            # each round starts both servers afresh, in swapped start order and ports, so neither version
            # keeps the advantage of a slot (measured: the same code in the second slot ran 2-5 % slower)
            sides = [(args.before.resolve(), data_b), (args.after.resolve(), data_a)]
            ports = (8293, 8294) if round_no % 2 == 0 else (8294, 8293)
            order = (0, 1) if round_no % 2 == 0 else (1, 0)
            procs: dict[int, subprocess.Popen[bytes]] = {}
            for side in order:
                procs[side] = _serve(sides[side][0], sides[side][1], ports[side])
            bases = (f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}")
            try:
                for side in (0, 1):
                    _wait_live(bases[side], procs[side])
                for kind, reqs in _kinds(qs, n).items():
                    before, after = _paired(bases, reqs, args.warmup)
                    got = results.setdefault(kind, ([], [], []))
                    got[0].extend(before)
                    got[1].extend(after)
                    got[2].extend(a / b for a, b in zip(after, before, strict=True))
            finally:
                for proc in procs.values():
                    proc.terminate()
                    proc.wait()
    print(f"{'request':<40}{'before p50':>12}{'after p50':>12}{'median after/before':>22}")
    for kind, (before, after, ratios) in results.items():
        print(
            f"{kind:<40}{statistics.median(before):>12.2f}{statistics.median(after):>12.2f}"
            f"{statistics.median(ratios):>22.3f}"
        )
    print(f"({len(results[next(iter(results))][0])} pairs per kind; every pair of bodies equal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
