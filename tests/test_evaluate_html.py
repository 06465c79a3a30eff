"""The HTML reports beside the artifacts: self-contained (no script, no external resource), and they
render in headless Chromium. Chromium is installed by .ci/run in CI; locally the render test skips
when it is absent (never when CI is set)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_evaluate_support import evaluate, seed, start, write_eval

pytestmark = pytest.mark.anyio

CASES = [
    {
        "case_id": "diversity-001",
        "query": "青嶺酒造",
        "cues": ["青嶺酒造"],
        "expected_sources": [{"source": "kura-a.md", "relevance": 3}, {"source": "kura-b.md", "relevance": 2}],
        "expected_citations": [{"source": "kura-a.md", "paragraph": 0, "quote": "霧沢町"}],
    },
    {"case_id": "miss-002", "query": "<b>not markup</b> & friends", "expected_sources": [{"source": "kura-c.md"}]},
]


async def _reports(tmp_path: Path) -> tuple[Path, Path]:
    live = await start(tmp_path)
    try:
        await seed(
            live,
            "sake",
            {
                "kura-a.md": "青嶺酒造は霧沢町の川沿いにある。",
                "kura-b.md": "青嶺酒造の仕込み水は山の伏流水である。",
                "kura-c.md": "高瀬は名の知れた職人として慕われている。",
            },
            associations=[
                {
                    "subject": "青嶺酒造",
                    "label": "杜氏",
                    "object": "高瀬",
                    "weight": 1.0,
                    "source": "kura-c.md",
                    "paragraph": 0,
                }
            ],
        )
        ev = write_eval(tmp_path / "eval.jsonl", CASES)
        common = ["--eval", ev, "--context", "sake", "--url", live.url, "--max-items", "10"]
        assert (await evaluate(*common, "--out", str(tmp_path / "base.json")))[0] == 0
        assert (await evaluate(*common, "--assembly", "--out", str(tmp_path / "head.json")))[0] == 0
    finally:
        await live.close()
    rc, _o, err = await evaluate(
        "compare", str(tmp_path / "base.json"), str(tmp_path / "head.json"), "--out", str(tmp_path / "changes.jsonl")
    )
    assert rc == 0, err
    return tmp_path / "head.html", tmp_path / "changes.html"


async def test_reports_are_self_contained(tmp_path: Path) -> None:
    run_html, compare_html = await _reports(tmp_path)
    for path in (run_html, compare_html):
        text = path.read_text(encoding="utf-8")
        assert text.startswith("<!DOCTYPE html>") and "<style>" in text and "<svg" in text
        assert "<script" not in text.lower() and not re.search(r"""(src|href)=["']?(https?:|//)""", text)
        assert "&lt;b&gt;not markup&lt;/b&gt; &amp; friends" in text or "miss-002" in text
        assert "<b>not markup</b>" not in text
        assert "青嶺酒造は霧沢町" not in text  # no corpus text
    compare = compare_html.read_text(encoding="utf-8")
    assert "BASE" in compare and "HEAD" in compare and 'class="base"' in compare and 'class="head"' in compare
    assert "diversity.sources" in compare and "diversity-001" in compare and "miss-002" in compare


async def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed (CI installs it via .ci/run)")
    _run_html, compare_html = await _reports(tmp_path)
    png = tmp_path / "report.png"
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--window-size=1280,1600",
            f"--screenshot={png}",
            compare_html.resolve().as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert png.exists(), proc.stderr.decode("utf-8", "replace")[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000, len(data)  # a blank page compresses to a few hundred bytes
