"""The composed `retrieve` tool: resolve, describe, query/activate, citations and an optional passage fallback.

Each step is a call of another tool (`resolve`, `describe`, `query`, `activate`, `cite_passage`,
`search_passages`), made through the transport's `perform`, which routes it like any tool call and
raises `ToolFailure` with that call's error text. Any failure ends the composition with its text, except
a citation that answers 404 (skipped and counted). The result is one JSON object with sorted keys and no
envelope. A byte budget (the transport's result cap) bounds the running total of the responses read.

With tracing on, the call is one `taguru.retrieve` span with one child span per step that ran and a
`taguru.skip` event per step that did not; no attribute carries a cue, name, source or passage text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from taguru_server.server.mcp.tools import ToolFailure, sorted_keys, string_problem
from taguru_server.store.wire import dumps_bytes

Perform = Callable[[str, dict[str, Any]], Awaitable[bytes]]

MAX_CUES = 1000
BOOLEANS = ("auto_pick", "describe_first", "fetch_citations", "text_fallback_only_if_empty")
DEADLINE_SPENT = (
    "request exceeded its budget before this operation could start; narrow the query or raise "
    "TAGURU_REQUEST_TIMEOUT_SECS"
)
NO_HITS = (
    "search_passages answered without a 'hits' array — a server predating the #151 response shape? upgrade it to "
    "match this MCP binary"
)


def budget_spent(budget: int, tool: str) -> str:
    """The refusal once the responses read so far pass the byte budget."""
    return (
        f"retrieve's composed result already exceeds {budget} bytes after the '{tool}' call; narrow it — fewer "
        "origins, a smaller resolve_limit or activate_limit, or fetch_citations: false — rather than paying for "
        "calls whose result would be discarded anyway"
    )


def error_kind(text: str) -> str:
    """The `taguru.error.kind` of a failure text, first match wins."""
    if text.startswith("HTTP 404"):
        return "not_found"
    if text.startswith(("HTTP 401", "HTTP 403")):
        return "unauthorized"
    if text.startswith("HTTP 5"):
        return "upstream_error"
    if "exceeded its budget" in text:
        return "deadline_exceeded"
    if "response cap" in text or ("already exceeds" in text and "bytes" in text):
        return "result_too_large"
    if "cancelled" in text:
        return "cancelled"
    if any(s in text for s in ("missing required argument", "must be a string or an array", "past the per-request")):
        return "invalid_argument"
    if "failed to reach the taguru server" in text or "could not build the outbound request" in text:
        return "transport"
    return "provider_error"


class _NoSpan:
    """The span of an untraced call: takes attributes and events, records nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def add_event(self, name: str, attributes: dict[str, Any] | None = None) -> None:
        return None


_NO_SPAN = _NoSpan()


def validate(args: dict[str, Any]) -> tuple[str, list[str]]:
    """The checks before any call, in order: the context and the distinct cues, or a `ToolFailure`."""
    problem = string_problem(args, "context")
    if problem is not None:
        raise ToolFailure(problem)
    origins = args.get("origins")
    if origins is None:
        raise ToolFailure("missing required argument 'origins'")
    if isinstance(origins, list) and len(origins) > MAX_CUES:
        raise ToolFailure(
            f"argument 'origins' carries {len(origins)} cues, past the per-request limit of {MAX_CUES}; split the "
            "retrieval"
        )
    cues = [origins] if isinstance(origins, str) else origins
    if not isinstance(cues, list) or not all(isinstance(c, str) for c in cues):
        raise ToolFailure("argument 'origins' must be a string or an array of strings")
    for key in BOOLEANS:
        if args.get(key) is not None and not isinstance(args[key], bool):
            raise ToolFailure(f"argument '{key}' must be a boolean")
    fallback = args.get("text_fallback_query")
    if fallback is not None and not isinstance(fallback, str):
        raise ToolFailure("argument 'text_fallback_query' must be a string")
    return args["context"], list(dict.fromkeys(cues))


def _given(args: dict[str, Any], renames: dict[str, str]) -> dict[str, Any]:
    """The present, non-null arguments among `renames`' keys, under their forwarded names."""
    return {to: args[k] for k, to in renames.items() if args.get(k) is not None}


def _result(reply: Any) -> Any:
    return reply.get("result") if isinstance(reply, dict) else None


def _matches(reply: Any) -> list[Any]:
    result = _result(reply)
    found = result.get("matches") if isinstance(result, dict) else None
    return found if isinstance(found, list) else []


def _triple(association: Any) -> tuple[str, str, str] | None:
    if not isinstance(association, dict):
        return None
    parts = (association.get("subject"), association.get("label"), association.get("object"))
    if all(isinstance(p, str) for p in parts):
        return parts  # type: ignore[return-value]
    return None


def _citation_pairs(associations: list[Any]) -> list[tuple[str, int]]:
    """Every (source, paragraph) the associations' attributions name, first seen first."""
    pairs: dict[tuple[str, int], None] = {}
    for association in associations:
        attributions = association.get("attributions") if isinstance(association, dict) else None
        for attribution in attributions if isinstance(attributions, list) else ():
            if not isinstance(attribution, dict):
                continue
            source, paragraph = attribution.get("source"), attribution.get("paragraph")
            if isinstance(source, str) and isinstance(paragraph, int) and not isinstance(paragraph, bool):
                if paragraph >= 0:
                    pairs.setdefault((source, paragraph), None)
    return list(pairs)


class Retrieval:
    """One composition: the calls made so far, their byte total, and what they found."""

    def __init__(self, perform: Perform, budget: int | None, tracing: Any, root: Any) -> None:
        self.perform = perform
        self.budget = budget
        self.tracing = tracing
        self.root = root
        self.total = 0
        self.last = ""
        self.associations: list[Any] = []
        self.seen: set[tuple[str, str, str]] = set()

    @contextmanager
    def phase(self, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        """A child span of the root for one step (no span when untraced)."""
        if self.tracing is None:
            yield _NO_SPAN
            return
        with self.tracing.internal_span(name, attributes) as span:
            yield span

    def skip(self, reason: str, **attributes: Any) -> None:
        """A step that did not run, as a `taguru.skip` event on the root."""
        self.root.add_event("taguru.skip", {"taguru.reason": reason, **attributes})

    async def call(self, tool: str, args: dict[str, Any]) -> Any:
        """One step's call: refused once the budget is spent, else performed, counted and parsed."""
        if self.budget is not None and self.total > self.budget:
            self.skip("budget_exhausted")
            raise ToolFailure(budget_spent(self.budget, self.last))
        raw = await self.perform(tool, args)
        self.total += len(raw)
        self.last = tool
        self.root.set_attribute("taguru.dispatch.bytes", self.total)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ToolFailure(f"tool '{tool}' returned invalid JSON: {exc}") from None

    def keep(self, association: Any) -> None:
        """Append an association unless its triple is already kept (one without a triple always is)."""
        triple = _triple(association)
        if triple is not None:
            if triple in self.seen:
                return
            self.seen.add(triple)
        self.associations.append(association)


async def run_retrieve(
    args: dict[str, Any],
    perform: Perform,
    budget: int | None,
    tracing: Any = None,
    transport: str = "remote_mcp",
    deadline: float | None = None,
) -> str:
    """The composed result's JSON text, or a `ToolFailure` with the text that ended it."""
    attributes = {"taguru.operation": "retrieve", "taguru.transport": transport}
    if tracing is None:
        return await _compose(args, Retrieval(perform, budget, None, _NO_SPAN), deadline)
    with tracing.internal_span("taguru.retrieve", attributes) as root:
        try:
            return await _compose(args, Retrieval(perform, budget, tracing, root), deadline)
        except ToolFailure as failure:
            root.set_attribute("taguru.error.kind", error_kind(failure.text))
            tracing.mark_error(root)
            raise


async def _compose(args: dict[str, Any], run: Retrieval, deadline: float | None) -> str:
    if deadline is not None and time.monotonic() > deadline:
        run.skip("deadline_exceeded_before_start")
        raise ToolFailure(DEADLINE_SPENT)
    context, cues = validate(args)
    run.root.set_attribute("taguru.origin.count", len(cues))
    resolved, anchors = await _resolve(args, run, context, cues)
    outline: dict[str, Any] = {}
    if args.get("describe_first") is False:
        run.skip("describe_disabled")
    else:
        with run.phase("taguru.describe", {"taguru.anchor.count": len(anchors)}):
            for anchor in anchors:
                outline[anchor] = _result(await run.call("describe", {"context": context, "concept": anchor}))
    activations = await _associations(args, run, context, anchors)
    citations = await _citations(args, run, context)
    hits, plan = await _fallback(args, run, context)
    composed = {
        "resolved": resolved,
        "outline": outline,
        "associations": run.associations,
        "activations": activations,
        "citations": citations,
        "passage_hits": hits,
        "search_plan": plan,
    }
    return dumps_bytes(sorted_keys(composed)).decode("utf-8", "surrogatepass")


async def _resolve(
    args: dict[str, Any], run: Retrieval, context: str, cues: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """Step 1: each cue's candidates, and the anchors (first candidate's name, or the cue itself)."""
    options = _given(args, {"dice_floor": "dice_floor", "semantic_floor": "semantic_floor", "resolve_limit": "limit"})
    auto_pick = args.get("auto_pick") is not False
    resolved: dict[str, Any] = {}
    anchors: dict[str, None] = {}
    with run.phase("taguru.resolve", {"taguru.op": "resolve", "taguru.origin.count": len(cues)}) as span:
        for cue in cues:
            reply = await run.call("resolve", {"context": context, "cue": cue, **options})
            candidates = reply.get("result", []) if isinstance(reply, dict) else []
            resolved[cue] = candidates
            anchor: str | None = cue
            if auto_pick:
                first = candidates[0] if isinstance(candidates, list) and candidates else None
                name = first.get("name") if isinstance(first, dict) else None
                anchor = name if isinstance(name, str) else None
            if anchor is not None:
                anchors.setdefault(anchor, None)
        span.set_attribute("taguru.anchor.count", len(anchors))
    run.root.set_attribute("taguru.anchor.count", len(anchors))
    return resolved, list(anchors)


async def _associations(args: dict[str, Any], run: Retrieval, context: str, anchors: list[str]) -> list[Any]:
    """Step 3: the labelled query's matches, then activate's associations (deduplicated); activate's matches."""
    if not anchors:
        run.skip("no_anchors")
        return []
    count = {"taguru.anchor.count": len(anchors)}
    if args.get("labels") is None:
        run.skip("labels_absent")
    else:
        with run.phase("taguru.query", {"taguru.op": "query", **count}) as span:
            found = await run.call("query", {"context": context, "subject": anchors, "label": args["labels"]})
            for match in _matches(found):
                run.keep(match)
            span.set_attribute("taguru.association.count", len(run.associations))
    options = _given(args, {"activate_decay": "decay", "activate_limit": "limit"})
    with run.phase("taguru.activate", {"taguru.op": "activate", **count}) as span:
        activations = _matches(await run.call("activate", {"context": context, "origins": anchors, **options}))
        for activation in activations:
            run.keep(activation.get("association") if isinstance(activation, dict) else None)
        span.set_attribute("taguru.activation.count", len(activations))
    run.root.set_attribute("taguru.association.count", len(run.associations))
    run.root.set_attribute("taguru.activation.count", len(activations))
    return activations


async def _citations(args: dict[str, Any], run: Retrieval, context: str) -> list[dict[str, Any]]:
    """Step 4: each attributed paragraph's citation; a 404 is skipped and counted as missing."""
    if args.get("fetch_citations") is False:
        run.skip("citations_disabled")
        return []
    pairs = _citation_pairs(run.associations)
    citations: list[dict[str, Any]] = []
    missing = 0
    with run.phase("taguru.citations", {"taguru.citation.requested": len(pairs)}) as span:
        for source, paragraph in pairs:
            try:
                reply = await run.call("cite_passage", {"context": context, "source": source, "paragraph": paragraph})
            except ToolFailure as failure:
                if not failure.text.startswith("HTTP 404"):
                    raise
                missing += 1
                continue
            citations.append({"source": source, "paragraph": paragraph, "citation": _result(reply)})
        span.set_attribute("taguru.citation.returned", len(citations))
        if missing:
            span.set_attribute("taguru.citation.missing", missing)
            run.skip("citation_passage_missing", **{"taguru.citation.missing": missing})
    run.root.set_attribute("taguru.citation.returned", len(citations))
    return citations


async def _fallback(args: dict[str, Any], run: Retrieval, context: str) -> tuple[list[Any], Any]:
    """Step 5: the passage search, when asked for and (unless the gate is off) nothing else was found."""
    query = args.get("text_fallback_query")
    only_if_empty = args.get("text_fallback_only_if_empty") is not False
    reason = (
        "fallback_not_requested"
        if query is None
        else "fallback_suppressed"
        if only_if_empty and run.associations
        else "graph_empty"
        if only_if_empty
        else "unconditional"
    )
    run.root.set_attribute("taguru.fallback.reason", reason)
    ran = reason in ("graph_empty", "unconditional")
    run.root.set_attribute("taguru.fallback.ran", ran)
    if not ran:
        run.skip(reason)
        run.root.set_attribute("taguru.passage.hit_count", 0)
        return [], None
    options = _given(args, {"search_limit": "limit"})
    with run.phase("taguru.passage_fallback", {"taguru.op": "search_passages"}) as span:
        result = _result(await run.call("search_passages", {"context": context, "query": query, **options}))
        hits = result.get("hits") if isinstance(result, dict) else None
        if not isinstance(hits, list):
            raise ToolFailure(NO_HITS)
        span.set_attribute("taguru.passage.hit_count", len(hits))
    run.root.set_attribute("taguru.passage.hit_count", len(hits))
    return hits, result.get("plan") if isinstance(result, dict) else None
