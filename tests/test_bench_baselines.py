"""`bench/run.py`, the first command of docs/performance.md, runs without the `bench` extra: the tantivy
and bm25s comparisons are skipped, and the report says which and how to install them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from process_support import PYTHON, ROOT

# the two baseline engines made unimportable, whether or not this environment has the extra
BLOCK = "import sys\nsys.modules['tantivy'] = None\nsys.modules['bm25s'] = None\n"


@pytest.mark.slow
def test_the_store_bench_runs_without_the_baselines(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK, encoding="utf-8")
    out = tmp_path / "results.json"
    ran = subprocess.run(
        [PYTHON, "bench/run.py", "--size", "200", "--json", str(out)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    note = (
        "skipped: the tantivy and bm25s comparison(s) (not installed); install them with: "
        ".venv/bin/pip install -e '.[bench]'"
    )
    assert note in ran.stdout.splitlines() and f"[bench] {note}" in ran.stderr
    assert "Traceback" not in ran.stderr and "sources/search limit 5 (ms)" in ran.stdout
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["baselines_missing"] == ["tantivy", "bm25s"] and "tantivy" not in figures
