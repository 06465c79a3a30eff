"""MCP over HTTP: stateless `POST /mcp` JSON-RPC whose tools run the same handlers in process."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import attrs
from multidict import CIMultiDict

from taguru_server.server.handlers import VERSION, Call, parse_query_string
from taguru_server.server.reply import Raw, Reply
from taguru_server.store.errors import ApiError
from taguru_server.store.wire import dumps, dumps_bytes, has_lone_surrogate

SUPPORTED_PROTOCOLS = ("2024-11-05", "2025-03-26", "2025-06-18")
LATEST_PROTOCOL = "2025-06-18"
PROTOCOL_META_KEY = "io.modelcontextprotocol/protocolVersion"
MAX_RESULT_BYTES = 8 * 1024 * 1024
SERVER_META = {"io.modelcontextprotocol/serverInfo": {"name": "taguru", "version": VERSION}}
CAP_MESSAGE = (
    "tool result exceeds the MCP response cap (TAGURU_MCP_MAX_RESULT_BYTES); narrow the call (a smaller `limit` "
    "works for most tools), or for a full-context export use GET /contexts/{name}/export over the raw HTTP API, "
    "or the `taguru export` CLI — both are uncapped"
)

INSTRUCTIONS = """Taguru keeps knowledge contexts: an association graph (subject —label→ object, with
signed weights and per-source attributions), aliases, and passages split into paragraphs.
Start with list_contexts. To answer a question from a context, call assemble_evidence with the
names you are asking about as `origins` (and relation `labels` when you know them); it returns a
ranked, deduplicated, citation-complete evidence package under a budget. Quote `citations`
verbatim when you cite. The finer tools (resolve, describe, query, recall, activate,
search_passages, cite_passage, search_communities) expose each lane on its own."""


def protocol_text() -> str:
    """`GET /protocol` (text/markdown) and `initialize.instructions`: the manual, then this server's trailer."""
    from taguru_server.server.handlers import version_body

    return (
        INSTRUCTIONS.rstrip("\n")
        + "\n"
        + "\n---\n\n## This server\n\n"
        + f"taguru-server {VERSION} (Python), speaking the Taguru HTTP and MCP wire contracts.\n\n"
        + "Contract versions (also `GET /version`, ADR 0005 §6) — discovery only, not negotiation:\n\n"
        + "```json\n"
        + json.dumps(version_body(), indent=2)
        + "\n```\n"
    )


async def protocol(call: Call) -> Raw:
    """GET /protocol (read role): the same text `initialize` sends as its instructions."""
    return Raw(200, protocol_text().encode("utf-8"), "text/markdown; charset=utf-8")


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


def _int_prop(description: str) -> dict[str, Any]:
    return {"description": description, "minimum": 0, "type": "integer"}


def _str_prop(description: str) -> dict[str, Any]:
    return {"description": description, "type": "string"}


_CONTEXT = _str_prop("Context name (from list_contexts)")
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
                "description": "opts into reordering the pool through a configured reranker (ADR 0006 §12); when "
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
    """A read tool: its definition and how its arguments become one routed HTTP call."""

    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    method: str
    path: str  # with {context}
    body_keys: tuple[str, ...] = ()
    query_keys: tuple[str, ...] = ()
    check: Callable[[dict[str, Any]], str | None] | None = None

    def definition(self) -> dict[str, Any]:
        if self.name == "assemble_evidence":
            return ASSEMBLE_EVIDENCE
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = list(self.required)
        return {"name": self.name, "description": self.description, "inputSchema": schema}


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
        },
        ("context",),
        "POST",
        "/contexts/{context}/query",
        ("subject", "label", "object", "limit", "after"),
    ),
    Tool(
        "recall",
        "Every association whose subject, label or object is the cue.",
        {"context": _CONTEXT, "cue": _str_prop("exact name"), "limit": _int_prop("page size (default 100)")},
        ("context", "cue"),
        "POST",
        "/contexts/{context}/recall",
        ("cue", "limit", "after"),
    ),
    Tool(
        "activate",
        "Spreading activation from origin concepts: the most strongly reached associations.",
        {
            "context": _CONTEXT,
            "origins": {"description": "origin concept names", "items": {"type": "string"}, "type": "array"},
            "decay": {"description": "decay per hop (default 0.5)", "type": "number"},
            "limit": _int_prop("max associations (default 20)"),
        },
        ("context", "origins"),
        "POST",
        "/contexts/{context}/activate",
        ("origins", "decay", "limit"),
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
        },
        ("context", "query"),
        "POST",
        "/contexts/{context}/sources/search",
        ("query", "limit", "semantic_floor", "tags", "since", "until"),
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
)
TOOL_BY_NAME = {t.name: t for t in TOOLS}


class _RpcError(Exception):
    def __init__(self, code: int, message: str, status: int = 200, data: Any = None, rid: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.data = data
        self.rid = rid


def _reply(rid: Any, result: Any) -> Raw:
    return Raw(200, dumps_bytes({"jsonrpc": "2.0", "id": rid, "result": result}))


def _error(err: _RpcError) -> Raw:
    body: dict[str, Any] = {"code": err.code, "message": err.message}
    if err.data is not None:
        body["data"] = err.data
    return Raw(err.status, dumps_bytes({"jsonrpc": "2.0", "id": err.rid, "error": body}))


def _valid_id(rid: Any) -> bool:
    return rid is None or isinstance(rid, str) or (isinstance(rid, (int, float)) and not isinstance(rid, bool))


def _tool_error(text: str, structured: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
    if isinstance(structured, dict):
        out["structuredContent"] = structured
    out["resultType"] = "complete"
    out["_meta"] = SERVER_META
    return out


def _tool_ok(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "resultType": "complete", "_meta": SERVER_META}


async def mcp_endpoint(call: Call) -> Any:
    """One JSON-RPC message in, one reply out (202 with no body for a notification)."""
    try:
        return await _handle(call)
    except _RpcError as err:
        return _error(err)


async def _handle(call: Call) -> Raw:
    try:
        message = json.loads(call.body.decode("utf-8"))
        if has_lone_surrogate(call.body, message):
            raise ValueError("lone surrogate")
    except (UnicodeDecodeError, ValueError):
        raise _RpcError(-32700, "body is not JSON", 400) from None
    if isinstance(message, list):
        raise _RpcError(-32600, "batch messages are not part of MCP; send one message per request", 400)
    if not isinstance(message, dict):
        raise _RpcError(-32600, "not a JSON-RPC message (no method)", 400)
    rid = message.get("id")
    if not _valid_id(rid):
        raise _RpcError(-32600, "id must be a string, a number, or null", 400)
    if message.get("jsonrpc") != "2.0":
        raise _RpcError(-32600, 'not a JSON-RPC 2.0 message (jsonrpc must be "2.0")', 400, rid=rid)
    method = message.get("method")
    if not isinstance(method, str):
        raise _RpcError(-32600, "not a JSON-RPC message (no method)", 400, rid=rid)
    if rid is None:
        return Raw(202, b"", None)
    params = message.get("params") or {}
    if not isinstance(params, dict):
        params = {}
    meta = params.get("_meta")
    if isinstance(meta, dict) and PROTOCOL_META_KEY in meta:
        raise _RpcError(
            -32022,
            "unsupported protocol version",
            400,
            rid=rid,
            data={"supported": list(SUPPORTED_PROTOCOLS), "requested": meta[PROTOCOL_META_KEY]},
        )
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in SUPPORTED_PROTOCOLS else LATEST_PROTOCOL
        return _reply(
            rid,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "taguru", "version": VERSION},
                "instructions": protocol_text(),
            },
        )
    if method == "ping":
        return _reply(rid, {})
    if method == "tools/list":
        return _reply(
            rid,
            {
                "tools": [t.definition() for t in TOOLS],
                "ttlMs": 3600000,
                "cacheScope": "private",
                "resultType": "complete",
                "_meta": SERVER_META,
            },
        )
    if method == "tools/call":
        return _reply(rid, await call_tool(call, params))
    raise _RpcError(-32601, f"unknown method '{method}'", 200, rid=rid)


async def call_tool(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """Run one tool by routing its HTTP call in process; failures are tool errors, never RPC errors."""
    name = params.get("name")
    if not isinstance(name, str) or not name:
        return _tool_error("tool name is required — params.name was missing, empty, or not a string")
    tool = TOOL_BY_NAME.get(name)
    if tool is None:
        return _tool_error(f"unknown tool '{name}'")
    args = params.get("arguments")
    if not isinstance(args, dict):
        args = {}
    if "{context}" in tool.path:
        if args.get("context") is None:
            return _tool_error("missing required argument 'context'")
        if not isinstance(args["context"], str):
            return _tool_error("argument 'context' must be a string")
    for key in tool.required:
        if key != "context" and args.get(key) is None:
            return _tool_error(f"missing required argument '{key}'")
    if tool.check is not None and (problem := tool.check(args)) is not None:
        return _tool_error(problem)
    path = tool.path.replace("{context}", quote(args.get("context", ""), safe=""))
    body = None
    if tool.method == "POST":
        body = dumps_bytes({k: args[k] for k in tool.body_keys if args.get(k) is not None})
    query = {k: _query_value(args[k]) for k in tool.query_keys if args.get(k) is not None}
    status, raw = await route(call, tool.method, path, body, query)
    text = raw.decode("utf-8")
    if status >= 400:
        if len(raw) > MAX_RESULT_BYTES:
            return _tool_error(f"HTTP {status}: (error body exceeds the MCP response cap, TAGURU_MCP_MAX_RESULT_BYTES)")
        try:
            structured = json.loads(text)
        except ValueError:
            structured = None
        return _tool_error(f"HTTP {status}: {text}", structured)
    if len(raw) > MAX_RESULT_BYTES:
        return _tool_error(CAP_MESSAGE)
    return _tool_ok(text)


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


async def route(call: Call, method: str, path: str, body: bytes | None, query: dict[str, str]) -> tuple[int, bytes]:
    """Run one API call in process under the caller's key and deadline; returns (status, body)."""
    from taguru_server.server.app import ROUTER, _segments

    started = time.perf_counter()
    try:
        segments = _segments(path)
        template, role, handler, name, matched = ROUTER.match(method, segments)
        call.principal.require_role(method, template, role)
        if handler is None:
            raise ApiError("unknown_path", f"no route for {method} {path}; GET /protocol lists the API")
        if name is not None:
            call.principal.require_grant(name)
        sub = attrs.evolve(
            call,
            method=method,
            path=path,
            name=name,
            query=parse_query_string(urlencode(query)),
            headers=CIMultiDict({"Content-Type": "application/json"}) if body is not None else CIMultiDict(),
            body=body or b"",
        )
        result = await handler(sub)
        if isinstance(result, Reply):
            result = result.result
        return 200, dumps({"result": result, "status": "ok", "time": time.perf_counter() - started}).encode("utf-8")
    except ApiError as err:
        return err.status, dumps_bytes(err.body(time.perf_counter() - started))
