"""Run mode: preflight, per-case lanes, metrics, thresholds, the artifact and the summary.

docs/evaluate.md ("How it works") describes a run; the cases run in `evaluate/cases.py`, the report is
assembled in `evaluate/report.py`.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
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
from taguru_server.evaluate.cases import Runner, run_cases
from taguru_server.evaluate.evalfile import EvalError, EvalSet, load_eval
from taguru_server.evaluate.metrics import (
    MATCHING,
    aggregate,
    definitions,
)
from taguru_server.evaluate.report import print_summary, run_inputs, write_artifact
from taguru_server.evaluate.run_args import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_THRESHOLDS,
    EXIT_USAGE,
    REPORT_ONLY,
    SOURCES_PAGE,
    Fatal,
    Progress,
    RunArgs,
    warn,
)
from taguru_server.evaluate.thresholds import Thresholds, gate, load_thresholds


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
        "inputs": run_inputs(args, evalset, masked),
        "corpus": corpus,
        "thresholds": report,
        "definitions": defs,
    }
    if warnings:
        artifact["warnings"] = warnings
    artifact["cases"] = cases
    artifact["metrics"] = metrics
    report_path = write_artifact(args, artifact)
    print_summary(args, artifact, masked, report_path, out)
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
