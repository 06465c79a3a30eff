"""`taguru evaluate compare`: tolerant loading, classification, warnings and changes.jsonl (pure files)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from test_evaluate_support import evaluate

from taguru_server.evaluate.metrics import definitions

pytestmark = pytest.mark.anyio


def _case(
    cid: str, recall: float | None = 1.0, cites: float | None = None, diversity: int | None = 2, latency: int = 5
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "case_id": cid,
        "query": "q",
        "limit": 10,
        "passage": {"outcome": "searched", "hits": [], "latency_ms": latency},
    }
    if recall is not None:
        c["recall"] = {
            "recall_at_k": recall,
            "mrr": recall,
            "ndcg": recall,
            "expected_total": 1,
            "matched": int(recall > 0),
        }
    if cites is not None:
        c["citations"] = {
            "recall": {"expected_total": 1, "matched": 1, "value": cites},
            "validity": {"expected_total": 1, "valid": 1, "value": 1.0},
            "checks": [],
        }
    c["missed"], c["missed_truncated"] = [], 0
    if diversity is not None:
        c["diversity_sources"] = diversity
    return c


def _doc(cases: list[dict[str, Any]], budget: dict[str, int] | None = None, **over: Any) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for m, d in definitions().items():
        metrics[m] = (
            {"n": 0, "min": None, "p50": None, "p90": None, "p99": None, "max": None, "mean": None, "sum": None}
            if d["statistic"] == "distribution"
            else {"value": None, "n": 0, "numerator": None}
        )
    recalls = [c["recall"]["recall_at_k"] for c in cases if "recall" in c]
    if recalls:
        metrics["recall.recall_at_k"] = dict(
            metrics["recall.recall_at_k"], n=len(recalls), mean=sum(recalls) / len(recalls)
        )
    metrics["passage.failure_rate"] = {"value": 0.0, "n": len(cases), "numerator": 0}
    inputs: dict[str, Any] = {"context": "sake", "mode": "baseline"}
    if budget is not None:
        inputs["budget"] = budget
    doc = {
        "taguru_evaluation": 1,
        "generated_at": "2026-01-01T00:00:00Z",
        "inputs": inputs,
        "corpus": {"revision_after": {"graph": 1, "passages": 1, "config": 0}, "stable": True},
        "thresholds": None,
        "definitions": definitions(),
        "cases": cases,
        "metrics": metrics,
    }
    doc.update(over)
    return doc


def _write(path: Path, doc: Any) -> str:
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return str(path)


async def _compare(tmp_path: Path, base: Any, head: Any) -> tuple[int, str, str, list[dict[str, Any]]]:
    b, h = _write(tmp_path / "base.json", base), _write(tmp_path / "head.json", head)
    out = tmp_path / "changes.jsonl"
    rc, stdout, stderr = await evaluate("compare", b, h, "--out", str(out))
    lines = []
    if out.exists():
        raw = out.read_text(encoding="utf-8")
        assert raw.endswith("\n")
        lines = [json.loads(x) for x in raw.splitlines()]
    return rc, stdout, stderr, lines


async def test_classification_and_output(tmp_path: Path) -> None:
    base = _doc(
        [
            _case("b-up", 0.5),
            _case("a-down", 1.0, cites=1.0),
            _case("same", 1.0, latency=1),
            _case("gone", 1.0),
            _case("mixed", 0.5, diversity=3),
            _case("tiny", 0.5),
        ]
    )
    head = _doc(
        [
            _case("b-up", 1.0),
            _case("a-down", 1.0, cites=0.5),
            _case("same", 1.0, latency=99),
            _case("new", 0.0),
            _case("mixed", 1.0, diversity=2),
            _case("tiny", 0.5 + 1e-12),
        ]
    )
    rc, stdout, stderr, lines = await _compare(tmp_path, base, head)
    assert rc == 0 and stderr == ""
    header, *records = lines
    assert list(header) == ["kind", "taguru_evaluation_changes", "generated_at", "base", "head", "counts", "metrics"]
    assert header["kind"] == "header" and header["taguru_evaluation_changes"] == 1
    assert header["counts"] == {
        "improved": 1,
        "regressed": 2,
        "added": 1,
        "removed": 1,
        "unchanged": 2,
        "cases_base": 6,
        "cases_head": 6,
    }
    assert header["base"] == {
        "path": str(tmp_path / "base.json"),
        "context": "sake",
        "taguru_evaluation": 1,
        "generated_at": "2026-01-01T00:00:00Z",
        "corpus_revision_after": {"graph": 1, "passages": 1, "config": 0},
        "corpus_stable": True,
        "thresholds_sha256": None,
    }
    assert [(r["kind"], r["case_id"]) for r in records] == [
        ("regressed", "a-down"),
        ("improved", "b-up"),
        ("removed", "gone"),
        ("regressed", "mixed"),
        ("added", "new"),
    ]
    down = records[0]["metrics"]
    assert down == [
        {"metric": "citations.recall", "sides": {"base": 1.0, "head": 0.5}, "delta": -0.5, "direction": "regressed"}
    ]
    mixed = {m["metric"]: m["direction"] for m in records[3]["metrics"]}
    assert mixed == {
        "diversity.sources": "regressed",
        "recall.mrr": "improved",
        "recall.ndcg": "improved",
        "recall.recall_at_k": "improved",
    }
    added = records[4]["metrics"]
    assert all(m["delta"] is None and m["direction"] == "not_comparable" and m["sides"]["base"] is None for m in added)
    assert {m["metric"] for m in added} == {"recall.recall_at_k", "recall.mrr", "recall.ndcg", "diversity.sources"}
    metric_names = [m["metric"] for m in header["metrics"]]
    assert metric_names == ["passage.failure_rate", "recall.recall_at_k"]  # both-null metrics are skipped
    rk = header["metrics"][1]
    assert rk["statistic"] == "distribution" and rk["sides"]["base"] == pytest.approx(4.5 / 6)
    assert stdout.startswith(
        "evaluate compare: 6 case(s) in BASE, 6 in HEAD — 1 improved, 2 regressed, 1 added, 1 removed, 2 unchanged\n"
    )
    assert "  regressed: a-down: citations.recall -0.5000\n" in stdout
    assert f"  wrote {tmp_path / 'changes.jsonl'}\n" in stdout
    assert (tmp_path / "changes.html").exists()


async def test_warnings_in_order(tmp_path: Path) -> None:
    base = _doc(
        [_case("x", 1.0, cites=1.0), _case("x", 0.5), _case("y", 1.0)],
        budget={"max_items": 40, "max_bytes": 65536, "max_tokens": 4000},
        corpus={"revision_after": {"graph": 1}, "stable": False},
        thresholds={"sha256": "ab" * 32, "passed": True},
    )
    head = _doc(
        [_case("x", 0.5, cites=1.0), _case("y", 1.0, diversity=None)], inputs={"context": "other", "mode": "assembly"}
    )
    head["definitions"] = copy.deepcopy(head["definitions"])
    del head["definitions"]["recall.recall_at_k"]
    head["definitions"]["passage.failure_rate"]["statistic"] = "histogram"
    head["metrics"]["budget.items_used"] = 7
    rc, _o, stderr, lines = await _compare(tmp_path, base, head)
    assert rc == 0
    expected = [
        "context differs: BASE 'sake' vs HEAD 'other'",
        "corpus.revision_after differs between BASE and HEAD",
        f"{tmp_path / 'base.json'}: corpus.stable is false — a write landed mid-run",
        f"thresholds file identity differs: BASE {'ab' * 6} vs HEAD none",
        "budget differs: BASE max_items=40 max_bytes=65536 max_tokens=4000 vs HEAD none (untruncated baseline) — "
        "not an equal-budget comparison",
        "BASE: duplicate case_id 'x' — using the last occurrence",
        "case 'x': metric 'citations.recall' has a value on only one side — excluded from classification",
        "case 'x': metric 'citations.locator_validity' has a value on only one side — excluded from classification",
        "case 'y': metric 'diversity.sources' has a value on only one side — excluded from classification",
        "HEAD: metric 'budget.items_used': a distribution value must be an object",
        "HEAD: metric 'passage.failure_rate': definitions names unknown statistic 'histogram'",
        "HEAD: metric 'recall.recall_at_k' has no definitions entry — skipped from the aggregate diff",
    ]
    assert lines[0]["warnings"] == expected
    assert stderr == "".join(f"taguru: evaluate: {w}\n" for w in expected)
    # the last duplicate wins: x is 0.5 in both runs, so only one-sided metrics differ → unchanged
    assert lines[0]["counts"]["unchanged"] == 2 and len(lines) == 1


async def test_equal_budgets_do_not_warn(tmp_path: Path) -> None:
    budget = {"max_items": 3, "max_bytes": 4096, "max_tokens": 200}
    base = _doc([_case("x")], budget=budget, inputs={"context": "sake", "mode": "baseline", "budget": budget})
    head = _doc([_case("x")], inputs={"context": "sake", "mode": "assembly", "budget": dict(budget)})
    rc, _o, stderr, lines = await _compare(tmp_path, base, head)
    assert rc == 0 and stderr == "" and "warnings" not in lines[0]


async def test_tolerant_loading_and_load_errors(tmp_path: Path) -> None:
    # every field optional, unknown fields ignored
    rc, _o, _e, lines = await _compare(
        tmp_path,
        {"taguru_evaluation": 1, "future": {"x": 1}},
        {"taguru_evaluation": 1, "cases": [{"case_id": "z", "extra": True}]},
    )
    assert rc == 0 and lines[0]["counts"]["added"] == 1 and lines[1] == {"kind": "added", "case_id": "z", "metrics": []}
    rc, _o, err, _l = await _compare(tmp_path, {"cases": []}, {"taguru_evaluation": 1})
    assert rc == 2 and err == (
        f"taguru: evaluate: BASE {tmp_path / 'base.json'}: taguru_evaluation must be within 1..=1, got 0\n"
    )
    rc, _o, err, _l = await _compare(tmp_path, {"taguru_evaluation": 1}, {"taguru_evaluation": 2})
    assert rc == 2 and "HEAD " in err and "got 2" in err
    (tmp_path / "bad.json").write_text("{nope", encoding="utf-8")
    rc, _o, err = await evaluate("compare", str(tmp_path / "bad.json"), str(tmp_path / "bad.json"))
    assert rc == 2 and err.startswith(f"taguru: evaluate: BASE {tmp_path / 'bad.json'}: malformed evaluation.json: ")
    rc, _o, err = await evaluate("compare", str(tmp_path / "base.json"), str(tmp_path / "missing.json"))
    assert rc == 2 and err.startswith(f"taguru: evaluate: HEAD reading {tmp_path / 'missing.json'}: ")
    _write(tmp_path / "ok.json", {"taguru_evaluation": 1})
    rc, _o, err = await evaluate(
        "compare", str(tmp_path / "ok.json"), str(tmp_path / "ok.json"), "--out", str(tmp_path / "no" / "dir.jsonl")
    )
    assert rc == 1 and f"writing {tmp_path / 'no' / 'dir.jsonl'}" in err


async def test_ratio_is_never_read_as_a_distribution(tmp_path: Path) -> None:
    base, head = _doc([]), _doc([])
    base["metrics"]["lanes.both"] = {"value": 0.25, "n": 4, "numerator": 1, "mean": 99.0}
    head["metrics"]["lanes.both"] = {"value": 0.5, "n": 4, "numerator": 2, "mean": -99.0}
    rc, _o, _e, lines = await _compare(tmp_path, base, head)
    (m,) = [x for x in lines[0]["metrics"] if x["metric"] == "lanes.both"]
    assert rc == 0 and m == {
        "metric": "lanes.both",
        "statistic": "ratio",
        "sides": {"base": 0.25, "head": 0.5},
        "delta": 0.25,
    }
