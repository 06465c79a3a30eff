"""`taguru evaluate` against a real server over loopback: the spec's fixtures A, B and C (our own
sentences), budgets, truncation parity with the evidence endpoint, privacy and exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_evaluate_support import FORBIDDEN, Live, evaluate, load, seed, start, write_eval

from taguru_server.server.providers.reranker import RerankSettings

pytestmark = pytest.mark.anyio
REPORT_ONLY = "taguru: evaluate: no --thresholds given — this run is report-only and always exits 0\n"

BREWERY = "青嶺は青嶺酒造が造る銘柄で、蔵の名を冠している。"


async def _fixture_a(live: Live, token: str | None = None) -> None:
    await seed(
        live,
        "sake",
        {"corpus/brewery.md": BREWERY},
        associations=[
            {
                "subject": "青嶺酒造",
                "label": "醸造元",
                "object": "蔵元",
                "weight": 1.0,
                "source": "corpus/brewery.md",
                "paragraph": 0,
            }
        ],
        token=token,
    )


BRAND_CASE = {
    "case_id": "brand-origin-001",
    "query": "青嶺",
    "cues": ["青嶺"],
    "expected_sources": [{"source": "corpus/brewery.md", "relevance": 3}],
    "expected_concepts": ["青嶺酒造"],
    "expected_associations": [{"subject": "青嶺酒造", "label": "醸造元", "object": "蔵元"}],
    "expected_citations": [{"source": "corpus/brewery.md", "paragraph": 0, "quote": "青嶺酒造"}],
}


def _paths(live: Live) -> list[str]:
    return [p for _m, p in live.seen]


async def test_fixture_a_smoke(tmp_path: Path) -> None:
    live = await start(tmp_path)
    try:
        await _fixture_a(live)
        ev = write_eval(tmp_path / "eval.jsonl", [BRAND_CASE], name="smoke")
        out = tmp_path / "evaluation.json"
        rc, stdout, stderr = await evaluate(
            "--eval", ev, "--context", "sake", "--url", live.url + "/", "--out", str(out)
        )
    finally:
        await live.close()
    assert rc == 0, stderr
    assert stderr.startswith(f"evaluate → {live.url}\n") and stderr.endswith(REPORT_ONLY)
    assert stdout.startswith(f"taguru evaluate: {live.url} / context 'sake'\n") and f"  wrote {out}\n" in stdout
    doc = load(out)
    assert list(doc) == [
        "taguru_evaluation",
        "generated_at",
        "matching",
        "inputs",
        "corpus",
        "thresholds",
        "definitions",
        "cases",
        "metrics",
    ]
    assert doc["taguru_evaluation"] == 1 and doc["thresholds"] is None
    assert doc["matching"] == {
        "normalization": "taguru::context::normalize_entry",
        "normalized": ["expected_concepts", "expected_labels"],
        "sources": "exact (source, paragraph) match — no normalization",
    }
    assert doc["inputs"] == {
        "eval": {"path": ev, "name": "smoke", "cases": 1},
        "context": "sake",
        "url": live.url,
        "out": str(out),
        "default_limit": 10,
        "resolve_limit": 5,
        "mode": "baseline",
    }
    corpus = doc["corpus"]
    assert corpus["stable"] is True and corpus["revision_before"] == corpus["revision_after"]
    assert corpus["sources_count"] == 1 and list(corpus)[-1] == "sources_count"
    (case,) = doc["cases"]
    assert list(case) == [
        "case_id",
        "query",
        "cues",
        "limit",
        "passage",
        "structural",
        "recall",
        "coverage",
        "lane_cross",
        "citations",
        "missed",
        "missed_truncated",
        "diversity_sources",
    ]
    p = case["passage"]
    assert p["outcome"] == "searched" and list(p) == ["outcome", "plan", "hits", "latency_ms"]
    assert p["plan"]["lanes"]["vector"] == {"ran": False, "reason": "no embedding provider is configured"}
    assert p["plan"]["lanes"]["bm25"] == {"ran": True} and p["plan"]["context"] == "sake"
    assert [(h["source"], h["paragraph"]) for h in p["hits"]] == [("corpus/brewery.md", 0)]
    assert list(p["hits"][0]) == ["source", "paragraph", "score", "lanes"] and "bm25" in p["hits"][0]["lanes"]
    assert "budget" not in case and "evidence" not in case
    assert case["recall"] == {"recall_at_k": 1.0, "mrr": 1.0, "ndcg": 1.0, "expected_total": 1, "matched": 1}
    assert case["coverage"] == {
        "concepts": {"expected": 1, "matched": 1, "value": 1.0},
        "associations": {"expected": 1, "matched": 1, "value": 1.0},
    }
    assert case["lane_cross"] == {"structural_hit": True, "passage_hit": True}
    (cue,) = case["structural"]["cues"]
    assert cue["cue"] == "青嶺" and cue["kind"] == "concept" and cue["resolved_names"] == ["青嶺酒造"]
    assert cue["tier"] == "lexical" and cue["limit"] == 5
    (probe,) = case["structural"]["associations"]
    assert [probe[k]["outcome"] for k in ("subject", "label", "object")] == ["resolved"] * 3
    assert probe["query"]["outcome"] == "queried" and probe["query"]["total"] == 1
    assert probe["query"]["attributions"] == [{"source": "corpus/brewery.md", "paragraph": 0}]
    (check,) = case["citations"]["checks"]
    assert check["outcome"] == "resolved" and check["served"] is True
    assert check["section"] == {"check": "not_checked"} and check["quote"] == {"declared": "青嶺酒造", "matched": True}
    assert case["citations"]["recall"]["value"] == 1.0 and case["citations"]["validity"]["value"] == 1.0
    assert case["missed"] == [] and case["missed_truncated"] == 0 and case["diversity_sources"] == 1
    m = doc["metrics"]
    assert len(m) == 31 and list(m) == sorted(m)
    assert m["lanes.both"] == {"value": 1.0, "n": 1, "numerator": 1}
    assert m["latency.evidence_ms"]["n"] == 0 and m["budget.omitted_rate"]["value"] is None
    for key in (
        "recall.recall_at_k",
        "recall.mrr",
        "recall.ndcg",
        "coverage.concepts",
        "coverage.associations",
        "citations.recall",
        "citations.locator_validity",
    ):
        assert m[key]["mean"] == 1.0, key
    text = out.read_text(encoding="utf-8")
    assert BREWERY not in text and '"text"' not in text and not text.endswith("\n")
    seen = _paths(live)
    assert "/contexts/sake/resolve" in seen and "/contexts/sake/query" in seen
    assert not any(p.endswith(f) for p in seen for f in FORBIDDEN)


async def test_fixture_a_variants(tmp_path: Path) -> None:
    canary = "canary-token-6f1d2c"
    live = await start(tmp_path, env={"TAGURU_API_TOKEN": canary})
    env = {"TAGURU_API_TOKEN": canary}
    try:
        await _fixture_a(live, token=canary)
        await live.call(
            "POST",
            "/contexts/sake/associations",
            [
                {"subject": "京都", "label": "位置", "object": "関西", "weight": 1.0},
                {"subject": "東京都", "label": "分類", "object": "日本の首都", "weight": 1.0},
            ],
            token=canary,
        )
        unknown = dict(BRAND_CASE, expected_sources=[{"source": "corpus/nowhere.md", "relevance": 0}])
        ev = write_eval(tmp_path / "unknown.jsonl", [unknown])
        rc, _o, err = await evaluate(
            "--eval", ev, "--context", "sake", "--url", live.url, "--out", str(tmp_path / "u.json"), env=env
        )
        assert rc == 2 and not (tmp_path / "u.json").exists()
        assert err.endswith(
            "taguru: evaluate: case 'brand-origin-001': expected_sources names "
            "'corpus/nowhere.md', which 'sake' does not carry\n"
        )

        ambiguous = dict(
            BRAND_CASE,
            case_id="ambiguous-002",
            expected_associations=[{"subject": "京都", "label": "位置", "object": "関西"}],
        )
        ev = write_eval(tmp_path / "amb.jsonl", [ambiguous])
        rc, _o, err = await evaluate(
            "--eval", ev, "--context", "sake", "--url", live.url, "--out", str(tmp_path / "a.json"), env=env
        )
        assert rc == 0, err
        (probe,) = load(tmp_path / "a.json")["cases"][0]["structural"]["associations"]
        assert probe["subject"]["outcome"] == "ambiguous" and sorted(probe["subject"]["candidates"]) == [
            "京都",
            "東京都",
        ]
        assert "query" not in probe
        assert load(tmp_path / "a.json")["cases"][0]["missed"] == [
            "expected_associations: (京都, 位置, 関西) query never ran (a position did not pin)"
        ]

        thresholds = tmp_path / "t.json"
        thresholds.write_text(
            '{"taguru_evaluate_thresholds": 1, "cases": {"default": {"latency.passage_ms": {"min": 999999}}}}',
            encoding="utf-8",
        )
        ev = write_eval(tmp_path / "e.jsonl", [BRAND_CASE])
        out = tmp_path / "gate.json"
        rc, stdout, err = await evaluate(
            "--eval",
            ev,
            "--context",
            "sake",
            "--url",
            live.url,
            "--out",
            str(out),
            "--thresholds",
            str(thresholds),
            env=env,
        )
        assert rc == 3, err
        report = load(out)["thresholds"]
        assert report["passed"] is False and len(report["sha256"]) == 64
        (v,) = report["violations"]
        assert v["scope"] == "case" and v["case_id"] == "brand-origin-001" and v["metric"] == "latency.passage_ms"
        assert v["bound"] == "min" and v["threshold"] == 999999 and v["reason"].endswith(" < min 999999.000000")
        assert f"  thresholds: FAIL — 1 violation(s) (sha256 {report['sha256'][:12]}…)" in stdout
        assert "    [case brand-origin-001] latency.passage_ms: " in stdout
        for path in (out, out.with_suffix(".html")):
            assert canary not in path.read_text(encoding="utf-8")
        # without the token the server refuses: the run cannot complete
        rc, _o, err = await evaluate(
            "--eval", ev, "--context", "sake", "--url", live.url, "--out", str(tmp_path / "x.json")
        )
        assert rc == 1 and " answered 401: " in err and not (tmp_path / "x.json").exists()
    finally:
        await live.close()


async def _fixture_b(live: Live) -> None:
    await seed(
        live,
        "sake",
        {
            "corpus/brewery.md": BREWERY,
            "corpus/filter-a.md": "共通見出し語句のあとに蔵の話が続く。",
            "corpus/filter-b.md": "共通見出し語句のあとに原料の話が続く。",
            "corpus/ledger.md": "帳簿には古い取引の記録が残る。",
            "corpus/unrelated.md": "今日は朝から晴れて風が弱い。",
        },
        tags={"corpus/filter-a.md": ["蔵"], "corpus/filter-b.md": ["原料"]},
        sections={"corpus/brewery.md": [{"paragraph": 0, "section": "由来"}]},
        associations=[
            {
                "subject": "青嶺酒造",
                "label": "醸造元",
                "object": "蔵元",
                "weight": 1.0,
                "source": "corpus/brewery.md",
                "paragraph": 0,
            }
        ],
    )


B_CASES: list[dict[str, Any]] = [
    {
        "case_id": "graph-only-001",
        "query": "青嶺酒造",
        "cues": ["青嶺酒造"],
        "expected_concepts": ["青嶺酒造"],
        "expected_associations": [{"subject": "青嶺酒造", "label": "醸造元", "object": "蔵元"}],
    },
    {"case_id": "bm25-only-002", "query": "青嶺", "expected_sources": [{"source": "corpus/brewery.md"}]},
    {
        "case_id": "tag-filter-003",
        "query": "共通見出し語句",
        "options": {"tags": ["蔵"]},
        "expected_sources": [{"source": "corpus/filter-a.md", "relevance": 2}],
    },
    {"case_id": "known-miss-004", "query": "青嶺", "expected_sources": [{"source": "corpus/ledger.md"}]},
    {
        "case_id": "citations-005",
        "query": "存在しないクエリ",
        "expected_citations": [
            {"source": "corpus/brewery.md", "paragraph": 0, "quote": "青嶺酒造"},
            {"source": "corpus/brewery.md", "paragraph": 0, "section": "由来"},
            {"source": "corpus/brewery.md", "paragraph": 0, "section": "別セクション"},
            {"source": "corpus/brewery.md", "paragraph": 0, "section": None},
            {"source": "corpus/brewery.md", "paragraph": 0, "quote": "どこにもない引用"},
            {"source": "corpus/brewery.md", "paragraph": 99},
            {"source": "corpus/missing.md", "paragraph": 0},
        ],
    },
]


async def test_fixture_b_offline_paths(tmp_path: Path) -> None:
    live = await start(tmp_path)
    try:
        await _fixture_b(live)
        ev = write_eval(tmp_path / "eval.jsonl", B_CASES)
        out = tmp_path / "b.json"
        rc, _stdout, err = await evaluate("--eval", ev, "--context", "sake", "--url", live.url, "--out", str(out))
        assert rc == 0, err
        doc = load(out)
        cases = {c["case_id"]: c for c in doc["cases"]}
        g = cases["graph-only-001"]
        assert "recall" not in g and "lane_cross" not in g
        assert g["coverage"]["concepts"]["value"] == 1.0 and g["coverage"]["associations"]["value"] == 1.0
        assert g["structural"]["associations"][0]["query"]["total"] == 1
        b = cases["bm25-only-002"]
        assert b["recall"]["recall_at_k"] == 1.0 and list(b["passage"]["hits"][0]["lanes"]) == ["bm25"]
        assert "structural" not in b and "coverage" not in b
        t = cases["tag-filter-003"]
        assert [h["source"] for h in t["passage"]["hits"]] == ["corpus/filter-a.md"]
        assert t["passage"]["plan"]["filter"] == {"eligible_sources": 1, "total_sources": 5}
        k = cases["known-miss-004"]
        assert k["recall"]["recall_at_k"] == 0.0 and k["recall"]["mrr"] == 0.0
        assert k["missed"] == ["expected_sources: 'corpus/ledger.md' not found among passage hits"]
        c = cases["citations-005"]
        checks = c["citations"]["checks"]
        assert [x["outcome"] for x in checks] == ["resolved"] * 5 + ["unresolved"] * 2
        assert checks[0]["quote"] == {"declared": "青嶺酒造", "matched": True}
        assert checks[1]["section"] == {"check": "matched", "expected": "由来"}
        assert checks[2]["section"] == {"check": "mismatched", "expected": "別セクション"}
        assert checks[3]["section"] == {"check": "mismatched", "expected": None}
        assert checks[4]["quote"] == {"declared": "どこにもない引用", "matched": False}
        assert checks[5]["code"] == "no_paragraph" and checks[6]["code"] == "no_source"
        assert "answered 404: " in checks[6]["message"] and "text" not in checks[0]
        assert all(x["served"] is False for x in checks)
        assert c["citations"]["recall"] == {"expected_total": 7, "matched": 0, "value": 0.0}
        assert c["citations"]["validity"] == {"expected_total": 7, "valid": 2, "value": 2 / 7}
        assert len(c["missed"]) == 3 and c["missed_truncated"] == 7 + 5 - 3
        m = doc["metrics"]
        assert m["citations.resolved"] == {"value": 5 / 7, "n": 7, "numerator": 5}
        assert m["citations.no_paragraph"]["numerator"] == 1 and m["citations.no_source"]["numerator"] == 1
        assert m["citations.other"]["numerator"] == 0
        assert m["citations.section_match"] == {"value": 1 / 3, "n": 3, "numerator": 1}
        assert m["citations.quote_match"] == {"value": 0.5, "n": 2, "numerator": 1}
        assert m["structural.case_rate"] == {"value": 0.2, "n": 5, "numerator": 1}
        assert m["latency.passage_ms"]["n"] == 5 and m["latency.resolve_ms"]["n"] == 1 + 3
        assert m["latency.query_ms"]["n"] == 1 and m["latency.citation_ms"]["n"] == 7
        seen = _paths(live)
        assert "/contexts/sake/resolve" in seen and "/contexts/sake/resolve_label" in seen
        assert "/contexts/sake/query" in seen and "/contexts/sake/citations" in seen
        assert not any(p.endswith(f) for p in seen for f in FORBIDDEN)
        # under --assembly the baseline-only filter warns and is recorded
        out2 = tmp_path / "b2.json"
        rc, _o, err = await evaluate(
            "--eval", ev, "--context", "sake", "--url", live.url, "--out", str(out2), "--assembly"
        )
        msg = (
            "case 'tag-filter-003': options.tags/since/until are not applied under --assembly "
            "(POST /contexts/{name}/evidence has no such request fields)"
        )
        assert rc == 0 and f"taguru: evaluate: {msg}\n" in err
        assert load(out2)["warnings"] == [msg]
        assert not any(p.endswith(f) for p in _paths(live) for f in FORBIDDEN)
        assert "/contexts/sake/sources/search" not in _paths(live)[len(seen) :]
    finally:
        await live.close()


async def _fixture_c(live: Live) -> None:
    await seed(
        live,
        "sake",
        {
            "corpus/kura-a.md": "青嶺酒造は霧沢町の川沿いにある。",
            "corpus/kura-b.md": "青嶺酒造の仕込み水は山の伏流水である。",
            "corpus/kura-c.md": "高瀬は名の知れた職人として慕われている。",
            "corpus/unrelated.md": "今日は朝から晴れて風が弱い。",
        },
        associations=[
            {
                "subject": "青嶺酒造",
                "label": "杜氏",
                "object": "高瀬",
                "weight": 1.0,
                "source": "corpus/kura-c.md",
                "paragraph": 0,
            }
        ],
    )


C_CASE = {
    "case_id": "diversity-001",
    "query": "青嶺酒造",
    "cues": ["青嶺酒造"],
    "expected_sources": [
        {"source": "corpus/kura-a.md", "relevance": 3},
        {"source": "corpus/kura-b.md", "relevance": 2},
    ],
    "expected_citations": [{"source": "corpus/kura-a.md", "paragraph": 0}],
}


async def test_fixture_c_equal_budget(tmp_path: Path) -> None:
    live = await start(tmp_path)
    try:
        await _fixture_c(live)
        ev = write_eval(tmp_path / "eval.jsonl", [C_CASE], name="equal budget")
        gate = tmp_path / "t.json"
        gate.write_text(
            json.dumps(
                {
                    "taguru_evaluate_thresholds": 1,
                    "aggregate": {
                        "recall.recall_at_k": {"min": 0.5},
                        "citations.recall": {"min": 1},
                        "diversity.sources": {"min": 3},
                    },
                }
            )
        )
        base = ["--eval", ev, "--context", "sake", "--url", live.url]
        flags = ["--max-items", "3", "--max-bytes", "4096", "--max-tokens", "200"]
        runs: dict[str, tuple[int, dict[str, Any]]] = {}
        for name, extra in {
            "b0": [],
            "a0": ["--assembly"],
            "b3": flags,
            "a3": ["--assembly", *flags],
            "bt": ["--thresholds", str(gate)],
            "at": ["--assembly", "--thresholds", str(gate)],
            "a0bis": ["--assembly"],
            "a1": ["--assembly", "--max-items", "1"],
            "a2": ["--assembly", "--max-items", "2"],
        }.items():
            rc, _o, err = await evaluate(*base, *extra, "--out", str(tmp_path / f"{name}.json"))
            runs[name] = (rc, load(tmp_path / f"{name}.json"))
            assert rc in (0, 3), err
        b0, a0 = runs["b0"][1], runs["a0"][1]
        assert "budget" not in b0["inputs"] and "budget" not in b0["cases"][0]
        assert a0["inputs"]["budget"] == {"max_items": 40, "max_bytes": 65536, "max_tokens": 4000}
        assert a0["inputs"]["mode"] == "assembly"
        limits3 = {"max_items": 3, "max_bytes": 4096, "max_tokens": 200}
        for name in ("b3", "a3"):
            doc = runs[name][1]
            assert doc["inputs"]["budget"] == limits3 and doc["cases"][0]["budget"]["limits"] == limits3
        assert b0["cases"][0]["diversity_sources"] <= 2
        case = a0["cases"][0]
        assert case["diversity_sources"] == 3
        assert list(case)[-3:] == ["evidence", "budget", "diversity_sources"]
        assert case["passage"] == {
            "outcome": "searched",
            "hits": case["passage"]["hits"],
            "latency_ms": case["passage"]["latency_ms"],
        }
        assert all(h["score"] == 0.0 and h["lanes"] == {} for h in case["passage"]["hits"])
        evidence = case["evidence"]
        assert evidence["outcome"] == "assembled" and evidence["reranker"] == {"configured": False, "ran": False}
        assert list(evidence) == ["outcome", "latency_ms", "items", "selection", "reranker"]
        kinds = {i["kind"] for i in evidence["items"]}
        assert kinds == {"association", "passage"}
        assoc = next(i for i in evidence["items"] if i["kind"] == "association")
        assert assoc["candidate_id"] == "association\u0000青嶺酒造\u0000杜氏\u0000高瀬" and "source" not in assoc
        assert assoc["citation_refs"] == [{"source": "corpus/kura-c.md", "paragraph": 0}]
        assert set(case["budget"]) == {"items_used", "bytes_used", "tokens_used", "limits", "omitted_total"}
        assert runs["at"][0] == 0 and runs["bt"][0] == 3
        # repeat assembly runs differ only in latencies and the timestamp
        assert _without_latency(runs["a0bis"][1]) == _without_latency(a0)
        one = runs["a1"][1]["cases"][0]["budget"]
        assert one["items_used"] == 1 and one["omitted_total"] >= 1
        # compare: an unbudgeted baseline against --assembly --max-items 2 warns and still exits 0
        rc, stdout, err = await evaluate(
            "compare", str(tmp_path / "b0.json"), str(tmp_path / "a2.json"), "--out", str(tmp_path / "changes.jsonl")
        )
        assert rc == 0
        warning = (
            "budget differs: BASE none (untruncated baseline) vs HEAD max_items=2 max_bytes=65536 "
            "max_tokens=4000 — not an equal-budget comparison"
        )
        assert f"taguru: evaluate: {warning}\n" in err
        header = json.loads((tmp_path / "changes.jsonl").read_text(encoding="utf-8").splitlines()[0])
        assert warning in header["warnings"]
        assert stdout.startswith("evaluate compare: 1 case(s) in BASE, 1 in HEAD — ")
        seen = _paths(live)
        assert "/contexts/sake/evidence" in seen
        assert not any(p.endswith(f) for p in seen for f in FORBIDDEN)
    finally:
        await live.close()


def _without_latency(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {
            k: _without_latency(v)
            for k, v in doc.items()
            if k not in ("latency_ms", "generated_at", "out") and not k.startswith("latency.")
        }
    if isinstance(doc, list):
        return [_without_latency(v) for v in doc]
    return doc


async def test_dead_reranker_degrades_and_is_counted(tmp_path: Path) -> None:
    live = await start(tmp_path, rerank=RerankSettings("http://127.0.0.1:9/rerank", "m", None, 1))
    try:
        await _fixture_c(live)
        ev = write_eval(tmp_path / "eval.jsonl", [C_CASE])
        out = tmp_path / "r.json"
        rc, stdout, err = await evaluate(
            "--eval", ev, "--context", "sake", "--url", live.url, "--assembly", "--rerank", "m", "--out", str(out)
        )
    finally:
        await live.close()
    assert rc == 0, err
    doc = load(out)
    assert doc["inputs"]["rerank"] == "m"
    rr = doc["cases"][0]["evidence"]["reranker"]
    assert rr["configured"] is True and rr["ran"] is False and isinstance(rr["reason"], str)
    assert doc["metrics"]["rerank.ran"] == {"value": 0.0, "n": 1, "numerator": 0}
    assert "  rerank 'm' over 1 attempted case(s): 0 ran, 1 degraded\n" in stdout


async def test_baseline_truncation_matches_the_evidence_package(tmp_path: Path) -> None:
    """A passages-only context: the baseline's client-side truncation must reproduce the server's own
    accounting of the same hits as evidence items (usage, admitted order and skipped count)."""
    live = await start(tmp_path)
    try:
        await seed(
            live,
            "tv",
            {
                "a.md": "酒蔵の朝は早い。",
                "b.md": "酒蔵の" + "とても長い説明が続く、" * 30 + "おわり。",
                "c.md": "酒蔵では冬に仕込みをする。Brewing starts in winter.",
                "d.md": "古い酒蔵が町に三つある。",
                "e.md": "酒蔵見学は予約制である。",
                "f.md": "関係のない文。",
            },
        )
        ev = write_eval(tmp_path / "eval.jsonl", [{"case_id": "tv-1", "query": "酒蔵", "options": {"limit": 5}}])
        flags = ["--max-items", "3", "--max-bytes", "1200", "--max-tokens", "400"]
        common = ["--eval", ev, "--context", "tv", "--url", live.url, *flags]
        rc_b, _o, err = await evaluate(*common, "--out", str(tmp_path / "b.json"))
        assert rc_b == 0, err
        rc_a, _o, err = await evaluate(*common, "--assembly", "--out", str(tmp_path / "a.json"))
        assert rc_a == 0, err
        package = await live.call(
            "POST",
            "/contexts/tv/evidence",
            {
                "origins": ["酒蔵"],
                "text_fallback_query": "酒蔵",
                "search_limit": 5,
                "budget": {"max_items": 3, "max_bytes": 1200, "max_tokens": 400},
            },
        )
    finally:
        await live.close()
    assert all(i["kind"] == "passage" for i in package["items"]) and package["citations"] == []
    base_case = load(tmp_path / "b.json")["cases"][0]
    asm_case = load(tmp_path / "a.json")["cases"][0]
    assert base_case["budget"]["omitted_total"] >= 1, "the budget must bind for this test to mean anything"
    server_budget = dict(package["budget"], omitted_total=package["omitted_total"])
    assert base_case["budget"] == server_budget == asm_case["budget"]
    served = [(i["passage"]["source"], i["passage"]["paragraph"]) for i in package["items"]]
    assert [(h["source"], h["paragraph"]) for h in base_case["passage"]["hits"]] == served
    assert served[0] == ("a.md", 0) and ("b.md", 0) not in served  # skip, not stop: b is too big, c..e follow
    # the baseline measured the envelope, not the bare hit: its bytes match the server's items exactly
    assert sum(i["bytes"] for i in package["items"]) + len(served) + 1 + 2 == base_case["budget"]["bytes_used"]


async def test_context_and_connection_failures(tmp_path: Path) -> None:
    live = await start(tmp_path)
    try:
        await _fixture_a(live)
        ev = write_eval(tmp_path / "eval.jsonl", [BRAND_CASE])
        rc, _o, err = await evaluate(
            "--eval", ev, "--context", "nope", "--url", live.url, "--out", str(tmp_path / "n.json")
        )
        assert rc == 2 and not (tmp_path / "n.json").exists()
        assert err.endswith(f"taguru: evaluate: {live.url}/contexts/nope answered 404: context 'nope' not found\n")
        bad_out = tmp_path / "no-such-dir" / "o.json"
        rc, _o, err = await evaluate("--eval", ev, "--context", "sake", "--url", live.url, "--out", str(bad_out))
        assert rc == 1 and f"taguru: evaluate: writing {bad_out.with_suffix('.html')}: " in err
        assert not bad_out.exists()
    finally:
        await live.close()
    rc, _o, err = await evaluate("--eval", ev, "--context", "sake", "--url", "http://127.0.0.1:9")
    assert rc == 1 and "taguru: evaluate: server at http://127.0.0.1:9 is not reachable: " in err
