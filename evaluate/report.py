"""The run's report: its inputs, the artifact written atomically (JSON and HTML), and the summary lines."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, TextIO

from taguru_server.evaluate import html as html_report
from taguru_server.evaluate.evalfile import EvalSet
from taguru_server.evaluate.metrics import (
    CLASSIFICATION,
    scalar,
)
from taguru_server.evaluate.run_args import DEFAULT_LIMIT, EXIT_FAIL, RESOLVE_LIMIT, Fatal, RunArgs


def budget_text(limits: dict[str, Any] | None) -> str:
    """The budget limits as the summary words them."""
    if not limits:
        return "none (untruncated baseline)"
    return f"max_items={limits['max_items']} max_bytes={limits['max_bytes']} max_tokens={limits['max_tokens']}"


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary sibling and a rename, so a failed write leaves no partial file."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def html_path(out: str) -> str:
    """Where the HTML report of the artifact `out` goes: beside it, `.html` for `.json`."""
    p = Path(out)
    if p.suffix.lower() == ".json":
        return str(p.with_suffix(".html"))
    return out + ".html"


def run_inputs(args: RunArgs, evalset: EvalSet, masked: str) -> dict[str, Any]:
    """The artifact's record of what the run was asked to do."""
    inputs: dict[str, Any] = {
        "eval": {"path": args.eval, "name": evalset.name, "cases": len(evalset.cases)},
        "context": args.context,
        "url": masked,
        "out": args.out,
        "default_limit": DEFAULT_LIMIT,
        "resolve_limit": RESOLVE_LIMIT,
        "mode": "assembly" if args.assembly else "baseline",
    }
    if args.assembly or args.budget_given:
        inputs["budget"] = args.limits.as_dict()
    if args.rerank is not None:
        inputs["rerank"] = args.rerank
    if args.graph_passages:
        inputs["graph_passages"] = True
    return inputs


def write_artifact(args: RunArgs, artifact: dict[str, Any]) -> str:
    """Write the HTML report, then the JSON artifact; return the report's path."""
    text = json.dumps(artifact, ensure_ascii=False, indent=2)
    report_path = html_path(args.out)
    try:
        write_atomic(report_path, html_report.render_run(artifact))
    except OSError as exc:
        raise Fatal(f"writing {report_path}: {exc}", EXIT_FAIL) from None
    try:
        write_atomic(args.out, text)
    except OSError as exc:
        raise Fatal(f"writing {args.out}: {exc}", EXIT_FAIL) from None
    return report_path


# the classification metrics (metrics.py), then what the budget and the passage lane cost
_SUMMARY_METRICS = (
    *CLASSIFICATION,
    "budget.items_used",
    "budget.tokens_used",
    "budget.omitted_rate",
    "latency.passage_ms",
)


def _fmt(v: Any) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def print_summary(args: RunArgs, artifact: dict[str, Any], masked: str, report_path: str, out: TextIO) -> None:
    """The run's summary lines (metrics, rerank, written files, threshold verdict) on `out`."""
    cases = artifact["cases"]
    metrics = artifact["metrics"]
    lines = [f"taguru evaluate: {masked} / context '{args.context}'"]
    failed = sum(1 for c in cases if c["passage"]["outcome"] == "failed")
    mode = artifact["inputs"]["mode"]
    lines.append(
        f"  {len(cases)} case(s), mode {mode}, budget {budget_text(artifact['inputs'].get('budget'))}, "
        f"{failed} lane failure(s)"
    )
    for m in _SUMMARY_METRICS:
        v = metrics[m]
        lines.append(f"  {m}: {'mean' if 'mean' in v else 'value'} {_fmt(scalar(m, v))} (n={v['n']})")
    if args.rerank is not None:
        rr = metrics["rerank.ran"]
        ran = rr["numerator"] or 0
        lines.append(f"  rerank '{args.rerank}' over {rr['n']} attempted case(s): {ran} ran, {rr['n'] - ran} degraded")
    lines.append(f"  wrote {args.out}")
    lines.append(f"  wrote {report_path}")
    report = artifact["thresholds"]
    if report is not None:
        short = report["sha256"][:12]
        if report["passed"]:
            lines.append(f"  thresholds: PASS (sha256 {short}…)")
        else:
            vs = report["violations"]
            lines.append(f"  thresholds: FAIL — {len(vs)} violation(s) (sha256 {short}…)")
            case_lines = 0
            for v in vs:
                if v["scope"] == "case":
                    case_lines += 1
                    if case_lines > 10:
                        continue
                    lines.append(f"    [case {v['case_id']}] {v['metric']}: {v['reason']}")
                else:
                    lines.append(f"    [{v['scope']}] {v['metric']}: {v['reason']}")
    print("\n".join(lines), file=out, flush=True)
