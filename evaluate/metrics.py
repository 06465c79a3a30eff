"""Per-case scores, aggregate metrics and their definitions (docs/evaluate.md)."""

from __future__ import annotations

import math
from typing import Any

from taguru_server.evaluate.evalfile import Case, normalize_entry

MATCHING = {
    "normalization": "taguru::context::normalize_entry",
    "normalized": ["expected_concepts", "expected_labels"],
    "sources": "exact (source, paragraph) match — no normalization",
}

RATIO, MS = "ratio", "ms"
DIST, RAT = "distribution", "ratio"

# key: (unit, statistic, description, source, caveat)
_DEFS: dict[str, tuple[str, str, str, str, str | None]] = {
    "budget.bytes_used": (
        "byte",
        DIST,
        "Bytes of the served evidence per case, measured with the server's evidence accounting.",
        "case budget.bytes_used (server usage under --assembly, client accounting for a budgeted baseline)",
        "Only cases that carry a budget block contribute; an unbudgeted baseline has none.",
    ),
    "budget.items_used": (
        "item",
        DIST,
        "Items admitted under the budget per case.",
        "case budget.items_used",
        "Only cases that carry a budget block contribute; an unbudgeted baseline has none.",
    ),
    "budget.omitted_rate": (
        RATIO,
        RAT,
        "Share of candidates dropped by the budget.",
        "Σ budget-dropped / Σ(omitted_total + items_used) over cases with a budget block",
        "Under --assembly only budget_exceeded and contradiction_group_exceeds_budget count as "
        "dropped; duplicate_passage is in the denominator only.",
    ),
    "budget.tokens_used": (
        "token",
        DIST,
        "Estimated tokens of the served evidence per case (¼ per ASCII code point, 1 per other).",
        "case budget.tokens_used",
        "The estimator is the server's contract estimate, not a real tokenizer.",
    ),
    "citations.locator_validity": (
        RATIO,
        DIST,
        "Share of a case's expected citations whose locator resolves, with the declared section and quote matching.",
        "case citations.validity.value (POST /contexts/{name}/citations)",
        "Validity does not depend on whether the passage was served; see citations.recall.",
    ),
    "citations.no_paragraph": (
        RATIO,
        RAT,
        "Share of citation calls answered 404 no_paragraph.",
        "citation checks with outcome unresolved and code no_paragraph / all citation calls",
        None,
    ),
    "citations.no_source": (
        RATIO,
        RAT,
        "Share of citation calls answered 404 no_source.",
        "citation checks with outcome unresolved and code no_source / all citation calls",
        None,
    ),
    "citations.other": (
        RATIO,
        RAT,
        "Share of citation calls that failed otherwise (transport, other status, unreadable body).",
        "citation checks with outcome unresolved and any other code / all citation calls",
        None,
    ),
    "citations.quote_match": (
        RATIO,
        RAT,
        "Share of resolved citations declaring a quote whose normalised quote occurs in the served paragraph.",
        "resolved checks with quote.matched / resolved checks declaring a quote",
        "Substring match after normalize_entry; a quote crossing a paragraph boundary never matches.",
    ),
    "citations.recall": (
        RATIO,
        DIST,
        "Share of a case's expected citations found among the served (source, paragraph) set.",
        "case citations.recall.value",
        "The served set is the lane's hits plus structural attributions; under --assembly it includes "
        "citation_refs of admitted associations.",
    ),
    "citations.resolved": (
        RATIO,
        RAT,
        "Share of citation calls that resolved (200).",
        "citation checks with outcome resolved / all citation calls",
        None,
    ),
    "citations.section_match": (
        RATIO,
        RAT,
        "Share of resolved citations declaring a section whose served section matches.",
        "resolved checks with section.check matched / resolved checks declaring section",
        "A declared null asserts the paragraph is outside every section and counts.",
    ),
    "coverage.associations": (
        RATIO,
        DIST,
        "Share of expected associations found by resolve → query.",
        "case coverage.associations.value",
        "A query runs only when all three positions resolve to exactly one name; no guessing.",
    ),
    "coverage.concepts": (
        RATIO,
        DIST,
        "Share of expected concepts resolved from the case's cues.",
        "case coverage.concepts.value (POST /contexts/{name}/resolve, top tier, limit 5)",
        "Normalised equality (normalize_entry) against top-tier names only.",
    ),
    "coverage.labels": (
        RATIO,
        DIST,
        "Share of expected labels resolved from the case's cues.",
        "case coverage.labels.value (POST /contexts/{name}/resolve_label, top tier, limit 5)",
        "Normalised equality (normalize_entry) against top-tier names only.",
    ),
    "diversity.sources": (
        "source",
        DIST,
        "Distinct sources among a case's hits.",
        "case diversity_sources",
        "Under --assembly association citation_refs and community locators enter hits[].",
    ),
    "lanes.both": (
        RATIO,
        RAT,
        "Share of lane-cross cases hit by both the structural and the passage lane.",
        "cases with lane_cross.structural_hit and lane_cross.passage_hit / cases with lane_cross",
        None,
    ),
    "lanes.neither": (
        RATIO,
        RAT,
        "Share of lane-cross cases hit by neither lane.",
        "cases with neither hit / cases with lane_cross",
        None,
    ),
    "lanes.passage_hit": (
        RATIO,
        RAT,
        "Share of lane-cross cases whose passage lane matched an expected source.",
        "cases with lane_cross.passage_hit / cases with lane_cross",
        "Association citation_refs enter hits[] under --assembly, so this is not comparable across modes.",
    ),
    "lanes.structural_hit": (
        RATIO,
        RAT,
        "Share of lane-cross cases whose structural lane matched anything expected.",
        "cases with lane_cross.structural_hit / cases with lane_cross",
        "Only cases that declare both structural expectations and an expected source take part.",
    ),
    "latency.citation_ms": (
        MS,
        DIST,
        "Latency of every POST /contexts/{name}/citations call.",
        "citation check latency_ms",
        "Client-side wall time, including transport.",
    ),
    "latency.evidence_ms": (
        MS,
        DIST,
        "Latency of every POST /contexts/{name}/evidence call.",
        "evidence.latency_ms",
        "Empty in baseline mode; client-side wall time.",
    ),
    "latency.passage_ms": (
        MS,
        DIST,
        "Latency of the case's passage lane call (the evidence call under --assembly).",
        "case passage.latency_ms",
        None,
    ),
    "latency.query_ms": (
        MS,
        DIST,
        "Latency of every POST /contexts/{name}/query call.",
        "structural association query latency_ms",
        "Only probes whose three positions resolved query.",
    ),
    "latency.resolve_ms": (
        MS,
        DIST,
        "Latency of every resolve and resolve_label call.",
        "structural cue records and all three positions of each association probe",
        None,
    ),
    "passage.failure_rate": (
        RATIO,
        RAT,
        "Share of cases whose passage (or evidence) lane failed.",
        "cases with passage.outcome failed / cases",
        None,
    ),
    "recall.mrr": (
        RATIO,
        DIST,
        "Reciprocal rank of the first hit satisfying any expected source.",
        "case recall.mrr",
        "Rank comes from the hit order, never from scores.",
    ),
    "recall.ndcg": (
        RATIO,
        DIST,
        "Normalised DCG with the declared relevance as gain.",
        "case recall.ndcg",
        "One credit per expected source at its first satisfying hit.",
    ),
    "recall.recall_at_k": (
        RATIO,
        DIST,
        "Share of expected sources (relevance ≥ 1) satisfied by some hit, k = len(hits).",
        "case recall.recall_at_k",
        "k is the number of hits served, bounded by the case limit and, when given, the budget.",
    ),
    "rerank.ran": (
        RATIO,
        RAT,
        "Share of attempted reranks that ran (1 − degrade rate).",
        "evidence.reranker.ran over cases with --rerank, assembled, reason != empty_pool",
        "plan.reranker.configured is server state and is ignored.",
    ),
    "structural.case_rate": (
        RATIO,
        RAT,
        "Share of cases that ran the structural lane.",
        "cases with a structural block / cases",
        None,
    ),
}

METRIC_NAMES = sorted(_DEFS)
CASE_SCOPED = (
    "recall.recall_at_k",
    "recall.mrr",
    "recall.ndcg",
    "coverage.concepts",
    "coverage.labels",
    "coverage.associations",
    "citations.recall",
    "citations.locator_validity",
    "latency.passage_ms",
    "diversity.sources",
)
CLASSIFICATION = tuple(m for m in CASE_SCOPED if m != "latency.passage_ms")


def definitions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in METRIC_NAMES:
        unit, stat, desc, source, caveat = _DEFS[key]
        out[key] = {
            "unit": unit,
            "statistic": stat,
            "scopes": ["case"] if stat == DIST else ["run"],
            "description": desc,
            "source": source,
            "caveat": caveat,
        }
    return out


def statistic(metric: str) -> str:
    return _DEFS[metric][1]


# ----- per-case scores -------------------------------------------------------------


def _sat(e: Any, hit: dict[str, Any]) -> bool:
    return hit["source"] == e.source and (not e.paragraphs or hit["paragraph"] in e.paragraphs)


def recall_block(case: Case, hits: list[dict[str, Any]]) -> dict[str, Any] | None:
    expected = [e for e in case.expected_sources if e.relevance >= 1]
    m = len(expected)
    if m == 0:
        return None
    firsts: list[int | None] = []
    for e in expected:
        firsts.append(next((r for r, h in enumerate(hits) if _sat(e, h)), None))
    matched = sum(1 for r in firsts if r is not None)
    first_any = next((r for r, h in enumerate(hits) if any(_sat(e, h) for e in expected)), None)
    mrr = 0.0 if first_any is None else 1.0 / (first_any + 1)
    dcg = sum(e.relevance / math.log2(r + 2) for e, r in zip(expected, firsts, strict=False) if r is not None)
    rels = sorted((e.relevance for e in expected), reverse=True)
    idcg = sum(rel / math.log2(j + 2) for j, rel in enumerate(rels))
    ndcg = min(dcg / idcg, 1.0) if idcg > 0 else 0.0
    return {"recall_at_k": matched / m, "mrr": mrr, "ndcg": ndcg, "expected_total": m, "matched": matched}


def _part(expected: int, matched: int) -> dict[str, Any]:
    return {"expected": expected, "matched": matched, "value": matched / expected}


def coverage_block(case: Case, structural: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, wanted in (("concept", case.expected_concepts), ("label", case.expected_labels)):
        if not wanted:
            continue
        names = {normalize_entry(n) for rec in structural["cues"] if rec["kind"] == kind for n in rec["resolved_names"]}
        matched = sum(1 for w in wanted if normalize_entry(w) in names)
        out["concepts" if kind == "concept" else "labels"] = _part(len(wanted), matched)
    if case.expected_associations:
        matched = sum(
            1
            for a in structural["associations"]
            if a.get("query", {}).get("outcome") == "queried" and a["query"]["total"] >= 1
        )
        out["associations"] = _part(len(case.expected_associations), matched)
    return out


def citations_block(case: Case, checks: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(checks)
    served = sum(1 for c in checks if c["served"])
    valid = sum(1 for c in checks if check_valid(c))
    return {
        "recall": {"expected_total": n, "matched": served, "value": served / n},
        "validity": {"expected_total": n, "valid": valid, "value": valid / n},
        "checks": checks,
    }


def check_valid(c: dict[str, Any]) -> bool:
    if c["outcome"] != "resolved":
        return False
    if c["section"]["check"] == "mismatched":
        return False
    return "quote" not in c or c["quote"]["matched"]


def missed_list(
    case: Case,
    hits: list[dict[str, Any]] | None,
    structural: dict[str, Any] | None,
    checks: list[dict[str, Any]] | None,
) -> tuple[list[str], int]:
    out: list[str] = []
    if hits is not None:
        for e in case.expected_sources:
            if e.relevance >= 1 and not any(_sat(e, h) for h in hits):
                out.append(f"expected_sources: '{e.source}' not found among passage hits")
    if structural is not None:
        for kind, wanted, key in (
            ("concept", case.expected_concepts, "expected_concepts"),
            ("label", case.expected_labels, "expected_labels"),
        ):
            names = {
                normalize_entry(n) for rec in structural["cues"] if rec["kind"] == kind for n in rec["resolved_names"]
            }
            for w in wanted:
                if normalize_entry(w) not in names:
                    out.append(f"{key}: '{w}' not resolved")
        for a in structural["associations"]:
            why = _association_why(a)
            if why:
                out.append(f"expected_associations: ({a['subject_cue']}, {a['label_cue']}, {a['object_cue']}) {why}")
    for c in checks or []:
        if not c["served"]:
            out.append(f"expected_citations: ({c['source']}, {c['paragraph']}) not found among served results")
        if not check_valid(c):
            out.append(f"expected_citations: ({c['source']}, {c['paragraph']}) failed locator validity")
    return out[:3], max(0, len(out) - 3)


def _association_why(a: dict[str, Any]) -> str | None:
    q = a.get("query")
    if q is not None:
        if q["outcome"] == "queried":
            return None if q["total"] >= 1 else "query returned no association"
        return "query errored"
    errored = [(pos, a[pos]["message"]) for pos in ("subject", "label", "object") if a[pos]["outcome"] == "errored"]
    if errored:
        detail = "; ".join(f"{pos}: {msg}" for pos, msg in errored)
        return f"a position could not be resolved due to a transport error: {detail}"
    return "query never ran (a position did not pin)"


# ----- aggregates ------------------------------------------------------------------


def distribution(samples: list[float]) -> dict[str, Any]:
    xs = sorted(float(x) for x in samples if isinstance(x, (int, float)) and math.isfinite(float(x)))
    n = len(xs)
    if n == 0:
        return {"n": 0, "min": None, "p50": None, "p90": None, "p99": None, "max": None, "mean": None, "sum": None}

    def pct(p: int) -> float:
        idx = min(max(math.ceil(p * n / 100), 1), n) - 1
        return xs[idx]

    total = float(sum(xs))
    return {
        "n": n,
        "min": xs[0],
        "p50": pct(50),
        "p90": pct(90),
        "p99": pct(99),
        "max": xs[-1],
        "mean": total / n,
        "sum": total,
    }


def ratio(numerator: int, n: int) -> dict[str, Any]:
    if n == 0:
        return {"value": None, "n": 0, "numerator": None}
    return {"value": numerator / n, "n": n, "numerator": numerator}


def case_value(case: dict[str, Any], metric: str) -> float | None:
    """The case's own field for a case-scoped metric, or None when not applicable."""
    if metric.startswith("recall."):
        r = case.get("recall")
        return None if r is None else r.get(metric.split(".", 1)[1])
    if metric.startswith("coverage."):
        part = (case.get("coverage") or {}).get(metric.split(".", 1)[1])
        return None if part is None else part.get("value")
    if metric == "citations.recall":
        c = case.get("citations")
        return None if c is None else (c.get("recall") or {}).get("value")
    if metric == "citations.locator_validity":
        c = case.get("citations")
        return None if c is None else (c.get("validity") or {}).get("value")
    if metric == "diversity.sources":
        return case.get("diversity_sources")
    if metric == "latency.passage_ms":
        return (case.get("passage") or {}).get("latency_ms")
    raise KeyError(metric)


BUDGET_DROP_REASONS = ("budget_exceeded", "contradiction_group_exceeds_budget")


def aggregate(cases: list[dict[str, Any]], rerank: bool) -> dict[str, Any]:
    """Every aggregate metric over the cases, keyed and sorted by metric name."""
    out: dict[str, Any] = {m: distribution(v) for m, v in _samples(cases).items()}
    out.update(_citation_ratios(cases))
    out.update(_lane_ratios(cases))
    n_cases = len(cases)
    out["passage.failure_rate"] = ratio(sum(1 for c in cases if c["passage"]["outcome"] == "failed"), n_cases)
    out["structural.case_rate"] = ratio(sum(1 for c in cases if "structural" in c), n_cases)
    out["budget.omitted_rate"] = _budget_omitted_rate(cases)
    out["rerank.ran"] = _rerank_ran(cases, rerank)
    return {k: out[k] for k in sorted(out)}


def _samples(cases: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per distribution metric, the samples every case contributes."""
    samples: dict[str, list[float]] = {m: [] for m in METRIC_NAMES if statistic(m) == DIST}
    for c in cases:
        for m in CASE_SCOPED:
            v = case_value(c, m)
            if v is not None:
                samples[m].append(v)
        st = c.get("structural")
        if st:
            _add_structural_latencies(st, samples)
        for chk in (c.get("citations") or {}).get("checks", []):
            samples["latency.citation_ms"].append(chk["latency_ms"])
        ev = c.get("evidence")
        if ev is not None:
            samples["latency.evidence_ms"].append(ev["latency_ms"])
        b = c.get("budget")
        if b is not None:
            samples["budget.items_used"].append(b["items_used"])
            samples["budget.bytes_used"].append(b["bytes_used"])
            samples["budget.tokens_used"].append(b["tokens_used"])
    return samples


def _add_structural_latencies(st: dict[str, Any], samples: dict[str, list[float]]) -> None:
    """A case's resolve and query latencies from its structural lane."""
    for rec in st["cues"]:
        samples["latency.resolve_ms"].append(rec["latency_ms"])
    for a in st["associations"]:
        for pos in ("subject", "label", "object"):
            samples["latency.resolve_ms"].append(a[pos]["latency_ms"])
        if "query" in a:
            samples["latency.query_ms"].append(a["query"]["latency_ms"])


def _citation_ratios(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """How the citation checks of all cases came out."""
    checks = [chk for c in cases for chk in (c.get("citations") or {}).get("checks", [])]
    n_calls = len(checks)
    resolved = [chk for chk in checks if chk["outcome"] == "resolved"]
    failed_codes = [k.get("code") for k in checks if k["outcome"] != "resolved"]
    return {
        "citations.resolved": ratio(len(resolved), n_calls),
        "citations.no_source": ratio(sum(1 for code in failed_codes if code == "no_source"), n_calls),
        "citations.no_paragraph": ratio(sum(1 for code in failed_codes if code == "no_paragraph"), n_calls),
        "citations.other": ratio(sum(1 for code in failed_codes if code not in ("no_source", "no_paragraph")), n_calls),
        **_match_ratios(resolved),
    }


def _match_ratios(resolved: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the resolved citations' sections and quotes matched, where they were checked."""
    sec = [k for k in resolved if k["section"]["check"] != "not_checked"]
    quo = [k for k in resolved if "quote" in k]
    return {
        "citations.section_match": ratio(sum(1 for k in sec if k["section"]["check"] == "matched"), len(sec)),
        "citations.quote_match": ratio(sum(1 for k in quo if k["quote"]["matched"]), len(quo)),
    }


def _lane_ratios(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the structural and passage lanes found the expected evidence, alone or together."""
    lx = [c["lane_cross"] for c in cases if "lane_cross" in c]
    return {
        "lanes.structural_hit": ratio(sum(1 for x in lx if x["structural_hit"]), len(lx)),
        "lanes.passage_hit": ratio(sum(1 for x in lx if x["passage_hit"]), len(lx)),
        "lanes.both": ratio(sum(1 for x in lx if x["structural_hit"] and x["passage_hit"]), len(lx)),
        "lanes.neither": ratio(sum(1 for x in lx if not x["structural_hit"] and not x["passage_hit"]), len(lx)),
    }


def _budget_omitted_rate(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The share of candidate items the budget dropped."""
    dropped = denom = 0
    for c in cases:
        b = c.get("budget")
        if b is None:
            continue
        denom += b["omitted_total"] + b["items_used"]
        ev = c.get("evidence")
        if ev is not None:
            by_reason = ev.get("omitted_by_reason", {})
            dropped += sum(by_reason.get(r, 0) for r in BUDGET_DROP_REASONS)
        else:
            dropped += b["omitted_total"]
    return ratio(dropped, denom)


def _rerank_ran(cases: list[dict[str, Any]], rerank: bool) -> dict[str, Any]:
    """The share of assembled evidence requests with a non-empty pool on which the reranker ran."""
    attempted = ran = 0
    if rerank:
        for c in cases:
            ev = c.get("evidence")
            if ev is None or ev["outcome"] != "assembled" or ev["reranker"].get("reason") == "empty_pool":
                continue
            attempted += 1
            ran += 1 if ev["reranker"].get("ran") else 0
    return ratio(ran, attempted)


def scalar(metric: str, value: Any) -> float | None:
    """A distribution's mean or a ratio's value."""
    if not isinstance(value, dict):
        return None
    return value.get("mean") if statistic(metric) == DIST else value.get("value")
