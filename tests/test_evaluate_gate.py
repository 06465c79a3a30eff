"""The CI gate on the shipped example (examples/sake): at equal budget, deterministic evidence assembly
must pass the example's thresholds and score at least the baseline's citation recall and source
diversity; `compare` of the two runs is part of the check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_evaluate_support import EXAMPLE, FORBIDDEN, evaluate, import_example, load, start

from taguru_server.evaluate.evalfile import load_eval

pytestmark = pytest.mark.anyio
BUDGET = ["--max-items", "40", "--max-bytes", "65536", "--max-tokens", "4000"]


def test_example_shape() -> None:
    corpus = [json.loads(x) for x in (EXAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if x]
    passages = [r["passage"] for r in corpus if "passage" in r]
    paragraphs = [p for text in passages for p in text.split("\n\n")]
    assert len(paragraphs) >= 40 and len(passages) >= 5
    assert any(r.get("kind") == "concept" for r in corpus if "alias" in r)
    assert any(all(ord(ch) < 128 for ch in p) for p in paragraphs)  # English
    assert any(any(ord(ch) > 0x3000 for ch in p) for p in paragraphs)  # Japanese
    cases = load_eval(str(EXAMPLE / "eval.jsonl")).cases
    assert len(cases) >= 30
    assert sum(1 for c in cases if c.expected_citations) >= 20
    assert any(c.expected_citations and any(x.quote for x in c.expected_citations) for c in cases)
    assert any(c.expected_associations for c in cases) and any(c.expected_concepts for c in cases)


async def test_assembly_gate_at_equal_budget(tmp_path: Path) -> None:
    live = await start(tmp_path)
    try:
        await import_example(live)
        common = [
            "--eval",
            str(EXAMPLE / "eval.jsonl"),
            "--context",
            "sake",
            "--url",
            live.url,
            *BUDGET,
            "--thresholds",
            str(EXAMPLE / "thresholds.json"),
        ]
        base_out, asm_out = tmp_path / "baseline.json", tmp_path / "assembly.json"
        rc_base, _o, err_base = await evaluate(*common, "--out", str(base_out))
        rc_asm, stdout, err_asm = await evaluate(*common, "--assembly", "--out", str(asm_out))
        seen = list(live.seen)
    finally:
        await live.close()
    assert rc_base in (0, 3), err_base
    base, asm = load(base_out), load(asm_out)
    assert rc_asm == 0, (stdout, err_asm, asm["thresholds"])
    assert asm["thresholds"]["passed"] is True and asm["corpus"]["stable"] is True
    assert (
        asm["inputs"]["budget"] == base["inputs"]["budget"] == {"max_items": 40, "max_bytes": 65536, "max_tokens": 4000}
    )
    bm, am = base["metrics"], asm["metrics"]
    assert am["passage.failure_rate"]["value"] == 0.0 and bm["passage.failure_rate"]["value"] == 0.0
    assert am["citations.recall"]["n"] == bm["citations.recall"]["n"] > 0
    assert am["citations.recall"]["mean"] >= bm["citations.recall"]["mean"]
    assert am["diversity.sources"]["mean"] >= bm["diversity.sources"]["mean"]
    assert all(c["budget"]["tokens_used"] <= 4000 for c in base["cases"] + asm["cases"])
    assert not any(p.endswith(f) for _m, p in seen for f in FORBIDDEN)

    changes = tmp_path / "changes.jsonl"
    rc, stdout, stderr = await evaluate("compare", str(base_out), str(asm_out), "--out", str(changes))
    assert rc == 0, stderr
    header = json.loads(changes.read_text(encoding="utf-8").splitlines()[0])
    assert not any(w.startswith("budget differs") for w in header.get("warnings", []))
    assert not any(w.startswith("context differs") or "revision_after" in w for w in header.get("warnings", []))
    deltas = {m["metric"]: m["delta"] for m in header["metrics"]}
    assert deltas["citations.recall"] >= 0 and deltas["diversity.sources"] >= 0
    assert header["counts"]["cases_base"] == header["counts"]["cases_head"] == len(base["cases"])
    assert stdout.startswith(f"evaluate compare: {len(base['cases'])} case(s) in BASE, ")

    # privacy: no paragraph of the corpus reaches an artifact or a report
    corpus = [json.loads(x) for x in (EXAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if x]
    paragraphs = [p for r in corpus if "passage" in r for p in r["passage"].split("\n\n")]
    for path in (
        base_out,
        asm_out,
        changes,
        base_out.with_suffix(".html"),
        asm_out.with_suffix(".html"),
        changes.with_suffix(".html"),
    ):
        text = path.read_text(encoding="utf-8")
        leaked = [p for p in paragraphs if p in text]
        assert not leaked, (path.name, leaked[:1])
