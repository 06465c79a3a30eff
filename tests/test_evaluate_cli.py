"""`taguru evaluate`: argv dispatch, usage errors, eval-file and thresholds validation, URL handling,
and the pure formulas — everything that must be decided before (or without) any network call."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_evaluate_support import evaluate, write_eval

from taguru_server.cli.main import main as taguru_main
from taguru_server.client.http import SetupError, base_url, bearer_token, check_url, cut, mask_url
from taguru_server.evaluate.evalfile import Case, EvalError, ExpectedSource, load_eval, normalize_entry
from taguru_server.evaluate.metrics import CASE_SCOPED, METRIC_NAMES, definitions, distribution, ratio, recall_block
from taguru_server.evaluate.truncate import Limits, measure, truncate

pytestmark = pytest.mark.anyio
SUFFIX = " — try 'taguru evaluate --help'"
DEAD = "http://127.0.0.1:9"  # never contacted: every case below fails before the network


def usage(msg: str) -> str:
    return f"taguru: evaluate: {msg}{SUFFIX}\n"


# ----- dispatch and the run-mode parser ------------------------------------------------


async def test_no_arguments_is_a_usage_error() -> None:
    assert await evaluate() == (2, "", usage("expected --eval FILE --context NAME"))


@pytest.mark.parametrize("flag", ["--help", "-h"])
async def test_help_prints_usage_and_exits_0(flag: str) -> None:
    rc, out, err = await evaluate(flag)
    assert rc == 0 and err == "" and out.startswith("usage: taguru evaluate --eval FILE --context NAME")
    rc, out2, _ = await evaluate("compare", flag)
    assert rc == 0 and out2 == out
    rc, out3, _ = await evaluate("--eval", "x", flag)
    assert rc == 0 and out3 == out


async def test_unknown_subcommand() -> None:
    rc, out, err = await evaluate("run", "--eval", "x")
    assert rc == 2 and out == ""
    assert err == usage(
        "unknown subcommand 'run' — the default mode is selected by a leading flag, e.g. "
        "'taguru evaluate --eval FILE --context NAME', or use the 'compare' subcommand"
    )


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["--eval", "e", "--context", "c", "--bogus"], "unknown flag '--bogus' for evaluate"),
        (["--eval", "e", "stray"], "evaluate takes no positional arguments"),
        (["--max-items", "3", "--max-items", "4"], "--max-items given twice"),
        (["--max-bytes", "3", "--max-bytes"], "--max-bytes given twice"),
        (["--max-tokens", "3", "--max-tokens", "x"], "--max-tokens given twice"),
        (["--eval"], "--eval needs a file path"),
        (["--context"], "--context needs a name"),
        (["--url"], "--url needs a value"),
        (["--config"], "--config needs a file path"),
        (["--out"], "--out needs a file path"),
        (["--thresholds"], "--thresholds needs a file path"),
        (["--rerank"], "--rerank needs a model name"),
        (["--max-items"], "--max-items needs a positive integer"),
        (["--max-items", "0"], "--max-items needs a positive integer"),
        (["--max-bytes", "-5"], "--max-bytes needs a positive integer"),
        (["--max-tokens", "1.5"], "--max-tokens needs a positive integer"),
        (["--max-tokens", " 5"], "--max-tokens needs a positive integer"),
        (["--max-items", str(2**64)], "--max-items needs a positive integer"),
        (["--context", "c"], "--eval FILE is required"),
        (["--eval", "e"], "--context NAME is required"),
        (["--eval", "e", "--context", "c", "--rerank", "m"], "--rerank requires --assembly"),
        (["--rerank", "m", "--assembly"], "--eval FILE is required"),
        (["--eval", "e", "--context", "c", "--bogus", "--rerank"], "unknown flag '--bogus' for evaluate"),
        (["--eval", "e", "-x"], "unknown flag '-x' for evaluate"),
    ],
)
async def test_run_mode_usage_errors(argv: list[str], msg: str) -> None:
    assert await evaluate(*argv) == (2, "", usage(msg))


async def test_value_flags_take_the_next_argument_verbatim(tmp_path: Path) -> None:
    # `--eval --context` names a file called "--context"; the missing --context is then the error
    assert await evaluate("--eval", "--context") == (2, "", usage("--context NAME is required"))
    # `+7` and 2^64-1 are valid sizes; the file named "--x" does not exist → an input error (2), not usage
    rc, _out, err = await evaluate(
        "--eval", str(tmp_path / "--x"), "--context", "c", "--max-items", "+7", "--max-bytes", str(2**64 - 1)
    )
    assert rc == 2 and err.startswith(f"taguru: evaluate: cannot read {tmp_path / '--x'}: ") and SUFFIX not in err


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["compare"], "evaluate compare takes exactly two positional arguments, BASE.json and HEAD.json (got 0)"),
        (["compare", "a"], "evaluate compare takes exactly two positional arguments, BASE.json and HEAD.json (got 1)"),
        (
            ["compare", "a", "b", "c"],
            "evaluate compare takes exactly two positional arguments, BASE.json and HEAD.json (got 3)",
        ),
        (["compare", "a", "b", "--out"], "--out needs a file path"),
        (["compare", "--out", "x", "a", "b", "--out", "y"], "--out given twice"),
        (["compare", "a", "b", "--max-items", "3"], "unknown flag '--max-items' for evaluate compare"),
    ],
)
async def test_compare_usage_errors(argv: list[str], msg: str) -> None:
    assert await evaluate(*argv) == (2, "", usage(msg))


def test_taguru_cli_wires_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert taguru_main(["evaluate", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: taguru evaluate")
    assert taguru_main(["evaluate", "--eval", "e", "--context", "c", "--rerank", "m"]) == 2
    assert capsys.readouterr().err == usage("--rerank requires --assembly")
    assert taguru_main(["evaluate"]) == 2


# ----- eval.jsonl --------------------------------------------------------------------


def _eval_error(tmp_path: Path, lines: list[str]) -> str:
    p = tmp_path / "eval.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(EvalError) as exc:
        load_eval(str(p))
    return str(exc.value).replace(str(p), "EVAL")


HDR = '{"taguru_eval": 1}'


@pytest.mark.parametrize(
    ("lines", "msg"),
    [
        ([], "EVAL: empty file: expected a taguru_eval header line"),
        (["", "   "], "EVAL: empty file: expected a taguru_eval header line"),
        ([HDR], "EVAL: no cases: expected at least one case line after the header"),
        (["{nope"], "EVAL: line 1: not JSON: "),
        (['{"name": "x"}'], "EVAL: line 1: not a valid eval header: "),
        (['{"taguru_eval": 1, "extra": 1}'], "EVAL: line 1: not a valid eval header: "),
        (['{"taguru_eval": 2}'], "EVAL: line 1: taguru_eval must be 1, got 2"),
        ([HDR, '{"case_id": "a"}'], "EVAL: line 2: not a valid eval case: "),
        ([HDR, '{"case_id": "a", "query": "q", "bogus": 1}'], "EVAL: line 2: not a valid eval case: "),
        (
            [HDR, '{"case_id": "a", "query": "q", "options": {"sources": ["x"]}}'],
            "EVAL: line 2: not a valid eval case: ",
        ),
        ([HDR, '{"case_id": "a", "query": "q", "cues": null}'], "EVAL: line 2: not a valid eval case: "),
        ([HDR, '{"case_id": "a", "query": "q", "options": null}'], "EVAL: line 2: not a valid eval case: "),
        (
            [HDR, '{"case_id": "a", "query": "q", "expected_sources": [{"source": "s", "paragraphs": null}]}'],
            "EVAL: line 2: not a valid eval case: ",
        ),
        (
            [HDR, '{"case_id": "a", "query": "q", "expected_citations": [{"source": "s"}]}'],
            "EVAL: line 2: case 'a': expected_citations: ",
        ),
        ([HDR, '{"case_id": "a", "query": "q", "expected_labels": [1]}'], "EVAL: line 2: case 'a': expected_labels: "),
        ([HDR, '{"case_id": " ", "query": "q"}'], "EVAL: line 2: case_id must not be empty"),
        ([HDR, '{"case_id": "a", "query": " "}'], "EVAL: line 2: case 'a': query must not be empty"),
        (
            [HDR, '{"case_id": "a", "query": "q"}', "", '{"case_id": "a", "query": "q"}'],
            "EVAL: line 4: duplicate case_id 'a'",
        ),
        (
            [HDR, '{"case_id": "a", "query": "q", "expected_sources": [{"source": " "}]}'],
            "EVAL: line 2: case 'a': expected_sources: source must not be empty",
        ),
        (
            [HDR, '{"case_id": "a", "query": "q", "expected_sources": [{"source": "s", "relevance": 4}]}'],
            "EVAL: line 2: case 'a': expected_sources relevance must be 0..=3, got 4",
        ),
        (
            [HDR, '{"case_id": "a", "query": "q", "expected_labels": [""]}'],
            "EVAL: line 2: case 'a': expected_labels: entries must not be empty",
        ),
        (
            [
                HDR,
                '{"case_id": "a", "query": "q", '
                '"expected_associations": [{"subject": "s", "label": " ", "object": "o"}]}',
            ],
            "EVAL: line 2: case 'a': expected_associations: subject/label/object must not be empty",
        ),
        (
            [HDR, '{"case_id": "a", "query": "q", "expected_citations": [{"source": "", "paragraph": 0}]}'],
            "EVAL: line 2: case 'a': expected_citations: source must not be empty",
        ),
        (
            [
                HDR,
                '{"case_id": "a", "query": "q", "expected_citations": [{"source": "s", "paragraph": 0, "quote": " "}]}',
            ],
            "EVAL: line 2: case 'a': expected_citations: quote must not be empty",
        ),
        (
            [HDR, '{"case_id": "a", "query": "q", "options": {"floor": 1.5}}'],
            "EVAL: line 2: case 'a': options.floor must be 0.0..=1.0, got 1.5",
        ),
    ],
)
def test_eval_file_errors(tmp_path: Path, lines: list[str], msg: str) -> None:
    assert _eval_error(tmp_path, lines).startswith(msg)


def test_eval_file_checks_in_order_and_first_error_wins(tmp_path: Path) -> None:
    # empty source (8) is reported before a bad relevance (9), even when the bad relevance comes first
    msg = _eval_error(
        tmp_path,
        [
            HDR,
            json.dumps(
                {"case_id": "a", "query": "q", "expected_sources": [{"source": "s", "relevance": 9}, {"source": ""}]}
            ),
        ],
    )
    assert msg == "EVAL: line 2: case 'a': expected_sources: source must not be empty"
    # line numbers count blank lines; a later bad line is never reached
    msg = _eval_error(tmp_path, [HDR, "", '{"case_id": "", "query": "q"}', "{bad"])
    assert msg == "EVAL: line 3: case_id must not be empty"


def test_eval_file_reads_defaults_and_nulls(tmp_path: Path) -> None:
    p = write_eval(
        tmp_path / "e.jsonl",
        [
            {
                "case_id": "a",
                "query": "q",
                "expected_labels": None,
                "expected_associations": None,
                "expected_citations": [
                    {"source": "s", "paragraph": 0, "section": None, "quote": None},
                    {"source": "s", "paragraph": 1},
                ],
                "options": {"limit": None, "floor": None, "tags": None, "since": None, "until": None},
            },
            {
                "case_id": "b",
                "query": "q",
                "cues": ["x"],
                "expected_sources": [{"source": "s", "paragraphs": [2]}],
                "options": {"limit": 3, "floor": 0.5},
            },
        ],
        name=None,
    )
    es = load_eval(p)
    assert es.name is None and [c.case_id for c in es.cases] == ["a", "b"]
    a, b = es.cases
    assert a.limit == 10 and a.effective_cues == ["q"] and a.expected_labels == []
    assert a.expected_citations[0].section is None and a.expected_citations[0].quote is None
    from taguru_server.evaluate.evalfile import UNSET

    assert a.expected_citations[1].section is UNSET
    assert b.limit == 3 and b.effective_cues == ["x"] and b.expected_sources[0].relevance == 1
    assert b.expected_sources[0].paragraphs == [2] and b.options.floor == 0.5


async def test_limit_out_of_range_is_an_input_error(tmp_path: Path) -> None:
    p = write_eval(
        tmp_path / "e.jsonl",
        [
            {"case_id": "ok", "query": "q", "options": {"limit": 5}},
            {"case_id": "zero", "query": "q", "options": {"limit": 0}},
            {"case_id": "big", "query": "q", "options": {"limit": 1001}},
        ],
    )
    rc, out, err = await evaluate("--eval", p, "--context", "c", "--url", DEAD)
    assert (rc, out) == (2, "")
    assert err == "taguru: evaluate: case 'zero': options.limit must be 1..=1000, got 0\n"


def test_normalize_entry() -> None:
    assert normalize_entry("リンゴ") == normalize_entry("りんご") == "りんご"
    assert normalize_entry(" Ａｐｐｌｅ ") == "apple"
    assert normalize_entry("ＡＢＣ　ＤＥＦ") == "abc def"
    assert normalize_entry("İ") == "i̇"  # per-character lowercase


# ----- thresholds: every validation error exits 2 before any network call --------------


@pytest.mark.parametrize(
    ("doc", "msg"),
    [
        ('{"taguru_evaluate_thresholds": 2}', "T: taguru_evaluate_thresholds must be 1, got 2"),
        ('{"taguru_evaluate_thresholds": 1, "extra": true}', "T: unknown field `extra`"),
        ('{"taguru_evaluate_thresholds": 1, "cases": {"bogus": {}}}', "T: unknown field `bogus`"),
        (
            '{"taguru_evaluate_thresholds": 1, "aggregate": {"recall.mrr": {"min": 0.1, "avg": 1}}}',
            "T: unknown field `avg`",
        ),
        ("{not json", "T: "),
        (
            '{"taguru_evaluate_thresholds": 1, "aggregate": {"nope": {"min": 1}, "recall.mrr": {}}}',
            "T: aggregate: unknown metric name 'nope'; aggregate: 'recall.mrr': needs at least one of min/max",
        ),
        (
            '{"taguru_evaluate_thresholds": 1, "aggregate": {"corpus.stable": {"min": 1}}}',
            "T: aggregate: unknown metric name 'corpus.stable'",
        ),
        (
            '{"taguru_evaluate_thresholds": 1, "cases": {"default": {"rerank.ran": {"min": 1}}}}',
            "T: cases.default: unknown (or not case-scoped) metric name 'rerank.ran'",
        ),
        (
            '{"taguru_evaluate_thresholds": 1, "cases": {"overrides": {"zz": {"recall.mrr": {"min": 1}}, '
            '"a": {"budget.items_used": {"max": 1}, "recall.mrr": {"min": 2, "max": 1}}}}}',
            "T: cases.overrides.a: unknown (or not case-scoped) metric name 'budget.items_used'; "
            "cases.overrides.a: 'recall.mrr': min 2 must be <= max 1; cases.overrides: unknown case_id 'zz'",
        ),
        (
            '{"taguru_evaluate_thresholds": 1, '
            '"aggregate": {"recall.mrr": {"min": 1e999}, "recall.ndcg": {"max": -1e999}}}',
            "T: aggregate: 'recall.mrr': min inf must be finite; aggregate: 'recall.ndcg': max -inf must be finite",
        ),
    ],
)
async def test_thresholds_errors_exit_2_without_network(tmp_path: Path, doc: str, msg: str) -> None:
    p = write_eval(tmp_path / "e.jsonl", [{"case_id": "a", "query": "q"}])
    t = tmp_path / "t.json"
    t.write_text(doc, encoding="utf-8")
    rc, out, err = await evaluate(
        "--eval", p, "--context", "c", "--url", DEAD, "--thresholds", str(t), "--out", str(tmp_path / "o.json")
    )
    assert (rc, out) == (2, "")
    assert "evaluate →" not in err  # no network step was reached
    assert err.startswith("taguru: evaluate: " + msg.replace("T:", f"{t}:"))
    assert not (tmp_path / "o.json").exists()


async def test_unreadable_thresholds(tmp_path: Path) -> None:
    p = write_eval(tmp_path / "e.jsonl", [{"case_id": "a", "query": "q"}])
    rc, _out, err = await evaluate(
        "--eval", p, "--context", "c", "--url", DEAD, "--thresholds", str(tmp_path / "missing.json")
    )
    assert rc == 2 and err.startswith(f"taguru: evaluate: cannot read {tmp_path / 'missing.json'}: ")


# ----- server connection --------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "msg"),
    [
        (
            "http://user:pw@127.0.0.1:8248",
            "the URL must not carry credentials (user:password@…) — set "
            "TAGURU_API_TOKEN (or TAGURU_API_TOKENS) instead",
        ),
        (
            "http://tok@127.0.0.1:8248",
            "the URL must not carry credentials (user:password@…) — set "
            "TAGURU_API_TOKEN (or TAGURU_API_TOKENS) instead",
        ),
        ("/relative/path", "the --url value could not be parsed as a URL"),
        ("", "the --url value could not be parsed as a URL"),
        ("http://", "the --url value could not be parsed as a URL"),
        ("http://127.0.0.1:99999", "the --url value could not be parsed as a URL"),
        ("http://127.0.0.1:abc", "the --url value could not be parsed as a URL"),
    ],
)
async def test_url_checks_exit_2(tmp_path: Path, url: str, msg: str) -> None:
    p = write_eval(tmp_path / "e.jsonl", [{"case_id": "a", "query": "q"}])
    assert await evaluate("--eval", p, "--context", "c", "--url", url) == (2, "", f"taguru: evaluate: {msg}\n")


async def test_port_zero_and_bad_config(tmp_path: Path) -> None:
    p = write_eval(tmp_path / "e.jsonl", [{"case_id": "a", "query": "q"}])
    rc, _o, err = await evaluate("--eval", p, "--context", "c", env={"TAGURU_ADDR": "0.0.0.0:0"})
    assert rc == 2 and err == (
        "taguru: evaluate: TAGURU_ADDR (0.0.0.0:0) binds to port 0 (OS-assigned) — the actual port can't be "
        "discovered from here; pass the server's real URL explicitly: 'taguru health http://host:PORT'\n"
    )
    # the config file is applied before URL resolution; a real variable wins over it
    cfg = tmp_path / "taguru.env"
    cfg.write_text("TAGURU_ADDR=127.0.0.1:0\n", encoding="utf-8")
    rc, _o, err = await evaluate("--eval", p, "--context", "c", "--config", str(cfg))
    assert rc == 2 and "TAGURU_ADDR (127.0.0.1:0) binds to port 0" in err
    rc, _o, err = await evaluate("--eval", p, "--context", "c", env={"TAGURU_CONFIG": str(cfg)})
    assert rc == 2 and "binds to port 0" in err
    rc, _o, err = await evaluate("--eval", p, "--context", "c", "--config", str(cfg), "--url", "http://u:p@h")
    assert rc == 2 and "must not carry credentials" in err
    rc, _o, err = await evaluate("--eval", p, "--context", "c", "--config", str(tmp_path / "nope.env"), "--url", DEAD)
    assert rc == 2 and err.startswith("taguru: evaluate: ") and "nope.env" in err


async def test_non_http_scheme_fails_at_health_with_exit_1(tmp_path: Path) -> None:
    p = write_eval(tmp_path / "e.jsonl", [{"case_id": "a", "query": "q"}])
    out_file = tmp_path / "o.json"
    rc, out, err = await evaluate("--eval", p, "--context", "c", "--url", "ftp://127.0.0.1:9", "--out", str(out_file))
    assert rc == 1 and out == ""
    assert err.startswith(
        "evaluate → ftp://127.0.0.1:9\ntaguru: evaluate: server at ftp://127.0.0.1:9 is not reachable: "
    )
    assert not out_file.exists()


def test_base_url_mask_and_token() -> None:
    assert base_url(None, {}) == "http://127.0.0.1:8248"
    assert base_url(None, {"TAGURU_ADDR": "0.0.0.0:9000"}) == "http://127.0.0.1:9000"
    assert base_url(None, {"TAGURU_ADDR": "[::]:9000"}) == "http://[::1]:9000"
    assert base_url("http://h:1/api/", {}) == "http://h:1/api"
    with pytest.raises(SetupError):
        check_url("http://a:b@h")
    assert mask_url("http://127.0.0.1:8248/x?y") == "http://127.0.0.1:8248"
    assert mask_url("http://example.com:80/") == "http://example.com"
    assert mask_url("https://example.com:443") == "https://example.com"
    assert mask_url("https://example.com:8443") == "https://example.com:8443"
    assert mask_url("http://[::1]:8248") == "http://[::1]:8248"
    assert mask_url("http://h:99999") == "<unparseable-url>"
    assert bearer_token({"TAGURU_API_TOKEN": "  t1 ", "TAGURU_API_TOKENS": "a:t2"}) == "t1"
    assert bearer_token({"TAGURU_API_TOKEN": " ", "TAGURU_API_TOKENS": " , a: ,b:t3,c:t4"}) == "t3"
    assert bearer_token({}) is None
    assert cut("a" * 300) == "a" * 200 + "…"
    assert cut("あ" * 100) == "あ" * 66 + "…"  # 200 bytes cut on a character boundary
    assert cut("short") == "short"


# ----- formulas -----------------------------------------------------------------------


def test_ndcg_worked_example() -> None:
    case = Case(
        "c", "q", expected_sources=[ExpectedSource("A", [], 3), ExpectedSource("B", [], 1), ExpectedSource("Z", [], 0)]
    )
    hits = [{"source": "A", "paragraph": 0}, {"source": "A", "paragraph": 1}, {"source": "B", "paragraph": 4}]
    r = recall_block(case, hits)
    assert r is not None and r["expected_total"] == 2 and r["matched"] == 2
    assert r["recall_at_k"] == 1.0 and r["mrr"] == 1.0 and math.isclose(r["ndcg"], 3.5 / 3.6309297535714578)
    assert round(r["ndcg"], 4) == 0.9639
    assert recall_block(Case("c", "q", expected_sources=[ExpectedSource("Z", [], 0)]), hits) is None
    miss = recall_block(Case("c", "q", expected_sources=[ExpectedSource("A", [7], 1)]), hits)
    assert miss == {"recall_at_k": 0.0, "mrr": 0.0, "ndcg": 0.0, "expected_total": 1, "matched": 0}


def test_distribution_and_ratio() -> None:
    assert distribution([]) == {
        "n": 0,
        "min": None,
        "p50": None,
        "p90": None,
        "p99": None,
        "max": None,
        "mean": None,
        "sum": None,
    }
    d = distribution([3, 1, 2, float("nan"), 4])
    assert d == {"n": 4, "min": 1.0, "p50": 2.0, "p90": 4.0, "p99": 4.0, "max": 4.0, "mean": 2.5, "sum": 10.0}
    d = distribution(list(range(1, 101)))
    assert (d["p50"], d["p90"], d["p99"]) == (50.0, 90.0, 99.0)
    assert ratio(0, 0) == {"value": None, "n": 0, "numerator": None}
    assert ratio(1, 4) == {"value": 0.25, "n": 4, "numerator": 1}


def test_definitions() -> None:
    defs = definitions()
    assert len(defs) == 31 and list(defs) == sorted(defs) == METRIC_NAMES and "corpus.stable" not in defs
    assert len(CASE_SCOPED) == 10 and all(m in defs for m in CASE_SCOPED)
    null_caveats = {
        "latency.passage_ms",
        "latency.resolve_ms",
        "passage.failure_rate",
        "structural.case_rate",
        "citations.resolved",
        "citations.no_source",
        "citations.no_paragraph",
        "citations.other",
        "lanes.both",
        "lanes.neither",
    }
    for key, d in defs.items():
        assert list(d) == ["unit", "statistic", "scopes", "description", "source", "caveat"]
        assert (d["caveat"] is None) == (key in null_caveats), key
        assert d["scopes"] == (["case"] if d["statistic"] == "distribution" else ["run"])
    assert defs["latency.passage_ms"]["unit"] == "ms" and defs["budget.bytes_used"]["unit"] == "byte"
    assert defs["diversity.sources"]["unit"] == "source" and defs["rerank.ran"]["statistic"] == "ratio"


def test_truncation_vectors() -> None:
    kura = "青嶺酒造は雲居県霧沢町の蔵元である。杜氏は高瀬である。"
    hit = {
        "source": "docs/kura.md",
        "paragraph": 0,
        "score": 0.86304635,
        "text": kura,
        "lanes": {"bm25": {"rank": 1, "score": 0.86304635}},
    }
    assert measure("sake", 1, hit) == (367, 394)
    kept, budget = truncate("sake", [hit], Limits(40, 65536, 4000))
    assert kept == [hit] and (budget["bytes_used"], budget["tokens_used"], budget["items_used"]) == (371, 100, 1)

    def h(src: str, score: float, n: int, rank: int) -> dict:
        return {
            "source": src,
            "paragraph": 0,
            "score": score,
            "text": "漢" * n,
            "lanes": {"bm25": {"rank": rank, "score": score}},
        }

    a, b = h("corpus/kura-a.md", 0.28768212, 18, 1), h("corpus/kura-b.md", 0.25, 21, 2)
    assert measure("sake", 1, a) == (348, 366)
    assert measure("sake", 2, b) == (345, 366)
    _kept, one = truncate("sake", [a, b], Limits(1, 65536, 4000))
    assert (one["bytes_used"], one["tokens_used"], one["omitted_total"]) == (352, 93, 1)
    kept, two = truncate("sake", [a, b], Limits(40, 65536, 4000))
    assert (two["bytes_used"], two["tokens_used"], len(kept)) == (698, 185, 2)
    # skip, don't stop: a hit that does not fit is counted and a later, smaller one still gets in
    big = h("corpus/big.md", 1.5, 400, 1)
    kept, budget = truncate("sake", [big, a], Limits(40, 1000, 4000))
    assert kept == [a] and budget["omitted_total"] == 1 and budget["items_used"] == 1
    _kept, empty = truncate("sake", [big], Limits(40, 10, 4000))
    assert (empty["items_used"], empty["bytes_used"], empty["tokens_used"], empty["omitted_total"]) == (0, 4, 1, 1)
    # a vector-only hit is a passage_vector item and both lanes make it passage_fused
    from taguru_server.evaluate.truncate import envelope

    v = dict(a, lanes={"vector": {"rank": 1, "score": 0.5}})
    assert envelope("sake", 1, v)["lane_ranks"] == [{"lane": "passage_vector", "rank": 1}]
    f = dict(a, lanes={"vector": {"rank": 2, "score": 0.5}, "bm25": {"rank": 1, "score": 0.25}})
    env = envelope("sake", 3, f)
    assert env["lane_ranks"] == [{"lane": "passage_fused", "rank": 3}] and list(env["passage"]["lanes"]) == [
        "bm25",
        "vector",
    ]


def test_truncation_reuses_the_servers_accounting() -> None:
    import taguru_server.evaluate.truncate as truncation
    import taguru_server.stages.accounting as accounting

    assert truncation.cost is accounting.cost
    assert truncation.tokens is accounting.tokens and truncation.overhead is accounting.overhead


def test_progress_only_on_a_tty() -> None:
    import io

    from taguru_server.evaluate.runner import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet = io.StringIO()
    p = Progress(2, quiet)
    p.step("a")
    p.close()
    assert quiet.getvalue() == ""
    tty = Tty()
    p = Progress(2, tty)
    p.step("case-a")
    p.step("case-b")
    p.close()
    assert "1/2" in tty.getvalue() and "case-a" in tty.getvalue() and "2/2" in tty.getvalue()
    assert "cases/s" in tty.getvalue() and "case-b" in tty.getvalue()
    assert tty.getvalue().endswith("\r\x1b[2K")
