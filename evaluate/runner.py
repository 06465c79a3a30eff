"""Run mode: preflight, per-case lanes, metrics, thresholds, the artifact and the summary.

docs/evaluate.md ("How it works") describes a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from taguru_server.client.http import (
    CallError,
    SetupError,
    base_url,
    bearer_token,
    cut,
    environment,
    mask_url,
    new_session,
)
from taguru_server.client.http import TaguruClient as Api
from taguru_server.client.progress import Progress as ProgressBar
from taguru_server.evaluate import html as html_report
from taguru_server.evaluate.evalfile import UNSET, Case, EvalError, EvalSet, load_eval, normalize_entry
from taguru_server.evaluate.metrics import (
    MATCHING,
    aggregate,
    citations_block,
    coverage_block,
    definitions,
    missed_list,
    recall_block,
    scalar,
)
from taguru_server.evaluate.thresholds import Thresholds, gate, load_thresholds
from taguru_server.evaluate.truncate import Limits, truncate

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_THRESHOLDS = 0, 1, 2, 3
DEFAULT_LIMIT = 10
RESOLVE_LIMIT = 5
SOURCES_PAGE = 1000
CONCURRENCY = 1  # cases run sequentially, in file order
REPORT_ONLY = "no --thresholds given — this run is report-only and always exits 0"


@dataclass
class RunArgs:
    eval: str
    context: str
    url: str | None = None
    config: str | None = None
    out: str = "evaluation.json"
    thresholds: str | None = None
    assembly: bool = False
    max_items: int | None = None
    max_bytes: int | None = None
    max_tokens: int | None = None
    rerank: str | None = None

    @property
    def budget_given(self) -> bool:
        return self.max_items is not None or self.max_bytes is not None or self.max_tokens is not None

    @property
    def limits(self) -> Limits:
        return Limits(
            min(self.max_items or 40, 1000),
            min(self.max_bytes or 65536, 1048576),
            self.max_tokens or 4000,
        )


class Fatal(Exception):
    """Ends the run with an exit code after printing `taguru: evaluate: {msg}`."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def warn(msg: str, err: TextIO | None = None) -> None:
    print(f"taguru: evaluate: {msg}", file=err or sys.stderr, flush=True)


def _ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


class Progress:
    """The case count, rate and ETA as a one-line bar on a TTY; silent otherwise."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.bar = ProgressBar("taguru evaluate", total, stream, unit="cases")
        self.enabled = self.bar.enabled

    @property
    def done(self) -> int:
        return self.bar.done

    def step(self, case_id: str) -> None:
        self.bar.update(advance=1, note=case_id)

    def close(self) -> None:
        self.bar.close()


# ----- lanes -----------------------------------------------------------------------


class LaneFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _parse_hit(h: Any, fallback: bool) -> dict[str, Any]:
    if not isinstance(h, dict):
        raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
    if fallback:
        if "source" not in h:
            raise LaneFailed("a hit is missing 'source'")
        if "paragraph" not in h:
            raise LaneFailed("a hit is missing 'paragraph'")
    ok = isinstance(h.get("source"), str) and type(h.get("paragraph")) is int and h["paragraph"] >= 0
    if not ok:
        raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
    score = h.get("score", 0.0)
    text = h.get("text", "")
    lanes = h.get("lanes", {}) if not fallback else {}
    if not _num(score) or not isinstance(text, str) or not isinstance(lanes, dict):
        raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
    kept: dict[str, Any] = {}
    for lane in ("bm25", "vector"):
        ev = lanes.get(lane)
        if ev is None:
            continue
        if not isinstance(ev, dict) or type(ev.get("rank")) is not int or not _num(ev.get("score")):
            raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
        kept[lane] = {"rank": ev["rank"], "score": ev["score"]}
    return {"source": h["source"], "paragraph": h["paragraph"], "score": score, "text": text, "lanes": kept}


def _parse_plan(plan: Any) -> dict[str, Any]:
    bad = LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
    if not isinstance(plan, dict) or not isinstance(plan.get("contexts"), list) or not plan["contexts"]:
        raise bad
    entry = plan["contexts"][0]
    if not isinstance(entry, dict) or not isinstance(entry.get("lanes"), dict):
        raise bad
    out: dict[str, Any] = {"context": entry.get("context")}
    lanes: dict[str, Any] = {}
    for lane in ("bm25", "vector"):
        lp = entry["lanes"].get(lane)
        if not isinstance(lp, dict) or not isinstance(lp.get("ran"), bool):
            raise bad
        kept: dict[str, Any] = {"ran": lp["ran"]}
        for k in ("reason", "floor"):
            if lp.get(k) is not None:
                kept[k] = lp[k]
        lanes[lane] = kept
    out["lanes"] = lanes
    filt = entry.get("filter")
    if isinstance(filt, dict):
        out["filter"] = {"eligible_sources": filt.get("eligible_sources"), "total_sources": filt.get("total_sources")}
    return out


def parse_search(result: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    if isinstance(result, dict) and "plan" in result and "hits" in result:
        if not isinstance(result["hits"], list):
            raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
        return _parse_plan(result["plan"]), [_parse_hit(h, False) for h in result["hits"]]
    if isinstance(result, list):
        return None, [_parse_hit(h, True) for h in result]
    if isinstance(result, dict) and isinstance(result.get("hits"), list):
        return None, [_parse_hit(h, True) for h in result["hits"]]
    raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")


def _stored(h: dict[str, Any]) -> dict[str, Any]:
    return {"source": h["source"], "paragraph": h["paragraph"], "score": h["score"], "lanes": h["lanes"]}


_PACKAGE_KEYS = ("items", "citations", "budget", "omitted", "omitted_total", "omitted_by_reason", "plan")


def parse_package(result: Any) -> dict[str, Any]:
    def bad(detail: str) -> LaneFailed:
        return LaneFailed(f"response carries no recognizable evidence package ({detail})")

    if not isinstance(result, dict):
        raise bad("the result is not an object")
    for k in _PACKAGE_KEYS:
        if k not in result:
            raise bad(f"missing '{k}'")
    if not isinstance(result["items"], list) or not isinstance(result["citations"], list):
        raise bad("'items' and 'citations' must be arrays")
    budget = result["budget"]
    if not isinstance(budget, dict) or not all(
        type(budget.get(k)) is int for k in ("items_used", "bytes_used", "tokens_used")
    ):
        raise bad("'budget' is not a usage block")
    if type(result["omitted_total"]) is not int or not isinstance(result["omitted_by_reason"], dict):
        raise bad("'omitted_total'/'omitted_by_reason' have the wrong type")
    plan = result["plan"]
    if not isinstance(plan, dict) or not all(isinstance(plan.get(k), dict) for k in ("lanes", "selection", "reranker")):
        raise bad("'plan' lacks lanes/selection/reranker")
    items = []
    for it in result["items"]:
        if (
            not isinstance(it, dict)
            or not isinstance(it.get("candidate_id"), str)
            or not isinstance(it.get("kind"), str)
        ):
            raise bad("an item lacks candidate_id/kind")
        refs = it.get("citation_refs", [])
        if not isinstance(refs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("source"), str) and type(r.get("paragraph")) is int for r in refs
        ):
            raise bad("an item's citation_refs are not locators")
        rec: dict[str, Any] = {
            "candidate_id": it["candidate_id"],
            "kind": it["kind"],
            "fused_rank": it.get("fused_rank"),
        }
        loc = _item_locator(it)
        if loc is not None:
            rec["source"], rec["paragraph"] = loc
        rec["citation_refs"] = [{"source": r["source"], "paragraph": r["paragraph"]} for r in refs]
        items.append(rec)
    return {
        "items": items,
        "budget": budget,
        "omitted_total": result["omitted_total"],
        "omitted_by_reason": result["omitted_by_reason"],
        "plan": plan,
    }


def _item_locator(item: dict[str, Any]) -> tuple[str, int] | None:
    kind = item["kind"]
    if kind == "passage":
        p = item.get("passage")
        if isinstance(p, dict) and isinstance(p.get("source"), str) and type(p.get("paragraph")) is int:
            return p["source"], p["paragraph"]
    if kind in ("passage", "community"):
        parts = item["candidate_id"].split("\u0000")
        if len(parts) >= 4 and parts[-1].isdigit():
            return "\u0000".join(parts[2:-1]), int(parts[-1])
    return None


def _top_tier(result: Any) -> tuple[list[str], str | None]:
    if not isinstance(result, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in result):
        raise LaneFailed("resolve answered something other than a list of candidates")
    for tier in ("lexical", "semantic"):
        names = [c["name"] for c in result if c.get("tier") == tier]
        if names:
            return names, tier
    return [], None


# ----- one run ---------------------------------------------------------------------


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
            return result, _ms(started), None
        except CallError as exc:
            return None, _ms(started), exc

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
        passage["hits"] = [_stored(h) for h in hits]
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
            names, tier = _top_tier(result)
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


# ----- context entry, sources --------------------------------------------------------


def _entry(result: Any, ctx: str, after: bool) -> tuple[dict[str, int], Any]:
    label = "unreadable context entry after the run" if after else "unreadable context entry"
    if not isinstance(result, dict):
        raise Fatal(f"{ctx}: {label}: not an object", EXIT_FAIL)
    rev = result.get("revision", {})
    if rev is None:
        rev = {}
    if not isinstance(rev, dict):
        raise Fatal(f"{ctx}: {label}: revision is not an object", EXIT_FAIL)
    out = {}
    for k in ("graph", "passages", "config"):
        v = rev.get(k, 0)
        if v is None:
            v = 0
        if type(v) is not int:
            raise Fatal(f"{ctx}: {label}: revision.{k} is not an integer", EXIT_FAIL)
        out[k] = v
    usage = result.get("usage") or {}
    epoch = usage.get("last_write_epoch") if isinstance(usage, dict) else None
    return out, epoch


async def list_sources(api: Api, ctx: str) -> list[str]:
    names: list[str] = []
    cursor: str | None = None
    while True:
        query = f"limit={SOURCES_PAGE}" + (f"&after={quote(cursor, safe='')}" if cursor is not None else "")
        try:
            result = await api.call("GET", ["contexts", ctx, "sources"], query=query)
        except CallError as exc:
            raise Fatal(exc.message, EXIT_FAIL) from None
        if not isinstance(result, dict) or not isinstance(result.get("sources"), list):
            raise Fatal(f"{ctx}: not a taguru sources page", EXIT_FAIL)
        page = result["sources"]
        if not all(isinstance(s, str) for s in page):
            raise Fatal(f"{ctx}: a sources entry is not a string", EXIT_FAIL)
        if not page:
            return names
        if cursor is not None and page[-1] <= cursor:
            raise Fatal(f"{ctx}: the server's sources page did not advance past '{cursor}'", EXIT_FAIL)
        names.extend(page)
        cursor = page[-1]


# ----- the whole run ---------------------------------------------------------------------


def _budget_text(limits: dict[str, Any] | None) -> str:
    if not limits:
        return "none (untruncated baseline)"
    return f"max_items={limits['max_items']} max_bytes={limits['max_bytes']} max_tokens={limits['max_tokens']}"


def write_atomic(path: str, text: str) -> None:
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
    p = Path(out)
    if p.suffix.lower() == ".json":
        return str(p.with_suffix(".html"))
    return out + ".html"


async def run(
    args: RunArgs, stdout: TextIO | None = None, stderr: TextIO | None = None, env: dict[str, str] | None = None
) -> int:
    out_, err_ = stdout or sys.stdout, stderr or sys.stderr
    try:
        return await _run(args, out_, err_, env)
    except Fatal as exc:
        warn(exc.message, err_)
        return exc.code


async def _run(args: RunArgs, out: TextIO, err: TextIO, env_in: dict[str, str] | None) -> int:
    try:
        evalset = load_eval(args.eval)
    except EvalError as exc:
        raise Fatal(str(exc), EXIT_USAGE) from None
    for case in evalset.cases:
        lim = case.options.limit
        if lim is not None and not (1 <= lim <= 1000):
            raise Fatal(f"case '{case.case_id}': options.limit must be 1..=1000, got {lim}", EXIT_USAGE)
    warnings: list[str] = []
    if args.assembly:
        for case in evalset.cases:
            o = case.options
            if o.tags or o.since is not None or o.until is not None:
                msg = (
                    f"case '{case.case_id}': options.tags/since/until are not applied under --assembly "
                    "(POST /contexts/{name}/evidence has no such request fields)"
                )
                warn(msg, err)
                warnings.append(msg)
    defs = definitions()
    thresholds: Thresholds | None = None
    if args.thresholds is not None:
        try:
            thresholds = load_thresholds(args.thresholds, [c.case_id for c in evalset.cases])
        except EvalError as exc:
            raise Fatal(str(exc), EXIT_USAGE) from None
    try:
        env = environment(args.config, {} if env_in is None else env_in)
        base = base_url(args.url, env)
    except SetupError as exc:
        raise Fatal(str(exc), EXIT_USAGE) from None
    masked = mask_url(base)
    print(f"evaluate → {masked}", file=err, flush=True)
    async with new_session() as session:
        api = Api(base, bearer_token(env), session)
        return await _run_online(args, evalset, thresholds, defs, warnings, api, masked, out, err)


async def _run_online(
    args: RunArgs,
    evalset: EvalSet,
    thresholds: Thresholds | None,
    defs: dict[str, Any],
    warnings: list[str],
    api: Api,
    masked: str,
    out: TextIO,
    err: TextIO,
) -> int:
    ctx = args.context
    rev_before, epoch_before = await _read_context_before(api, ctx, masked)
    embeddings = await _embedding_status(api, ctx, err)
    sources = await list_sources(api, ctx)
    misses = _uncarried_sources(evalset, ctx, set(sources))
    if misses:
        for m in misses:
            warn(m, err)
        return EXIT_USAGE

    progress = Progress(len(evalset.cases), err)
    try:
        cases = await run_cases(Runner(args, api), evalset.cases, progress)
    finally:
        progress.close()

    try:
        entry_after = await api.call("GET", ["contexts", ctx])
    except CallError as exc:
        raise Fatal(f"{ctx}: could not re-read the context after the run: {exc.message}", EXIT_FAIL) from None
    rev_after, epoch_after = _entry(entry_after, ctx, after=True)
    stable = rev_before == rev_after

    metrics = aggregate(cases, rerank=args.rerank is not None)
    report = gate(thresholds, metrics, cases, stable) if thresholds is not None else None
    corpus: dict[str, Any] = {
        "revision_before": rev_before,
        "revision_after": rev_after,
        "stable": stable,
        "last_write_epoch_before": epoch_before,
        "last_write_epoch_after": epoch_after,
    }
    if embeddings is not None:
        corpus["embeddings"] = embeddings
    corpus["sources_count"] = len(sources)
    artifact: dict[str, Any] = {
        "taguru_evaluation": 1,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "matching": MATCHING,
        "inputs": _run_inputs(args, evalset, masked),
        "corpus": corpus,
        "thresholds": report,
        "definitions": defs,
    }
    if warnings:
        artifact["warnings"] = warnings
    artifact["cases"] = cases
    artifact["metrics"] = metrics
    report_path = _write_artifact(args, artifact)
    _summary(args, artifact, masked, report_path, out)
    if report is None:
        warn(REPORT_ONLY, err)
        return EXIT_OK
    return EXIT_OK if report["passed"] else EXIT_THRESHOLDS


async def _read_context_before(api: Api, ctx: str, masked: str) -> tuple[dict[str, int], Any]:
    """Check the server is up and read the context's revisions and last write before the run."""
    try:
        await api.health()
    except CallError as exc:
        raise Fatal(f"server at {masked} is not reachable: {exc.message}", EXIT_FAIL) from None
    try:
        entry = await api.call("GET", ["contexts", ctx])
    except CallError as exc:
        raise Fatal(exc.message, EXIT_USAGE if exc.status == 404 else EXIT_FAIL) from None
    return _entry(entry, ctx, after=False)


async def _embedding_status(api: Api, ctx: str, err: TextIO) -> dict[str, Any] | None:
    """The context's embedding provider model, or None (with a warning) when it cannot be read."""
    try:
        emb = await api.call("GET", ["contexts", ctx, "embeddings"])
    except CallError as exc:
        warn(f"{ctx}: could not read embedding status (recording none): {cut(exc.message)}", err)
        return None
    pm = emb.get("provider_model") if isinstance(emb, dict) else None
    if isinstance(emb, dict) and (pm is None or isinstance(pm, str)):
        return {"provider_model": pm}
    warn(f"{ctx}: could not read embedding status (recording none): not an embeddings status", err)
    return None


def _uncarried_sources(evalset: EvalSet, ctx: str, carried: set[str]) -> list[str]:
    """One message per expected source the context does not carry."""
    return [
        f"case '{c.case_id}': expected_sources names '{e.source}', which '{ctx}' does not carry"
        for c in evalset.cases
        for e in c.expected_sources
        if e.source not in carried
    ]


def _run_inputs(args: RunArgs, evalset: EvalSet, masked: str) -> dict[str, Any]:
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
    return inputs


def _write_artifact(args: RunArgs, artifact: dict[str, Any]) -> str:
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


_SUMMARY_METRICS = (
    "recall.recall_at_k",
    "recall.mrr",
    "recall.ndcg",
    "coverage.concepts",
    "coverage.labels",
    "coverage.associations",
    "citations.recall",
    "citations.locator_validity",
    "diversity.sources",
    "budget.items_used",
    "budget.tokens_used",
    "budget.omitted_rate",
    "latency.passage_ms",
)


def _fmt(v: Any) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def _summary(args: RunArgs, artifact: dict[str, Any], masked: str, report_path: str, out: TextIO) -> None:
    cases = artifact["cases"]
    metrics = artifact["metrics"]
    lines = [f"taguru evaluate: {masked} / context '{args.context}'"]
    failed = sum(1 for c in cases if c["passage"]["outcome"] == "failed")
    mode = artifact["inputs"]["mode"]
    lines.append(
        f"  {len(cases)} case(s), mode {mode}, budget {_budget_text(artifact['inputs'].get('budget'))}, "
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
