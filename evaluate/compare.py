"""`taguru evaluate compare BASE.json HEAD.json`: tolerant loading, classification, changes.jsonl.

docs/evaluate.md ("Comparison") shows its output.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from taguru_server.evaluate import html as html_report
from taguru_server.evaluate.metrics import CLASSIFICATION, case_value
from taguru_server.evaluate.report import budget_text, write_atomic
from taguru_server.evaluate.run_args import EXIT_FAIL, EXIT_OK, EXIT_USAGE, warn

EPS = 1e-9
KNOWN_STATISTICS = ("distribution", "ratio", "count")


class LoadError(Exception):
    pass


@dataclass
class Side:
    label: str
    path: str
    doc: dict[str, Any]
    stamp: int
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    scalars: dict[str, float | None] = field(default_factory=dict)
    statistics: dict[str, str] = field(default_factory=dict)
    metric_warnings: list[str] = field(default_factory=list)

    def get(self, *keys: str) -> Any:
        cur: Any = self.doc
        for k in keys:
            if not isinstance(cur, dict):
                return None
            cur = cur.get(k)
        return cur

    @property
    def identity(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "context": self.get("inputs", "context"),
            "taguru_evaluation": self.stamp,
            "generated_at": self.get("generated_at"),
            "corpus_revision_after": self.get("corpus", "revision_after"),
            "corpus_stable": self.get("corpus", "stable"),
            "thresholds_sha256": self.get("thresholds", "sha256"),
        }


def load_side(label: str, path: str) -> Side:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadError(f"{label} reading {path}: {exc}") from None
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("expected a JSON object at the top level")
        stamp = doc.get("taguru_evaluation", 0)
        if stamp is None:
            stamp = 0
        if type(stamp) is not int:
            raise ValueError("taguru_evaluation is not an integer")
        cases = doc.get("cases") or []
        if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
            raise ValueError("cases is not an array of objects")
        for key in ("metrics", "definitions", "inputs", "corpus"):
            if doc.get(key) is not None and not isinstance(doc[key], dict):
                raise ValueError(f"{key} is not an object")
    except (ValueError, RecursionError) as exc:
        raise LoadError(f"{label} {path}: malformed evaluation.json: {exc}") from None
    if stamp != 1:
        raise LoadError(f"{label} {path}: taguru_evaluation must be within 1..=1, got {stamp}")
    side = Side(label, path, doc, stamp)
    for c in cases:
        cid = c.get("case_id")
        if not isinstance(cid, str):
            continue
        if cid in side.cases:
            if cid not in side.duplicates:
                side.duplicates.append(cid)
        else:
            side.order.append(cid)
        side.cases[cid] = c
    _parse_metrics(side)
    return side


def _parse_metrics(side: Side) -> None:
    metrics = side.doc.get("metrics") or {}
    defs = side.doc.get("definitions") or {}
    for m in sorted(metrics):
        d = defs.get(m) if isinstance(defs, dict) else None
        if not isinstance(d, dict) or "statistic" not in d:
            side.metric_warnings.append(
                f"{side.label}: metric '{m}' has no definitions entry — skipped from the aggregate diff"
            )
            continue
        stat = d["statistic"]
        if stat not in KNOWN_STATISTICS:
            side.metric_warnings.append(f"{side.label}: metric '{m}': definitions names unknown statistic '{stat}'")
            continue
        v = metrics[m]
        try:
            side.scalars[m] = _scalar(stat, v)
            side.statistics[m] = stat
        except ValueError as exc:
            side.metric_warnings.append(f"{side.label}: metric '{m}': {exc}")


def _number(v: Any, what: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{what} is not a number")
    return float(v)


def _scalar(stat: str, v: Any) -> float | None:
    if stat == "count":
        if isinstance(v, dict):
            return _number(v.get("value"), "value")
        return _number(v, "count")
    if not isinstance(v, dict):
        raise ValueError(f"a {stat} value must be an object")
    if stat == "distribution":
        if "mean" not in v:
            raise ValueError("a distribution value needs 'mean'")
        return _number(v["mean"], "mean")
    if "value" not in v:
        raise ValueError("a ratio value needs 'value'")
    return _number(v["value"], "value")


def _case_metric(case: dict[str, Any], m: str) -> float | None:
    try:
        v = case_value(case, m)
    except (AttributeError, TypeError, KeyError):
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _short(sha: Any) -> str:
    return sha[:12] if isinstance(sha, str) and sha else "none"


def compare(base: Side, head: Side) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """The changes header, the per-case change records, and the warnings, BASE against HEAD."""
    warnings = _identity_warnings(base, head)
    counts, records, one_sided = _case_changes(base, head)
    warnings.extend(one_sided)
    warnings.extend(base.metric_warnings)
    warnings.extend(head.metric_warnings)
    header: dict[str, Any] = {
        "kind": "header",
        "taguru_evaluation_changes": 1,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "base": base.identity,
        "head": head.identity,
        "counts": counts,
        "metrics": _metric_deltas(base, head),
    }
    if warnings:
        header["warnings"] = warnings
    return header, records, warnings


def _identity_warnings(base: Side, head: Side) -> list[str]:
    """Warnings that the two runs differ in what they measured or how."""
    warnings: list[str] = []
    bc, hc = base.get("inputs", "context"), head.get("inputs", "context")
    if bc != hc:
        warnings.append(f"context differs: BASE '{bc}' vs HEAD '{hc}'")
    if base.get("corpus", "revision_after") != head.get("corpus", "revision_after"):
        warnings.append("corpus.revision_after differs between BASE and HEAD")
    for side in (base, head):
        if side.get("corpus", "stable") is False:
            warnings.append(f"{side.path}: corpus.stable is false — a write landed mid-run")
    bs, hs = base.get("thresholds", "sha256"), head.get("thresholds", "sha256")
    if bs != hs:
        warnings.append(f"thresholds file identity differs: BASE {_short(bs)} vs HEAD {_short(hs)}")
    if base.stamp != head.stamp:
        warnings.append(f"taguru_evaluation stamp differs: BASE {base.stamp} vs HEAD {head.stamp}")
    bb, hb = base.get("inputs", "budget"), head.get("inputs", "budget")
    if bb != hb:
        warnings.append(
            f"budget differs: BASE {_budget_desc(bb)} vs HEAD {_budget_desc(hb)} — not an equal-budget comparison"
        )
    for side in (base, head):
        for cid in side.duplicates:
            warnings.append(f"{side.label}: duplicate case_id '{cid}' — using the last occurrence")
    return warnings


def _case_changes(base: Side, head: Side) -> tuple[dict[str, int], list[dict[str, Any]], list[str]]:
    """Counts by kind, the records of cases that changed, and one-sided metric warnings."""
    counts = {
        "improved": 0,
        "regressed": 0,
        "added": 0,
        "removed": 0,
        "unchanged": 0,
        "cases_base": len(base.cases),
        "cases_head": len(head.cases),
    }
    records: list[dict[str, Any]] = []
    one_sided: list[str] = []
    for cid in sorted(set(base.cases) | set(head.cases), key=lambda s: s.encode("utf-8")):
        b, h = base.cases.get(cid), head.cases.get(cid)
        if b is None or h is None:
            kind = "added" if b is None else "removed"
            side_case = h if b is None else b
            assert side_case is not None  # every case id comes from one side or the other
            counts[kind] += 1
            records.append(_one_sided_record(cid, kind, side_case))
            continue
        changed, improved, regressed = _changed_metrics(cid, b, h, one_sided)
        if regressed or improved:
            kind = "regressed" if regressed else "improved"
            counts[kind] += 1
            records.append({"kind": kind, "case_id": cid, "metrics": changed})
        else:
            counts["unchanged"] += 1
    return counts, records, one_sided


def _one_sided_record(cid: str, kind: str, side_case: dict[str, Any]) -> dict[str, Any]:
    """The record of a case present on only one side, with that side's metric values."""
    ms = []
    for m in CLASSIFICATION:
        v = _case_metric(side_case, m)
        if v is None:
            continue
        sides = {"base": None, "head": v} if kind == "added" else {"base": v, "head": None}
        ms.append({"metric": m, "sides": sides, "delta": None, "direction": "not_comparable"})
    return {"kind": kind, "case_id": cid, "metrics": ms}


def _changed_metrics(
    cid: str, b: dict[str, Any], h: dict[str, Any], one_sided: list[str]
) -> tuple[list[dict[str, Any]], bool, bool]:
    """The classification metrics that moved beyond EPS, and whether any improved or regressed."""
    changed = []
    regressed = improved = False
    for m in CLASSIFICATION:
        bv, hv = _case_metric(b, m), _case_metric(h, m)
        if bv is None and hv is None:
            continue
        if bv is None or hv is None:
            one_sided.append(f"case '{cid}': metric '{m}' has a value on only one side — excluded from classification")
            continue
        delta = hv - bv
        if delta > EPS:
            improved = True
            changed.append({"metric": m, "sides": {"base": bv, "head": hv}, "delta": delta, "direction": "improved"})
        elif delta < -EPS:
            regressed = True
            changed.append({"metric": m, "sides": {"base": bv, "head": hv}, "delta": delta, "direction": "regressed"})
    return changed, improved, regressed


def _metric_deltas(base: Side, head: Side) -> list[dict[str, Any]]:
    """Each aggregate metric's value on both sides and the difference."""
    metrics = []
    for m in sorted(set(base.scalars) | set(head.scalars)):
        bv, hv = base.scalars.get(m), head.scalars.get(m)
        if bv is None and hv is None:
            continue
        stat = head.statistics.get(m) or base.statistics.get(m)
        metrics.append(
            {
                "metric": m,
                "statistic": stat,
                "sides": {"base": bv, "head": hv},
                "delta": None if bv is None or hv is None else hv - bv,
            }
        )
    return metrics


def _budget_desc(b: Any) -> str:
    if not isinstance(b, dict):
        return budget_text(None)
    return budget_text({k: b.get(k) for k in ("max_items", "max_bytes", "max_tokens")})


def html_path(out: str) -> str:
    p = Path(out)
    if p.suffix.lower() in (".jsonl", ".json"):
        return str(p.with_suffix(".html"))
    return out + ".html"


def run_compare(
    base_path: str, head_path: str, out_path: str, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        base = load_side("BASE", base_path)
        head = load_side("HEAD", head_path)
    except LoadError as exc:
        warn(str(exc), err)
        return EXIT_USAGE
    header, records, warnings = compare(base, head)
    for w in warnings:
        warn(w, err)
    lines = [json.dumps(header, ensure_ascii=False, separators=(",", ":"))]
    lines.extend(json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records)
    report_path = html_path(out_path)
    try:
        write_atomic(report_path, html_report.render_compare(base.doc, head.doc, header, records))
        write_atomic(out_path, "\n".join(lines) + "\n")
    except OSError as exc:
        warn(f"writing {out_path}: {exc}", err)
        return EXIT_FAIL
    c = header["counts"]
    text = [
        f"evaluate compare: {c['cases_base']} case(s) in BASE, {c['cases_head']} in HEAD — "
        f"{c['improved']} improved, {c['regressed']} regressed, {c['added']} added, {c['removed']} removed, "
        f"{c['unchanged']} unchanged"
    ]
    for m in header["metrics"]:
        b, h, d = m["sides"]["base"], m["sides"]["head"], m["delta"]
        text.append(f"  {m['metric']}: {_f(b)} → {_f(h)} ({'n/a' if d is None else f'{d:+.4f}'})")
    regressed = [r for r in records if r["kind"] == "regressed"]
    for r in regressed[:10]:
        worst = ", ".join(f"{m['metric']} {m['delta']:+.4f}" for m in r["metrics"] if m["direction"] == "regressed")
        text.append(f"  regressed: {r['case_id']}: {worst}")
    if len(regressed) > 10:
        text.append(f"  … and {len(regressed) - 10} more regressed case(s)")
    text.append(f"  wrote {out_path}")
    text.append(f"  wrote {report_path}")
    print("\n".join(text), file=out, flush=True)
    return EXIT_OK


def _f(v: float | None) -> str:
    return "null" if v is None else f"{v:.4f}"
