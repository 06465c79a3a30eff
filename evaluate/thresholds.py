"""The thresholds file (docs/evaluate.md, "Thresholds file"): strict loading, the gate and its report."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from taguru_server.evaluate.evalfile import EvalError, unknown_field
from taguru_server.evaluate.metrics import CASE_SCOPED, METRIC_NAMES, case_value, scalar

UNSTABLE_REASON = (
    "the context's revision changed during this run (corpus.revision_before != corpus.revision_after) "
    "and allow_unstable_corpus is false"
)
NOT_APPLICABLE = "not applicable — the case did not declare the matching expectation, or its lane did not complete"


@dataclass
class Bound:
    min: float | None = None
    max: float | None = None


@dataclass
class Thresholds:
    path: str
    sha256: str
    aggregate: dict[str, Bound] = field(default_factory=dict)
    default: dict[str, Bound] = field(default_factory=dict)
    overrides: dict[str, dict[str, Bound]] = field(default_factory=dict)
    allow_unstable_corpus: bool = False


class _Parse(Exception):
    pass


def rust_f64(v: float) -> str:
    """f64 Display as the reference prints it (`1`, `0.5`, `inf`, `NaN`)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 1e16:
        return str(int(v))
    return repr(v)


def _only(obj: Any, what: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _Parse(f"invalid type: expected {what}")
    refusal = unknown_field(obj, allowed)
    if refusal is not None:
        raise _Parse(refusal)
    return obj


def _bound(raw: Any, where: str) -> Bound:
    obj = _only(raw, f"struct Bound at {where}", ("min", "max"))
    b = Bound()
    for key in ("min", "max"):
        v = obj.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Parse(f"{where}.{key}: invalid type: expected f64")
        setattr(b, key, float(v))
    return b


def _bounds(raw: Any, where: str) -> dict[str, Bound]:
    if not isinstance(raw, dict):
        raise _Parse(f"{where}: invalid type: expected a map")
    return {k: _bound(v, f"{where}.{k}") for k, v in raw.items()}


def _bound_errors(scope: str, metric: str, b: Bound) -> list[str]:
    if b.min is None and b.max is None:
        return [f"{scope}: '{metric}': needs at least one of min/max"]
    errs = []
    if b.min is not None and not math.isfinite(b.min):
        errs.append(f"{scope}: '{metric}': min {rust_f64(b.min)} must be finite")
    if b.max is not None and not math.isfinite(b.max):
        errs.append(f"{scope}: '{metric}': max {rust_f64(b.max)} must be finite")
    if not errs and b.min is not None and b.max is not None and b.min > b.max:
        errs.append(f"{scope}: '{metric}': min {rust_f64(b.min)} must be <= max {rust_f64(b.max)}")
    return errs


def load_thresholds(path: str, case_ids: list[str]) -> Thresholds:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalError(f"cannot read {path}: {exc}") from None
    try:
        doc = json.loads(text)
        top = _only(
            doc, "struct ThresholdsFile", ("taguru_evaluate_thresholds", "aggregate", "cases", "allow_unstable_corpus")
        )
        if "taguru_evaluate_thresholds" not in top:
            raise _Parse("missing field `taguru_evaluate_thresholds`")
        stamp = top["taguru_evaluate_thresholds"]
        if type(stamp) is not int:
            raise _Parse("taguru_evaluate_thresholds: invalid type: expected u32")
        aggregate = _bounds(top["aggregate"], "aggregate") if top.get("aggregate") is not None else {}
        default: dict[str, Bound] = {}
        overrides: dict[str, dict[str, Bound]] = {}
        if top.get("cases") is not None:
            cases = _only(top["cases"], "struct CaseThresholds", ("default", "overrides"))
            if cases.get("default") is not None:
                default = _bounds(cases["default"], "cases.default")
            if cases.get("overrides") is not None:
                ov = cases["overrides"]
                if not isinstance(ov, dict):
                    raise _Parse("cases.overrides: invalid type: expected a map")
                overrides = {cid: _bounds(v, f"cases.overrides.{cid}") for cid, v in ov.items()}
        allow = top.get("allow_unstable_corpus")
        if allow is not None and not isinstance(allow, bool):
            raise _Parse("allow_unstable_corpus: invalid type: expected a boolean")
    except (ValueError, RecursionError, _Parse) as exc:
        raise EvalError(f"{path}: {exc}") from None
    if stamp != 1:
        raise EvalError(f"{path}: taguru_evaluate_thresholds must be 1, got {stamp}")
    problems: list[str] = []
    known = set(METRIC_NAMES)
    for m in sorted(aggregate):
        if m not in known:
            problems.append(f"aggregate: unknown metric name '{m}'")
        else:
            problems.extend(_bound_errors("aggregate", m, aggregate[m]))
    for m in sorted(default):
        if m not in CASE_SCOPED:
            problems.append(f"cases.default: unknown (or not case-scoped) metric name '{m}'")
        else:
            problems.extend(_bound_errors("cases.default", m, default[m]))
    ids = set(case_ids)
    for cid in sorted(overrides):
        if cid not in ids:
            problems.append(f"cases.overrides: unknown case_id '{cid}'")
            continue
        for m in sorted(overrides[cid]):
            if m not in CASE_SCOPED:
                problems.append(f"cases.overrides.{cid}: unknown (or not case-scoped) metric name '{m}'")
            else:
                problems.extend(_bound_errors(f"cases.overrides.{cid}", m, overrides[cid][m]))
    if problems:
        raise EvalError(f"{path}: " + "; ".join(problems))
    return Thresholds(path, hashlib.sha256(raw).hexdigest(), aggregate, default, overrides, bool(allow))


def _check(value: float, b: Bound) -> tuple[str, float, str] | None:
    if b.min is not None and value < b.min:
        return "min", b.min, f"{value:.6f} < min {b.min:.6f}"
    if b.max is not None and value > b.max:
        return "max", b.max, f"{value:.6f} > max {b.max:.6f}"
    return None


def gate(t: Thresholds, metrics: dict[str, Any], cases: list[dict[str, Any]], stable: bool) -> dict[str, Any]:
    violations: list[dict[str, Any]] = []
    skipped: list[str] = []
    for m in sorted(t.aggregate):
        value = scalar(m, metrics.get(m))
        if value is None:
            violations.append(
                {"scope": "aggregate", "metric": m, "actual": None, "reason": "no samples for this metric (n=0)"}
            )
            continue
        hit = _check(value, t.aggregate[m])
        if hit:
            violations.append(
                {
                    "scope": "aggregate",
                    "metric": m,
                    "bound": hit[0],
                    "threshold": hit[1],
                    "actual": value,
                    "reason": hit[2],
                }
            )
    for case in cases:
        cid = case["case_id"]
        bounds = dict(t.default)
        bounds.update(t.overrides.get(cid, {}))
        for m in sorted(bounds):
            value = case_value(case, m)
            if value is None:
                skipped.append(f"case '{cid}': '{m}' {NOT_APPLICABLE}")
                continue
            hit = _check(float(value), bounds[m])
            if hit:
                violations.append(
                    {
                        "scope": "case",
                        "case_id": cid,
                        "metric": m,
                        "bound": hit[0],
                        "threshold": hit[1],
                        "actual": value,
                        "reason": hit[2],
                    }
                )
    if not stable and not t.allow_unstable_corpus:
        violations.append({"scope": "corpus", "metric": "corpus.stable", "actual": None, "reason": UNSTABLE_REASON})
    report: dict[str, Any] = {
        "sha256": t.sha256,
        "passed": not violations,
        "allow_unstable_corpus": t.allow_unstable_corpus,
    }
    if violations:
        report["violations"] = violations
    if skipped:
        report["skipped"] = skipped
    return report
