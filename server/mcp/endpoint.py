"""MCP over HTTP: stateless `POST /mcp` JSON-RPC whose tools run through the server's own router in process."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from taguru_server.server.call import Call, Route
from taguru_server.server.decode import parse_json
from taguru_server.server.mcp.jsonrpc import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RpcError,
    batch_refused,
    reply_frame,
    shape_problem,
)
from taguru_server.server.mcp.protocol import (
    LATEST_PROTOCOL,
    PROTOCOL_META_KEY,
    SERVER_META,
    SUPPORTED_PROTOCOLS,
    protocol_text,
)
from taguru_server.server.mcp.retrieve import run_retrieve
from taguru_server.server.mcp.tools import DEFINITIONS, TOOL_BY_NAME, ToolFailure
from taguru_server.server.offload import decode_body
from taguru_server.server.reply import Raw
from taguru_server.server.state import DISPATCH_KEY
from taguru_server.server.tracing import TRACING_KEY
from taguru_server.server.version import VERSION
from taguru_server.store.errors import ApiError
from taguru_server.store.wire import dumps_bytes

URI_LIMIT = 65534
CAP_MESSAGE = (
    "tool result exceeds the MCP response cap (TAGURU_MCP_MAX_RESULT_BYTES); narrow the call (a smaller `limit` "
    "works for most tools), or for a full-context export use GET /contexts/{name}/export over the raw HTTP API, "
    "or the `taguru export` CLI — both are uncapped"
)


def _reply(rid: Any, result: Any) -> Raw:
    return Raw(200, dumps_bytes(reply_frame(rid, result)))


def tool_error(text: str, structured: Any = None) -> dict[str, Any]:
    """A tool error result (`structuredContent` when the body was a JSON object); the bridge words its own alike."""
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
    except RpcError as err:
        return Raw(err.status, dumps_bytes(err.frame()))


async def _handle(call: Call) -> Raw:
    try:
        message = await decode_body(call.body, lambda: parse_json(call.body))  # the limits of every JSON body
    except ApiError:
        raise RpcError(PARSE_ERROR, "body is not JSON", 400) from None
    if isinstance(message, list):
        raise RpcError(INVALID_REQUEST, batch_refused("request"), 400)
    problem = shape_problem(message)
    if problem is not None:
        raise RpcError(INVALID_REQUEST, problem[0], 400, rid=problem[1])
    rid = message.get("id")
    method = message["method"]
    if rid is None:
        return Raw(202, b"", None)
    params = message.get("params") or {}
    if not isinstance(params, dict):
        params = {}
    meta = params.get("_meta")
    if isinstance(meta, dict) and PROTOCOL_META_KEY in meta:
        raise RpcError(
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
        return _reply(rid, tools_list_result())
    if method == "tools/call":
        return _reply(rid, await call_tool(call, params))
    raise RpcError(METHOD_NOT_FOUND, f"unknown method '{method}'", 200, rid=rid)


def tools_list_result() -> dict[str, Any]:
    """The `tools/list` result (every tool; no paging), shared with the stdio bridge."""
    return {
        "_meta": SERVER_META,
        "cacheScope": "private",
        "resultType": "complete",
        "tools": DEFINITIONS,
        "ttlMs": 3600000,
    }


async def call_tool(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """Run one tool as one routed API call under the caller's key (`retrieve`: its composed calls);
    failures are tool errors, never RPC errors."""
    name = params.get("name")
    if not isinstance(name, str) or not name:
        return tool_error("tool name is required — params.name was missing, empty, or not a string")
    tool = TOOL_BY_NAME.get(name)
    if tool is None:
        return tool_error(f"unknown tool '{name}'")
    args = params.get("arguments")
    if not isinstance(args, dict):
        args = {}
    tracing = call.app_state.get(TRACING_KEY)
    try:
        if tool.composed:
            return await _retrieve(call, args, tracing)
        problem = tool.problem(args)
        if problem is not None:
            raise ToolFailure(problem)
        if tracing is None:
            raw = await perform(call, name, args)
        else:
            with tracing.tool_span("http_mcp", name, params.get("_meta")) as span:
                raw = await perform(call, name, args, span)
    except ToolFailure as failure:
        return tool_error(failure.text, failure.structured)
    return _tool_ok(raw.decode("utf-8", "replace"))


async def _retrieve(call: Call, args: dict[str, Any], tracing: Any) -> dict[str, Any]:
    """The composed `retrieve`: its steps routed like single calls, bounded by the result cap; its failures are
    plain text (the failing call's body is not attached)."""
    cap = call.settings.mcp_max_result_bytes
    try:
        text = await run_retrieve(args, lambda n, a: perform(call, n, a), cap, tracing, "remote_mcp", call.deadline)
    except ToolFailure as failure:
        return tool_error(failure.text)
    if len(text.encode("utf-8", "surrogatepass")) > cap:
        return tool_error(CAP_MESSAGE)
    return _tool_ok(text)


async def perform(call: Call, name: str, args: dict[str, Any], span: Any = None) -> bytes:
    """One tool's routed call through the in-process dispatch: its success body, or a `ToolFailure` with the
    routing refusal, the `HTTP <status>: <body>` of a routed error, or a size-cap text."""
    tool = TOOL_BY_NAME[name]
    problem = tool.problem(args)
    if problem is not None:
        raise ToolFailure(problem)
    request = tool.request(args)
    uri = len(request.path) + len(urlencode(request.query))
    if uri > URI_LIMIT:
        raise ToolFailure(
            f"could not build the outbound request: the request URI is {uri} bytes, past the {URI_LIMIT}-byte limit"
        )
    dispatch = call.app_state[DISPATCH_KEY]
    cap = call.settings.mcp_max_result_bytes
    status, raw = await dispatch(call.principal, call.deadline, request, cap)
    if span is not None:
        tracing = call.app_state[TRACING_KEY]
        tracing.tool_result(span, status, len(raw))
    if status >= 400:
        if len(raw) > cap:
            raise ToolFailure(f"HTTP {status}: (error body exceeds the MCP response cap, TAGURU_MCP_MAX_RESULT_BYTES)")
        text = raw.decode("utf-8", "replace")
        try:
            structured = json.loads(text)
        except ValueError:
            structured = None
        raise ToolFailure(f"HTTP {status}: {text}", structured if isinstance(structured, dict) else None)
    if len(raw) > cap:
        raise ToolFailure(CAP_MESSAGE)
    return raw


ROUTES: list[Route] = [Route("POST", "/mcp", mcp_endpoint, "read", request="JsonRpcRequest", response="jsonrpc")]
