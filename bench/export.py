"""Export speed and memory on a generated corpus: offline (`taguru export`) and over HTTP.

    python bench/export.py --size 20000
    python bench/export.py --size 100000 --keep /tmp/export-bench

Imports the corpus of bench/generate.py into a fresh data dir (offline), then measures:
- offline: `taguru export NAME -o FILE` in a child process: wall time, MB/s, peak RSS;
- HTTP: a `taguru serve` child, `taguru export --url` to a file: wall time, MB/s, and the
  server's peak RSS (VmHWM) before and after the export (export reads the store, not the loaded
  context, so a cold context stays cold);
- both streams must be byte-identical.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PY = sys.executable
GENERATE = Path(__file__).resolve().parent / "generate.py"
CONTEXT = "bench"


def _env(data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    env.update({"TAGURU_DATA_DIR": str(data), **extra})
    return env


def _taguru(*args: str, env: dict[str, str]) -> tuple[float, float]:
    """Run a `taguru` command; (seconds, peak RSS of that child in MiB)."""
    start = time.perf_counter()
    child = subprocess.Popen([PY, "-m", "taguru_server.cli", *args], env=env, stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(child.pid, 0)
    took = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"taguru {args[0]} exited with {child.returncode}")
    return took, usage.ru_maxrss / 1024


def _hwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20000, help="paragraphs")
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="export-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    try:
        if not (data / "taguru.sqlite3").exists():
            # generated in a child: this process stays small, so its children's peak RSS is their own
            corpus = work / "corpus.jsonl"
            subprocess.run([PY, str(GENERATE), "--size", str(args.size), "--out", str(corpus)], check=True)
            took, _ = _taguru("import", str(corpus), env=_env(data))
            print(f"import: {corpus.stat().st_size / 1e6:.1f} MB of JSONL in {took:.1f}s")
        offline = work / "offline.jsonl"
        # a baseline: the same interpreter and imports, doing nothing
        _took, base_rss = _taguru("--version", env=_env(data))
        took, rss = _taguru("export", CONTEXT, "-o", str(offline), env=_env(data))
        size = offline.stat().st_size / 1e6
        print(
            f"offline: {size:.1f} MB in {took:.2f}s = {size / took:.1f} MB/s; "
            f"peak RSS {rss:.0f} MiB (the bare command: {base_rss:.0f} MiB)"
        )
        port = _port()
        server = subprocess.Popen(
            [PY, "-m", "taguru_server.cli", "serve"],
            env=_env(data, TAGURU_ADDR=f"127.0.0.1:{port}"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    urllib.request.urlopen(url + "/live", timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            before = _hwm(server.pid)
            remote = work / "remote.jsonl"
            took, _ = _taguru("export", CONTEXT, "--url", url, "-o", str(remote), env=_env(data))
            after = _hwm(server.pid)
            print(
                f"http: {size:.1f} MB in {took:.2f}s = {size / took:.1f} MB/s; "
                f"server peak RSS {before:.0f} MiB before, {after:.0f} MiB after"
            )
            same = remote.read_bytes() == offline.read_bytes()
            print(f"identical offline and http streams: {same}")
        finally:
            server.terminate()
            server.wait(timeout=30)
        return 0 if same else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
