"""Process start to ready on a kept store: the persisted index against a rebuild from the rows.

    .venv/bin/python bench/startup.py --reuse /tmp/hubs          # a store bench/tails.py --keep imported
    .venv/bin/python bench/startup.py --reuse /tmp/hubs --workers 1,2 --start fork,exec --modes reused

For each mode, in one run on the same store:

- `rebuild`: `TAGURU_INDEX_DIR=off`: every load tokenizes every paragraph (the behaviour before
  indexes were persisted);
- `first`: the index directory emptied: the load tokenizes and writes the file;
- `reused`: the file from `first` is mapped.

`taguru serve` is started on the data dir (`store/` under `--reuse`, or the directory itself),
`/ready` polled every 0.1 s while the memory of the server's process tree is sampled every 0.1 s
(RSS summed, and PSS: shared pages divided among the processes that map them), then three evidence
requests are timed, `--requests N` more are sent (origins cycled: what a forked worker's private
pages grow with), and after 2 s the steady memory is read. Prints a table and writes the
figures as JSON (`--json`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOAD_FIELDS = (
    "duration_ms",
    "index",
    "index_reason",
    "index_tokenized_docs",
    "edges",
    "edges_reason",
    "lexicons",
    "lexicons_reason",
    "activation",
    "activation_reason",
)


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for child in children:
        out.extend(_tree(int(child)))
    return out


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes summed over the process tree."""
    rss = pss = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, pss


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _evidence(url: str, context: str, origin: str) -> tuple[int, float]:
    body = json.dumps({"origins": [origin]}).encode()
    req = urllib.request.Request(
        f"{url}/contexts/{context}/evidence", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, (time.perf_counter() - started) * 1000


def run_once(
    data: Path, workers: int, index: str, context: str, origins: list[str], start: str, requests: int = 0
) -> dict[str, Any]:
    from tails import _free_port  # this directory's helper (bench scripts run from here)

    port = _free_port()
    env = dict(os.environ, TAGURU_DATA_DIR=str(data), TAGURU_ADDR=f"127.0.0.1:{port}", TAGURU_LOG_FORMAT="json")
    env["TAGURU_WORKER_START"] = start
    if index == "rebuild":
        env["TAGURU_INDEX_DIR"] = "off"
    elif index == "first":
        shutil.rmtree(data / "indexes", ignore_errors=True)
    url = f"http://127.0.0.1:{port}"
    log = data.parent / f"startup-{index}-{workers}-{start}.log"
    started = time.monotonic()
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            # the worker count as the README passes it (`serve --workers N`), not through the environment
            [sys.executable, "-m", "taguru_server.cli", "serve", "--workers", str(workers)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    peak = [0, 0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            rss, pss = _memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    listening = ready = None
    try:
        while ready is None:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited: see {log}")
            try:
                status = _get(url + "/ready")
            except OSError:
                time.sleep(0.1)
                continue
            now = time.monotonic() - started
            listening = listening if listening is not None else now
            if status == 200:
                ready = now
            else:
                time.sleep(0.1)
        first = [_evidence(url, context, o) for o in origins[:3]]
        for i in range(requests):  # then a stretch of traffic (what a worker's private pages grow with)
            _evidence(url, context, origins[i % len(origins)])
        time.sleep(2.0)
        steady = _memory(proc.pid)
    finally:
        sampling.set()
        sampler.join()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    loaded = [json.loads(line) for line in log.read_text().splitlines() if '"context.loaded"' in line]
    return {
        "index": index,
        "workers": workers if workers == 1 else f"{workers} {start}",
        "listening_s": round(listening or 0.0, 2),
        "ready_s": round(ready, 2),
        "first_evidence": [(s, round(ms, 1)) for s, ms in first],
        "steady_rss_mib": steady[0] >> 20,
        "steady_pss_mib": steady[1] >> 20,
        "peak_rss_mib": peak[0] >> 20,
        "peak_pss_mib": peak[1] >> 20,
        "loads": [{k: e.get(k) for k in LOAD_FIELDS} for e in loaded],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="process start to ready, persisted index against a rebuild")
    ap.add_argument("--reuse", required=True, help="a kept store (bench/tails.py --keep, or a data dir)")
    ap.add_argument("--workers", default="1", help="comma-separated worker counts, each run in every mode")
    ap.add_argument("--start", default="fork", help="TAGURU_WORKER_START for runs with several workers: fork, exec")
    ap.add_argument("--modes", default="rebuild,first,reused")
    ap.add_argument("--context", default="bench")
    ap.add_argument("--origins", default=None, help="comma-separated evidence origins (default: from queries.json)")
    ap.add_argument("--requests", type=int, default=0, help="evidence requests sent after the first three")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    base = Path(args.reuse)
    data = base / "store" if (base / "store").is_dir() else base
    origins = ["hub-0000", "e000001", "e000002"]
    queries = base / "queries.json"
    if queries.exists():
        pairs = json.loads(queries.read_text(encoding="utf-8")).get("pairs", [])
        origins = [p[0] for p in pairs] or origins
    if args.origins:
        origins = args.origins.split(",")
    rows = [
        run_once(data, int(n), mode, args.context, origins, start, args.requests)
        for n in args.workers.split(",")
        for start in (args.start.split(",") if n != "1" else ["fork"])
        for mode in args.modes.split(",")
    ]
    print(f"{'index':8} {'workers':>8} {'listen s':>8} {'ready s':>8} {'first evidence ms':>24} "
          f"{'steady RSS':>10} {'steady PSS':>10} {'peak RSS':>9} {'peak PSS':>9}")  # fmt: skip
    for r in rows:
        ev = ", ".join(f"{ms:g}" if s == 200 else f"{s}" for s, ms in r["first_evidence"])
        print(
            f"{r['index']:8} {r['workers']:>8} {r['listening_s']:>8} {r['ready_s']:>8} {ev:>24} "
            f"{r['steady_rss_mib']:>10} {r['steady_pss_mib']:>10} {r['peak_rss_mib']:>9} {r['peak_pss_mib']:>9}"
        )
        for load in r["loads"]:
            print(f"         load: {load}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
