"""The MCP tool table: each tool's published definition and how its arguments become one routed call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import attrs

from taguru_server.server.mcp import audit_tools
from taguru_server.server.mcp.props import CONTEXT as _CONTEXT
from taguru_server.server.mcp.props import int_prop as _int_prop
from taguru_server.server.mcp.props import str_prop as _str_prop
from taguru_server.store.wire import dumps_bytes

_EVIDENCE_DESCRIPTION = (
    "Opt-in evidence assembly: runs the same resolve/query/activate/search_passages/cite_passage fan-out `retrieve` "
    "runs, then normalizes every graph association, graph activation, passage hit, and (opt-in) community hit into "
    "one ranked, deduplicated, citation-complete package under an explicit byte/token/item budget — for a caller "
    "that will hand the result to an external answer model with a bounded context window, unlike `retrieve`'s raw, "
    "unranked results. `origins` and `labels` share `retrieve`'s own contract; the passage/community lanes search "
    "`text_fallback_query` when given, otherwise `origins` joined with '; '. Contradictory and corroborating "
    "evidence are both preserved intentionally — never silently collapsed to a majority view or a single opaque "
    "count. `budget` bounds the response (defaults: 40 items, 64 KiB, ~4000 estimated tokens); a budget too small "
    "for even the smallest candidate still answers 200 with an empty package and every candidate accounted for "
    "under `omitted`/`omitted_total`/`omitted_by_reason`, never an error. `plan` reports which lanes ran and why "
    "not when they did not, plus the selection/reranker trace. `rerank` optionally reorders the pool through a "
    "server-configured reranker (may only reorder — never adds, drops, or edits a candidate); with no "
    "`TAGURU_RERANK_URL`/`_MODEL` configured, or on any provider failure, selection stays fully deterministic and "
    "`plan.reranker.reason` names why in a fixed, machine-readable vocabulary — never a call-ending error. Does not "
    "change `retrieve` or any direct endpoint's behavior."
)


_ONE_OR_MANY = {"items": {"type": "string"}, "type": ["string", "array"]}

ASSEMBLE_EVIDENCE: dict[str, Any] = {
    "name": "assemble_evidence",
    "description": _EVIDENCE_DESCRIPTION,
    "inputSchema": {
        "type": "object",
        "required": ["context", "origins"],
        "properties": {
            "activate_decay": {"description": "activate's decay (default 0.5)", "type": "number"},
            "activate_limit": _int_prop("activate's limit (default 20)"),
            "budget": {
                "description": "three independent hard ceilings on the returned package; an omitted field takes its "
                "own default",
                "type": "object",
                "properties": {
                    "max_bytes": _int_prop("default 65536 (64 KiB), ceiling 1048576 (1 MiB)"),
                    "max_items": _int_prop("default 40, ceiling 1000"),
                    "max_tokens": _int_prop(
                        "default 4000, an estimate — no separate ceiling beyond max_items/max_bytes"
                    ),
                },
            },
            "context": _CONTEXT,
            "dice_floor": {"description": "one-call override of the resolve fuzzy floor", "type": "number"},
            "include_communities": {
                "description": "also search the context's derived community-summary artifact (default false); no "
                "artifact is a degrade (plan.lanes.communities.ran = false), never a refusal",
                "type": "boolean",
            },
            "labels": {"description": "relation labels to query on, alongside the always-run activate", **_ONE_OR_MANY},
            "origins": {"description": "cue(s) to resolve into anchors", **_ONE_OR_MANY},
            "rerank": {
                # the reference's text; its section sign is written as an escape
                "description": "opts into reordering the pool through a configured reranker (ADR 0006 \u00a712); when "
                "absent, when no provider is configured, or on any failure, selection stays fully "
                "deterministic and plan.reranker.reason names why",
                "type": "object",
                "properties": {
                    "model": _str_prop(
                        "pins the call to this exact model; a mismatch with the configured provider "
                        "degrades with reason 'model_mismatch'"
                    ),
                },
            },
            "resolve_limit": _int_prop("max resolve candidates per origin (default/ceiling 1000)"),
            "search_limit": _int_prop("the passage/community search calls' limit (default 5, ceiling 200)"),
            "semantic_floor": {
                "description": "one-call override of the resolve/search/communities semantic floor",
                "type": "number",
            },
            "text_fallback_query": _str_prop(
                "passage/community lanes' query text; omitted means 'origins' joined with '; '"
            ),
        },
    },
}


@attrs.frozen
class Tool:
    """A tool: its definition and how its arguments become one routed HTTP call (run under the caller's key)."""

    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    method: str
    path: str  # with {context}
    body_keys: tuple[str, ...] = ()
    query_keys: tuple[str, ...] = ()
    check: Callable[[dict[str, Any]], str | None] | None = None
    # an ST tool: `context` (the per-context route) or `contexts`/`groups` (this cross-context route)
    cross_path: str | None = None

    def definition(self) -> dict[str, Any]:
        if self.name == "assemble_evidence":
            return ASSEMBLE_EVIDENCE
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = list(self.required)
        return {"name": self.name, "description": self.description, "inputSchema": schema}

    def problem(self, args: dict[str, Any]) -> str | None:
        """Why these arguments cannot make a call (a tool error text), or None."""
        if self.cross_path is not None:
            crossed = args.get("contexts") is not None or args.get("groups") is not None
            if crossed and args.get("context") is not None:
                return "pass either 'context' or 'contexts'/'groups', not both"
            if not crossed and args.get("context") is None:
                return "missing required argument 'context' (or 'contexts'/'groups', to search several at once)"
        for slot in ("context", "name"):
            if "{" + slot + "}" in self.path and not self._crossed(args):
                if args.get(slot) is None:
                    return f"missing required argument '{slot}'"
                if not isinstance(args[slot], str):
                    return f"argument '{slot}' must be a string"
        for key in self.required:
            if key not in ("context", "name") and args.get(key) is None:
                return f"missing required argument '{key}'"
        if self.check is not None:
            return self.check(args)
        return None

    def request(self, args: dict[str, Any]) -> tuple[str, str, bytes | None, dict[str, str]]:
        """The routed call for checked arguments: method, path, JSON body (POST only), query."""
        if self._crossed(args):
            assert self.cross_path is not None
            keys = ("contexts", "groups", *self.body_keys, "since", "until")
            return "POST", self.cross_path, dumps_bytes({k: args[k] for k in keys if args.get(k) is not None}), {}
        path = self.path.replace("{context}", quote(args.get("context", ""), safe=""))
        path = path.replace("{name}", quote(args.get("name", ""), safe=""))
        body = None
        if self.method == "POST":
            body = dumps_bytes({k: args[k] for k in self.body_keys if args.get(k) is not None})
        query = {k: _query_value(args[k]) for k in self.query_keys if args.get(k) is not None}
        return self.method, path, body, query

    def _crossed(self, args: dict[str, Any]) -> bool:
        return self.cross_path is not None and (args.get("contexts") is not None or args.get("groups") is not None)


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _cite_check(args: dict[str, Any]) -> str | None:
    if args.get("paragraph") is None and args.get("index") is None:
        return "missing required argument 'paragraph' (or its deprecated alias 'index')"
    return None


_PAGE = {
    "limit": _int_prop("page size (default 1000)"),
    "after": _str_prop("exclusive cursor: the last entry seen"),
    "prefix": _str_prop("only names starting with this"),
}
_POSITION = {"description": "a name or a list of names (an OR-set)", **_ONE_OR_MANY}
_GROUP = _str_prop("Group name (from list_groups)")
_WINDOW_END = _int_prop("assertion-time window end (exclusive), epoch seconds. until alone = as-of")
_TARGETS = {
    "contexts": {
        "description": "search these contexts at once (instead of 'context')",
        "items": {"type": "string"},
        "type": "array",
    },
    "groups": {
        "description": "search every context of these groups (instead of 'context')",
        "items": {"type": "string"},
        "type": "array",
    },
}


def _explain_resolve_tool(name: str, what: str, noun: str, route: str) -> Tool:
    """`explain_resolve` and `explain_resolve_label`: the same arguments over concepts or labels."""
    return Tool(
        name,
        f"Why {what} did (or didn't) resolve for a cue: every tier's account and a verdict.",
        {
            "context": _CONTEXT,
            "cue": _str_prop("the wording whose resolve is explained"),
            "expected": _str_prop(f"the {noun} expected back"),
            "dice_floor": {"description": "fuzzy floor override", "type": "number"},
            "semantic_floor": {"description": "semantic floor override", "type": "number"},
            "limit": _int_prop("the explained call's limit (default 1000)"),
        },
        ("context", "cue", "expected"),
        "POST",
        f"/contexts/{{context}}/{route}/explain",
        ("cue", "expected", "dice_floor", "semantic_floor", "limit"),
    )


TOOLS: tuple[Tool, ...] = (
    Tool(
        "assemble_evidence",
        _EVIDENCE_DESCRIPTION,
        {},
        ("context", "origins"),
        "POST",
        "/contexts/{context}/evidence",
        (
            "origins",
            "labels",
            "dice_floor",
            "semantic_floor",
            "resolve_limit",
            "activate_decay",
            "activate_limit",
            "text_fallback_query",
            "search_limit",
            "include_communities",
            "budget",
            "rerank",
        ),
    ),
    Tool(
        "list_contexts",
        "List the contexts this key may read, with stats and revisions.",
        {
            "limit": _int_prop("page size (default 1000)"),
            "after": _str_prop("exclusive cursor: the last name seen"),
            "pinned": {"description": "only pinned (true) or unpinned (false) contexts", "type": "boolean"},
        },
        (),
        "GET",
        "/contexts",
        query_keys=("limit", "after", "pinned"),
    ),
    Tool(
        "get_context",
        "One context's directory row: description, stats, usage, revision.",
        {"context": _CONTEXT},
        ("context",),
        "GET",
        "/contexts/{context}",
    ),
    Tool(
        "resolve",
        "Map a wording to stored concept names (exact, alias, containment, fuzzy), best first.",
        {
            "context": _CONTEXT,
            "cue": _str_prop("the wording to resolve"),
            "dice_floor": {"description": "fuzzy floor override", "type": "number"},
            "limit": _int_prop("max candidates"),
        },
        ("context", "cue"),
        "POST",
        "/contexts/{context}/resolve",
        ("cue", "dice_floor", "semantic_floor", "limit"),
    ),
    Tool(
        "resolve_label",
        "Map a wording to stored relation labels, best first.",
        {"context": _CONTEXT, "cue": _str_prop("the wording to resolve"), "limit": _int_prop("max candidates")},
        ("context", "cue"),
        "POST",
        "/contexts/{context}/resolve_label",
        ("cue", "dice_floor", "semantic_floor", "limit"),
    ),
    Tool(
        "describe",
        "Which labels a concept takes part in, as subject and as object, with counts.",
        {"context": _CONTEXT, "concept": _str_prop("exact concept name")},
        ("context", "concept"),
        "POST",
        "/contexts/{context}/describe",
        ("concept",),
    ),
    Tool(
        "query",
        "Associations whose subject/label/object match the pinned positions.",
        {
            "context": _CONTEXT,
            "subject": _POSITION,
            "label": _POSITION,
            "object": _POSITION,
            "limit": _int_prop("page size (default 100)"),
            "after": {"description": "cursor", "type": "object"},
            "subject_types": {
                "description": "filter: subject's declared type(s), is_a-expanded",
                "type": ["string", "array"],
            },
            "object_types": {
                "description": "filter: object's declared type(s), is_a-expanded",
                "type": ["string", "array"],
            },
            "since": _int_prop(
                "assertion-time window start, epoch seconds, half-open [since, until): only facts an "
                "in-window-dated source attests, weights from those attributions alone. Single context only"
            ),
            "until": _int_prop(
                "assertion-time window end (exclusive), epoch seconds. until alone = as-of (knowledge "
                "available by then). Single context only"
            ),
            **_TARGETS,
        },
        (),
        "POST",
        "/contexts/{context}/query",
        ("subject", "label", "object", "limit", "after", "subject_types", "object_types", "since", "until"),
        cross_path="/query",
    ),
    Tool(
        "recall",
        "Every association whose subject, label or object is the cue.",
        {
            "context": _CONTEXT,
            "cue": _str_prop("exact name"),
            "limit": _int_prop("page size (default 100)"),
            "since": _int_prop(
                "assertion-time window start, epoch seconds, half-open [since, until). Single context only"
            ),
            "until": _int_prop(
                "assertion-time window end (exclusive), epoch seconds. until alone = as-of. Single context only"
            ),
            **_TARGETS,
        },
        ("cue",),
        "POST",
        "/contexts/{context}/recall",
        ("cue", "limit", "after", "since", "until"),
        cross_path="/recall",
    ),
    Tool(
        "activate",
        "Spreading activation from origin concepts: the most strongly reached associations.",
        {
            "context": _CONTEXT,
            "origins": {"description": "origin concept names", "items": {"type": "string"}, "type": "array"},
            "decay": {"description": "decay per hop (default 0.5)", "type": "number"},
            "limit": _int_prop("max associations (default 20)"),
            "since": _int_prop(
                "assertion-time window start, epoch seconds, half-open [since, until): out-of-window evidence "
                "neither ranks nor conducts activation"
            ),
            "until": _WINDOW_END,
        },
        ("context", "origins"),
        "POST",
        "/contexts/{context}/activate",
        ("origins", "decay", "limit", "since", "until"),
    ),
    Tool(
        "explore",
        "Every association within max_depth hops of the origins, nearest first, with its hop distance and path.",
        {
            "context": _CONTEXT,
            "origins": {"description": "origin concept names", "items": {"type": "string"}, "type": "array"},
            "max_depth": _int_prop("hop ceiling (default and ceiling 10)"),
            "limit": _int_prop("page size (default 100, ceiling 1000)"),
            "after": {"description": "cursor: distance, subject, label, object of the last match", "type": "object"},
            "since": _int_prop(
                "assertion-time window start, epoch seconds, half-open [since, until): an edge no in-window "
                "source attests neither reports nor bridges"
            ),
            "until": _WINDOW_END,
        },
        ("context", "origins"),
        "POST",
        "/contexts/{context}/explore",
        ("origins", "max_depth", "limit", "after", "since", "until"),
    ),
    Tool(
        "paths",
        "Simple trails from any origin to any target, shortest first, then by weakest link.",
        {
            "context": _CONTEXT,
            "origins": {"description": "origin concept names", "items": {"type": "string"}, "type": "array"},
            "targets": {"description": "target concept names", "items": {"type": "string"}, "type": "array"},
            "max_depth": _int_prop("hop ceiling (default and ceiling 10)"),
            "limit": _int_prop("trails returned (default 10, ceiling 100)"),
        },
        ("context", "origins", "targets"),
        "POST",
        "/contexts/{context}/paths",
        ("origins", "targets", "max_depth", "limit"),
    ),
    Tool(
        "audit_coverage",
        "Every live association no walk from the origins reaches, heaviest first.",
        {
            "context": _CONTEXT,
            "origins": {"description": "origin concept names", "items": {"type": "string"}, "type": "array"},
            "limit": _int_prop("page size (default 100, ceiling 1000)"),
            "after": {"description": "cursor: weight, subject, label, object of the last match", "type": "object"},
        },
        ("context", "origins"),
        "POST",
        "/contexts/{context}/unreachable_from",
        ("origins", "limit", "after"),
    ),
    Tool(
        "search_passages",
        "BM25 paragraph search over the context's passages.",
        {
            "context": _CONTEXT,
            "query": _str_prop("search text"),
            "limit": _int_prop("max hits (default 5)"),
            "tags": {
                "description": "only sources with any of these tags",
                "items": {"type": "string"},
                "type": "array",
            },
            "since": _int_prop("epoch seconds, inclusive"),
            "until": _int_prop("epoch seconds, exclusive"),
            **_TARGETS,
        },
        ("query",),
        "POST",
        "/contexts/{context}/sources/search",
        ("query", "limit", "semantic_floor", "tags", "since", "until"),
        cross_path="/sources/search",
    ),
    Tool(
        "lookup_passages",
        "Whole stored passages by source id.",
        {"context": _CONTEXT, "sources": {"description": "source ids", "items": {"type": "string"}, "type": "array"}},
        ("context", "sources"),
        "POST",
        "/contexts/{context}/sources/lookup",
        ("sources",),
    ),
    Tool(
        "cite_passage",
        "One paragraph verbatim, with its section and locator.",
        {"context": _CONTEXT, "source": _str_prop("source id"), "paragraph": _int_prop("paragraph index")},
        ("context", "source"),
        "POST",
        "/contexts/{context}/citations",
        ("source", "paragraph", "index"),
        check=_cite_check,
    ),
    Tool(
        "search_communities",
        "Search the context's community summaries (its derived artifact).",
        {"context": _CONTEXT, "query": _str_prop("search text"), "limit": _int_prop("max hits (default 5)")},
        ("context", "query"),
        "POST",
        "/contexts/{context}/communities/search",
        ("query", "limit", "semantic_floor", "derived"),
    ),
    _explain_resolve_tool("explain_resolve", "a concept name", "concept name", "resolve"),
    _explain_resolve_tool("explain_resolve_label", "a relation label", "label", "resolve_label"),
    Tool(
        "explain_search",
        "Why a source did (or didn't) appear for a passage search: per-term BM25, the vector lane, the ranking.",
        {
            "context": _CONTEXT,
            "query": _str_prop("the search text being explained"),
            "source": _str_prop("the source id expected among the hits"),
            "paragraph": _int_prop("paragraph index (0-based); omitted means the source's best showing"),
            "limit": _int_prop("the explained search's limit (default 5)"),
            "semantic_floor": {"description": "the explained search's vector-lane floor", "type": "number"},
            "tags": {
                "description": "the explained search's tag filter",
                "items": {"type": "string"},
                "type": "array",
            },
            "since": _int_prop("epoch seconds, inclusive"),
            "until": _int_prop("epoch seconds, exclusive"),
        },
        ("context", "query", "source"),
        "POST",
        "/contexts/{context}/sources/search/explain",
        ("query", "source", "paragraph", "index", "limit", "semantic_floor", "tags", "since", "until"),
    ),
    Tool(
        "list_labels",
        "The context's relation labels, sorted.",
        {"context": _CONTEXT, **_PAGE},
        ("context",),
        "GET",
        "/contexts/{context}/labels",
        query_keys=("limit", "after", "prefix"),
    ),
    Tool(
        "get_aliases",
        "The context's concept and label aliases.",
        {"context": _CONTEXT, **_PAGE},
        ("context",),
        "GET",
        "/contexts/{context}/aliases",
        query_keys=("limit", "after", "prefix"),
    ),
    Tool(
        "list_sources",
        "The context's source ids with passage metadata.",
        {"context": _CONTEXT, **_PAGE},
        ("context",),
        "GET",
        "/contexts/{context}/sources",
        query_keys=("limit", "after", "prefix"),
    ),
    Tool(
        "list_groups",
        "List the context groups (every key sees every group; members outside its grant are hidden).",
        {"limit": _int_prop("page size (default 1000)"), "after": _str_prop("exclusive cursor: the last name seen")},
        (),
        "GET",
        "/groups",
        query_keys=("limit", "after"),
    ),
    Tool(
        "get_group",
        "One context group: description, member contexts, child groups, fingerprint.",
        {"name": _GROUP},
        ("name",),
        "GET",
        "/groups/{name}",
    ),
    Tool(
        "export_group",
        "A context group as its one-line `taguru_group` import record.",
        {"name": _GROUP},
        ("name",),
        "GET",
        "/groups/{name}/export",
    ),
)
# operator tools: each is one routed call whose route's role (admin) and grant are checked as over HTTP
OPERATOR_TOOLS: tuple[Tool, ...] = (
    Tool(
        "flush",
        "Make pending writes durable. Every write here is durable when acknowledged, so this answers an empty "
        "list. Needs an admin key without a context list.",
        {},
        (),
        "POST",
        "/flush",
    ),
    Tool(
        "compact",
        "Rebuild a context from its live content: drops dead (fully retracted) associations, vocabulary and "
        "aliases nothing live uses, and the bytes of retracted passages; reports what was shed. Needs admin.",
        {"context": _CONTEXT},
        ("context",),
        "POST",
        "/contexts/{context}/compact",
    ),
    Tool(
        "rename_context",
        "Rename a context (its data, aliases, passages and revisions move; change-feed cursors restart). Needs admin.",
        {"context": _CONTEXT, "to": _str_prop("the new context name (at most 64 bytes)")},
        ("context", "to"),
        "POST",
        "/contexts/{context}/rename",
        ("to",),
    ),
)
TOOLS = TOOLS + audit_tools.tools(Tool) + OPERATOR_TOOLS
TOOL_BY_NAME = {t.name: t for t in TOOLS}
