"""The question runner: each case's lanes against the server, timed, scored into its case record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from taguru_server.client.http import (
    CallError,
    cut,
)
from taguru_server.client.http import TaguruClient as Api
from taguru_server.evaluate.evalfile import UNSET, Case, normalize_entry
from taguru_server.evaluate.metrics import (
    citations_block,
    coverage_block,
    missed_list,
    recall_block,
)
from taguru_server.evaluate.replies import LaneFailed, parse_package, parse_search, stored_hit, top_tier
from taguru_server.evaluate.run_args import CONCURRENCY, RESOLVE_LIMIT, Progress, RunArgs, elapsed_ms
from taguru_server.evaluate.truncate import truncate


class Runner:
    def __init__(self, args: RunArgs, api: Api) -> None:
        self.args = args
        self.api = api
        self.ctx = args.context

    def _seg(self, *rest: str) -> list[str]:
        return ["contexts", self.ctx, *rest]

    async def _timed(self, call: Awaitable[Any]) -> tuple[Any, int, CallError | None]:
        started = time.perf_counter()
        try:
            result = await call
            return result, elapsed_ms(started), None
        except CallError as exc:
            return None, elapsed_ms(started), exc

    # -- passage / evidence lanes

    async def passage_lane(self, case: Case, block: dict[str, Any]) -> list[dict[str, Any]] | None:
        o = case.options
        body = {
            "query": case.query,
            "limit": case.limit,
            "semantic_floor": o.floor,
            "tags": list(o.tags or []),
            "since": o.since,
            "until": o.until,
        }
        result, ms, err = await self._timed(self.api.call("POST", self._seg("sources", "search"), body))
        try:
            if err is not None:
                raise LaneFailed(cut(err.message))
            plan, hits = parse_search(result)
        except LaneFailed as exc:
            block["passage"] = {"outcome": "failed", "message": exc.message, "latency_ms": ms}
            return None
        budget = None
        if self.args.budget_given:
            hits, budget = truncate(self.ctx, hits, self.args.limits)
        passage: dict[str, Any] = {"outcome": "searched"}
        if plan is not None:
            passage["plan"] = plan
        passage["hits"] = [stored_hit(h) for h in hits]
        passage["latency_ms"] = ms
        block["passage"] = passage
        if budget is not None:
            block["_budget"] = budget
        return passage["hits"]

    async def evidence_lane(self, case: Case, block: dict[str, Any]) -> list[dict[str, Any]] | None:
        limits = self.args.limits
        body: dict[str, Any] = {
            "origins": case.effective_cues,
            "text_fallback_query": case.query,
            "search_limit": case.limit,
            "semantic_floor": case.options.floor,
            "budget": limits.as_dict(),
        }
        if self.args.rerank is not None:
            body["rerank"] = {"model": self.args.rerank}
        if self.args.graph_passages:
            body["include_graph_passages"] = True
        result, ms, err = await self._timed(self.api.call("POST", self._seg("evidence"), body))
        try:
            if err is not None:
                raise LaneFailed(cut(err.message))
            pkg = parse_package(result)
        except LaneFailed as exc:
            failed = {"outcome": "failed", "message": exc.message, "latency_ms": ms}
            block["passage"] = dict(failed)
            block["_evidence"] = dict(failed)
            return None
        locators: list[tuple[str, int]] = []
        for it in pkg["items"]:
            if "source" in it:
                locators.append((it["source"], it["paragraph"]))
            locators.extend((r["source"], r["paragraph"]) for r in it["citation_refs"])
        hits = [{"source": s, "paragraph": p, "score": 0.0, "lanes": {}} for s, p in locators[: case.limit]]
        block["passage"] = {"outcome": "searched", "hits": hits, "latency_ms": ms}
        evidence: dict[str, Any] = {"outcome": "assembled", "latency_ms": ms, "items": pkg["items"]}
        if pkg["omitted_by_reason"]:
            evidence["omitted_by_reason"] = pkg["omitted_by_reason"]
        evidence["selection"] = pkg["plan"]["selection"]
        rr = pkg["plan"]["reranker"]
        reranker: dict[str, Any] = {"configured": bool(rr.get("configured")), "ran": bool(rr.get("ran"))}
        for k in ("model", "reason"):
            if rr.get(k) is not None:
                reranker[k] = rr[k]
        evidence["reranker"] = reranker
        block["_evidence"] = evidence
        b = pkg["budget"]
        block["_budget"] = {
            "items_used": b["items_used"],
            "bytes_used": b["bytes_used"],
            "tokens_used": b["tokens_used"],
            "limits": b.get("limits", limits.as_dict()),
            "omitted_total": pkg["omitted_total"],
        }
        return hits

    # -- structural lane

    async def _resolve(self, endpoint: str, cue: str) -> tuple[list[str], str | None, int, str | None]:
        result, ms, err = await self._timed(
            self.api.call("POST", self._seg(endpoint), {"cue": cue, "limit": RESOLVE_LIMIT})
        )
        if err is not None:
            return [], None, ms, cut(err.message)
        try:
            names, tier = top_tier(result)
        except LaneFailed as exc:
            return [], None, ms, cut(exc.message)
        return names, tier, ms, None

    async def _position(self, endpoint: str, cue: str) -> dict[str, Any]:
        names, tier, ms, error = await self._resolve(endpoint, cue)
        if error is not None:
            return {"outcome": "errored", "message": error, "latency_ms": ms}
        if not names:
            return {"outcome": "not_found", "latency_ms": ms}
        if len(names) == 1:
            return {"outcome": "resolved", "name": names[0], "tier": tier, "latency_ms": ms}
        return {"outcome": "ambiguous", "tier": tier, "candidates": names, "latency_ms": ms}

    async def structural_lane(self, case: Case) -> dict[str, Any]:
        cues: list[dict[str, Any]] = []
        for cue in case.effective_cues:
            for kind, endpoint, wanted in (
                ("concept", "resolve", case.expected_concepts),
                ("label", "resolve_label", case.expected_labels),
            ):
                if not wanted:
                    continue
                names, tier, ms, error = await self._resolve(endpoint, cue)
                rec: dict[str, Any] = {"cue": cue, "kind": kind, "resolved_names": names}
                if tier is not None:
                    rec["tier"] = tier
                rec["limit"] = RESOLVE_LIMIT
                rec["latency_ms"] = ms
                if error is not None:
                    rec["error"] = error
                cues.append(rec)
        associations = []
        for a in case.expected_associations:
            rec = {
                "subject_cue": a.subject,
                "label_cue": a.label,
                "object_cue": a.object,
                "subject": await self._position("resolve", a.subject),
                "label": await self._position("resolve_label", a.label),
                "object": await self._position("resolve", a.object),
            }
            if all(rec[p]["outcome"] == "resolved" for p in ("subject", "label", "object")):
                rec["query"] = await self._query(rec)
            associations.append(rec)
        return {"cues": cues, "associations": associations}

    async def _query(self, rec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "subject": rec["subject"]["name"],
            "label": rec["label"]["name"],
            "object": rec["object"]["name"],
            "limit": 1,
        }
        result, ms, err = await self._timed(self.api.call("POST", self._seg("query"), body))
        if err is not None:
            return {"outcome": "errored", "message": cut(err.message), "latency_ms": ms}
        matches = result.get("matches") if isinstance(result, dict) else None
        total = result.get("total") if isinstance(result, dict) else None
        if type(total) is not int or not isinstance(matches, list) or not all(isinstance(m, dict) for m in matches):
            return {
                "outcome": "errored",
                "message": "query answered something other than {total, matches}",
                "latency_ms": ms,
            }
        attributions = []
        for m in matches:
            for at in m.get("attributions") or []:
                if isinstance(at, dict) and isinstance(at.get("source"), str):
                    par = at.get("paragraph")
                    attributions.append({"source": at["source"], "paragraph": par if type(par) is int else None})
        out: dict[str, Any] = {"outcome": "queried", "total": total, "matches": len(matches)}
        if attributions:
            out["attributions"] = attributions
        out["latency_ms"] = ms
        return out

    # -- citation lane

    async def citation_lane(self, case: Case, served: set[tuple[str, int]]) -> list[dict[str, Any]]:
        checks = []
        for c in case.expected_citations:
            result, ms, err = await self._timed(
                self.api.call("POST", self._seg("citations"), {"source": c.source, "paragraph": c.paragraph})
            )
            rec: dict[str, Any] = {
                "source": c.source,
                "paragraph": c.paragraph,
                "served": (c.source, c.paragraph) in served,
            }
            if err is not None:
                rec["outcome"] = "unresolved"
                rec["code"] = err.code if err.status == 404 else None
                rec["message"] = cut(err.message)
            elif not (
                isinstance(result, dict)
                and isinstance(result.get("text"), str)
                and (result.get("section") is None or isinstance(result.get("section"), str))
            ):
                rec["outcome"] = "unresolved"
                rec["code"] = None
                rec["message"] = cut("citation answered something other than {text, source, section, locator}")
            else:
                rec["outcome"] = "resolved"
                if c.section is UNSET:
                    rec["section"] = {"check": "not_checked"}
                else:
                    check = "matched" if c.section == result.get("section") else "mismatched"
                    rec["section"] = {"check": check, "expected": c.section}
                if c.quote is not None:
                    rec["quote"] = {
                        "declared": c.quote,
                        "matched": normalize_entry(c.quote) in normalize_entry(result["text"]),
                    }
            rec["latency_ms"] = ms
            checks.append(rec)
        return checks

    # -- one case

    async def run_case(self, case: Case) -> dict[str, Any]:
        """Run the case's lanes and return its result record."""
        work: dict[str, Any] = {}
        if self.args.assembly:
            hits = await self.evidence_lane(case, work)
        else:
            hits = await self.passage_lane(case, work)
        structural = None
        if case.expected_concepts or case.expected_labels or case.expected_associations:
            structural = await self.structural_lane(case)
        served = _served_paragraphs(hits, structural)
        checks = await self.citation_lane(case, served) if case.expected_citations else None
        return _case_record(case, work, hits, structural, checks)


def _served_paragraphs(hits: list[dict[str, Any]] | None, structural: dict[str, Any] | None) -> set[tuple[str, int]]:
    """The (source, paragraph) pairs the passage hits and structural attributions served."""
    served = {(h["source"], h["paragraph"]) for h in hits or []}
    for a in (structural or {}).get("associations", []):
        for at in a.get("query", {}).get("attributions", []):
            if at["paragraph"] is not None:
                served.add((at["source"], at["paragraph"]))
    return served


def _case_record(
    case: Case,
    work: dict[str, Any],
    hits: list[dict[str, Any]] | None,
    structural: dict[str, Any] | None,
    checks: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """One case's result record from what its lanes returned."""
    block: dict[str, Any] = {"case_id": case.case_id, "query": case.query}
    if case.cues:
        block["cues"] = list(case.cues)
    block["limit"] = case.limit
    block["passage"] = work["passage"]
    if structural is not None:
        block["structural"] = structural
    recall = recall_block(case, hits) if hits is not None else None
    if recall is not None:
        block["recall"] = recall
    coverage = coverage_block(case, structural) if structural is not None else None
    if coverage is not None:
        block["coverage"] = coverage
    if structural is not None and recall is not None:
        assert coverage is not None
        block["lane_cross"] = {
            "structural_hit": any(p["matched"] > 0 for p in coverage.values()),
            "passage_hit": recall["matched"] > 0,
        }
    if checks is not None:
        block["citations"] = citations_block(case, checks)
    missed, truncated = missed_list(case, hits, structural, checks)
    block["missed"] = missed
    block["missed_truncated"] = truncated
    if "_evidence" in work:
        block["evidence"] = work["_evidence"]
    if "_budget" in work:
        block["budget"] = work["_budget"]
    if hits is not None:
        block["diversity_sources"] = len({h["source"] for h in hits})
    return block


async def run_cases(
    runner: Runner, cases: list[Case], progress: Progress, concurrency: int = CONCURRENCY
) -> list[dict[str, Any]]:
    """Run every case with at most `concurrency` in flight; results keep file order."""
    gate_ = asyncio.Semaphore(max(1, concurrency))
    results: list[dict[str, Any] | None] = [None] * len(cases)

    async def one(i: int, case: Case) -> None:
        async with gate_:
            results[i] = await runner.run_case(case)
            progress.step(case.case_id)

    await asyncio.gather(*(one(i, c) for i, c in enumerate(cases)))
    return [r for r in results if r is not None]
