"""`taguru evaluate --assembly --graph-passages`: the flag reaches the request and the artifact's inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_evaluate_support import evaluate, load, seed, start, write_eval

from taguru_server.cli.main import main as taguru_main

pytestmark = pytest.mark.anyio

CASE = {
    "case_id": "two-hop-001",
    "query": "青嶺酒造の杜氏はどこに所属していますか",
    "cues": ["青嶺酒造"],
    "expected_sources": [{"source": "corpus/toji.md", "relevance": 3}],
    "expected_citations": [{"source": "corpus/toji.md", "paragraph": 0}],
}


async def run_once(tmp_path: Path, *flags: str) -> dict:
    live = await start(tmp_path)
    try:
        await seed(
            live,
            "sake",
            {
                "corpus/kura.md": "青嶺酒造の杜氏は高瀬である。",
                "corpus/toji.md": "高瀬は南部の組合員である。",
                "corpus/shop.md": "青嶺酒造 青嶺酒造 青嶺酒造の取扱店。",
            },
            associations=[
                {
                    "subject": "青嶺酒造",
                    "label": "杜氏",
                    "object": "高瀬",
                    "weight": 1.0,
                    "source": "corpus/kura.md",
                    "paragraph": 0,
                },
                {
                    "subject": "高瀬",
                    "label": "所属",
                    "object": "南部組合",
                    "weight": 1.0,
                    "source": "corpus/toji.md",
                    "paragraph": 0,
                },
            ],
        )
        ev = write_eval(tmp_path / "eval.jsonl", [CASE])
        out = tmp_path / "r.json"
        rc, _stdout, err = await evaluate(
            "--eval", ev, "--context", "sake", "--url", live.url, "--assembly", *flags, "--out", str(out)
        )
    finally:
        await live.close()
    assert rc == 0, err
    return load(out)


async def test_the_flag_is_recorded_and_asks_for_the_lane(tmp_path: Path) -> None:
    on = await run_once(tmp_path / "on", "--graph-passages", "--max-items", "2")
    assert on["inputs"]["graph_passages"] is True
    served = [(i.get("source"), i.get("paragraph")) for i in on["cases"][0]["evidence"]["items"]]
    assert ("corpus/toji.md", 0) in served  # the second hop, found by the graph lane
    off = await run_once(tmp_path / "off", "--max-items", "2")
    assert "graph_passages" not in off["inputs"]
    served = [(i.get("source"), i.get("paragraph")) for i in off["cases"][0]["evidence"]["items"]]
    assert ("corpus/toji.md", 0) not in served


def test_the_flag_requires_assembly(capsys) -> None:
    assert taguru_main(["evaluate", "--eval", "e", "--context", "c", "--graph-passages"]) == 2
    assert "--graph-passages requires --assembly" in capsys.readouterr().err
