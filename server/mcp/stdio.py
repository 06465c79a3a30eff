"""`taguru mcp`: the stdio MCP bridge (docs/operations.md, "MCP"), built on the official `mcp` SDK's server side.

It is an HTTP client of a running server: each `tools/call` is forwarded as one JSON-RPC
`tools/call` to `POST {TAGURU_URL}/mcp`, where the server routes it in process exactly as it does
for its own MCP clients, so the texts are the server's: a 2xx routed call gives the raw body, a
failed one `HTTP <code>: <body>` plus `structuredContent`. A non-2xx answer from `/mcp` itself
(a wrong token, say) is shaped the same way; no answer at all is `failed to reach the taguru
server`. The tool list is the server's own (`server.mcp.tools.TOOLS`). stdout carries only JSON-RPC
frames; every log line goes to stderr.

Environment: `TAGURU_URL` (http://127.0.0.1:8248), `TAGURU_API_TOKEN` (sent as Bearer),
`TAGURU_MCP_TIMEOUT_SECS` (75), `TAGURU_MCP_MAX_LINE_BYTES` (64 MiB),
`TAGURU_MCP_MAX_CONCURRENT_TOOLS` (8; up to 4× that many more wait in the queue).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit

import structlog

from taguru_server.server.mcp.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    SERVER_ERROR,
    batch_refused,
    error_frame,
    shape_problem,
)
from taguru_server.server.variables import process_environment
from taguru_server.store.json_depth import parse_bounded

# The CLI imports this module to register `taguru mcp`, so the MCP SDK, aiohttp and the tool
# table are imported only when the bridge actually runs (they cost seconds on a cold start).
if TYPE_CHECKING:
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.message import SessionMessage

    from taguru_server.client.http import TaguruClient
    from taguru_server.server.config import BridgeSettings
    from taguru_server.server.otel import Tracing

log = structlog.get_logger("taguru.mcp_stdio")

QUEUE_FACTOR = 4
INSTRUCTIONS_TIMEOUT_CAP = 5.0
UNREACHABLE = "failed to reach the taguru server"
QUEUE_FULL = "tool queue is full; retry the call"


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def startup_warnings(settings: BridgeSettings) -> None:
    if settings.token is None:
        log.warning(
            "bridge.no_token",
            message="TAGURU_API_TOKEN is not set; calls go out unauthenticated (fine for a server with auth off)",
        )
        return
    parts = urlsplit(settings.url)
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        log.warning(
            "bridge.token_over_plain_http",
            message="TAGURU_API_TOKEN is sent over plain http to a non-loopback host; use https",
        )


def _tool_error(text: str, structured: Any = None) -> types.CallToolResult:
    import mcp_types as types

    fields: dict[str, Any] = {"content": [types.TextContent(type="text", text=text)], "is_error": True}
    if isinstance(structured, dict):
        fields["structured_content"] = structured
    return types.CallToolResult(**fields)


TRACE_FIELDS = ("traceparent", "tracestate")
_ROUTED_STATUS = re.compile(r'"text":\s*"HTTP (\d{3}):')


def _routed_status(status: int, raw: bytes) -> int:
    """The status of the routed call behind a `/mcp` answer: the answer's own when it failed, else
    the one its tool error names (`HTTP <code>: …`), else 200."""
    if status >= 300:
        return status
    found = _ROUTED_STATUS.search(raw[:4096].decode("utf-8", "replace"))
    return int(found.group(1)) if found and b'"isError":true' in raw else 200


class Forwarder:
    """The HTTP side: one JSON-RPC message per `POST {url}/mcp`."""

    def __init__(self, settings: BridgeSettings, client: TaguruClient, tracing: Tracing | None = None) -> None:
        self.settings = settings
        self.client = client
        self.ids = 0
        self.tracing = tracing

    async def post(
        self, method: str, params: dict[str, Any], timeout: float, traceparent: Mapping[str, str] | None = None
    ) -> tuple[int, bytes]:
        self.ids += 1
        message = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}
        reply = await self.client.send("POST", "/mcp", message, headers=traceparent, timeout=timeout)
        return reply.status, reply.body

    async def instructions(self) -> str:
        """The server's own `initialize.instructions`, else the bundled copy (with a warning)."""
        from taguru_server.client.http import TransportError
        from taguru_server.server.mcp.protocol import LATEST_PROTOCOL, protocol_text
        from taguru_server.server.version import VERSION

        try:
            status, raw = await self.post(
                "initialize",
                {
                    "protocolVersion": LATEST_PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "taguru-mcp-bridge", "version": VERSION},
                },
                min(self.settings.timeout, INSTRUCTIONS_TIMEOUT_CAP),
            )
            text = json.loads(raw)["result"]["instructions"] if status == 200 else None
        except (TransportError, ValueError, KeyError, TypeError):
            text = None
        if isinstance(text, str):
            return text
        log.warning(
            "bridge.instructions_fallback",
            url=self.settings.url,
            message="could not read the server's instructions; using the bundled copy",
        )
        return protocol_text()

    async def forward(
        self, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> tuple[int, bytes]:
        """One `tools/call` to the server. The caller's `params._meta.traceparent`/`tracestate` go on as
        HTTP headers; when the bridge traces (OTEL_EXPORTER_OTLP_*), its own `mcp.tools/call <tool>`
        span sits between, parented by them, and the headers carry that span instead."""
        params = {"name": name, "arguments": arguments or {}}
        if self.tracing is None:
            trace = {k: v for k, v in (meta or {}).items() if k in TRACE_FIELDS and isinstance(v, str)}
            return await self.post("tools/call", params, self.settings.timeout, trace)
        from taguru_server.server.mcp.tools import TOOL_BY_NAME

        tracing = self.tracing
        with tracing.tool_span("stdio_mcp", name if name in TOOL_BY_NAME else None, dict(meta or {}), True) as span:
            try:
                status, raw = await self.post("tools/call", params, self.settings.timeout, tracing.outbound_headers())
            except Exception:
                tracing.tool_result(span, None, 0)
                raise
            tracing.tool_result(span, _routed_status(status, raw), len(raw))
            return status, raw

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None = None
    ) -> types.CallToolResult:
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        from taguru_server.client.http import TransportError

        try:
            status, raw = await self.forward(name, arguments, meta)
        except TransportError:
            log.warning("taguru.degrade", reason="bridge_unreachable", tool=name)
            return _tool_error(UNREACHABLE)
        text = raw.decode("utf-8", "replace")
        try:
            reply = json.loads(text)
        except ValueError:
            reply = None
        if status >= 300 or not isinstance(reply, dict):
            return _tool_error(f"HTTP {status}: {text}", reply)
        result = reply.get("result")
        if not isinstance(result, dict):
            found = reply.get("error")
            error: dict[str, Any] = found if isinstance(found, dict) else {}
            raise MCPError(
                code=int(error.get("code", SERVER_ERROR)),
                message=str(error.get("message", text)),
                data=error.get("data"),
            )
        content = [
            types.TextContent(type="text", text=str(c.get("text", "")))
            for c in result.get("content", [])
            if isinstance(c, dict)
        ]
        fields: dict[str, Any] = {"content": content}
        if result.get("isError"):
            fields["is_error"] = True
        if isinstance(result.get("structuredContent"), dict):
            fields["structured_content"] = result["structuredContent"]
        return types.CallToolResult(**fields)


def tool_list() -> list[types.Tool]:
    """The HTTP endpoint's own tool definitions (`server.mcp.tools.TOOLS`), as SDK models."""
    import mcp_types as types

    from taguru_server.server.mcp.tools import TOOLS

    return [types.Tool.model_validate(t.definition()) for t in TOOLS]


def build_server(forwarder: Forwarder, instructions: str) -> Server[Any]:
    """The official SDK's low-level server with the HTTP endpoint's tools, forwarding every call."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    from taguru_server.server.version import VERSION

    tools = tool_list()
    limit = forwarder.settings.max_concurrent
    running = anyio.Semaphore(limit)
    admitted = 0

    async def list_tools(_ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        nonlocal admitted
        if admitted >= limit * (1 + QUEUE_FACTOR):
            raise MCPError(code=SERVER_ERROR, message=QUEUE_FULL)
        admitted += 1
        try:
            async with running:
                return await forwarder.call_tool(params.name, params.arguments, params.meta)
        finally:
            admitted -= 1

    return Server(
        "taguru", version=VERSION, instructions=instructions, on_list_tools=list_tools, on_call_tool=call_tool
    )


def _error_frame(code: int, message: str, rid: str | int | None = None) -> SessionMessage:
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    return SessionMessage(types.JSONRPCError.model_validate(error_frame(code, message, rid)))


class FramedStdin:
    """Newline-delimited frames from a binary stream, with the bridge's own framing refusals.

    Blank lines are skipped; a line past the frame cap, not UTF-8, not JSON or a batch array is
    answered on `refusals` and never reaches the SDK (which would drop it silently).
    """

    def __init__(self, raw: BinaryIO, cap: int, refusals: Any) -> None:
        self.raw = raw
        self.cap = cap
        self.refusals = refusals
        self.sent = 0  # refusals queued ...
        self.written = 0  # ... and relayed to stdout (counted by the relay)

    async def _refuse(self, frame: Any) -> None:
        self.sent += 1
        await self.refusals.send(frame)

    async def drained(self, limit_secs: float = 5.0) -> None:
        """Wait (bounded) until every queued refusal reached stdout, so EOF loses none."""
        import anyio

        with anyio.move_on_after(limit_secs):
            while self.written < self.sent:
                await anyio.sleep(0.005)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        import anyio.to_thread

        def readline(size: int) -> Any:
            return anyio.to_thread.run_sync(self.raw.readline, size, abandon_on_cancel=True)

        while True:
            line = await readline(self.cap + 2)
            if not line:
                await self.drained()
                return
            if len(line.rstrip(b"\r\n")) > self.cap:
                while line and not line.endswith(b"\n"):  # drop the rest of the oversized frame
                    line = await readline(1024 * 1024)
                await self._refuse(_error_frame(PARSE_ERROR, f"line exceeds the {self.cap}-byte frame cap"))
                continue
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                await self._refuse(_error_frame(PARSE_ERROR, "line is not UTF-8"))
                continue
            try:
                value = parse_bounded(json.loads, text)  # the nesting limit of every JSON request
            except ValueError:
                await self._refuse(_error_frame(PARSE_ERROR, "line is not JSON"))
                continue
            if isinstance(value, list):
                await self._refuse(_error_frame(INVALID_REQUEST, batch_refused("line")))
                continue
            problem = shape_problem(value, replies=True)
            if problem is not None:
                message, rid = problem
                # the SDK's ids are strings or integers
                await self._refuse(_error_frame(INVALID_REQUEST, message, rid if isinstance(rid, (str, int)) else None))
                continue
            yield text


async def serve(settings: BridgeSettings, stdin: BinaryIO | None = None, tracing: Tracing | None = None) -> None:
    """Run the bridge until stdin closes."""
    import anyio
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    from taguru_server.client.http import TaguruClient

    startup_warnings(settings)
    bridge = TaguruClient(
        settings.url, settings.token, timeout=settings.timeout, max_response_bytes=None, connections=100
    )
    async with bridge as client:
        forwarder = Forwarder(settings, client, tracing)
        server = build_server(forwarder, await forwarder.instructions())
        send_refusal, receive_refusal = anyio.create_memory_object_stream[SessionMessage](64)
        framed = FramedStdin(stdin if stdin is not None else sys.stdin.buffer, settings.max_line_bytes, send_refusal)
        log.info("bridge.ready", url=settings.url)
        # the SDK only iterates `stdin`; it still claims fd 1, so stray output can never reach the wire
        async with stdio_server(stdin=framed) as (read_stream, write_stream):  # type: ignore[arg-type]
            async with anyio.create_task_group() as tg:

                async def relay_refusals() -> None:
                    async with receive_refusal:
                        async for frame in receive_refusal:
                            try:
                                await write_stream.send(frame)
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return
                            framed.written += 1

                tg.start_soon(relay_refusals)
                await server.run(read_stream, write_stream, server.create_initialization_options())
                tg.cancel_scope.cancel()


def _url_refused(url: str, given_as: str) -> str | None:
    from taguru_server.client.urls import url_refusal

    return url_refusal(url, given_as)


def cmd_mcp(args: argparse.Namespace) -> int:
    import anyio

    from taguru_server.server.config import Configuration
    from taguru_server.server.logging import configure_logging, lenient_log_settings

    env = dict(args.environment) if getattr(args, "environment", None) is not None else process_environment()
    configure_logging(logging.INFO, logs=lenient_log_settings(env))
    if getattr(args, "url", None):
        env["TAGURU_URL"] = args.url
    settings = Configuration.without_file(env).bridge()  # the bridge reads no settings file
    refused = _url_refused(settings.url, "--url" if getattr(args, "url", None) else "TAGURU_URL")
    if refused is not None:
        print(f"taguru mcp: {refused}", file=sys.stderr)
        return 2
    from taguru_server.server.tracing import tracing_for

    tracing = tracing_for(env)  # OTEL_EXPORTER_OTLP_*: the bridge's tool-call spans
    try:
        anyio.run(serve, settings, None, tracing)
    except KeyboardInterrupt:
        pass
    finally:
        if tracing is not None:  # flush the batched spans before the process ends
            tracing.shutdown()
    return 0


def _options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--url", help="the server's base URL (default $TAGURU_URL, else http://127.0.0.1:8248)")
    p.set_defaults(func=cmd_mcp)
    return p


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `taguru mcp` on the CLI's subparsers."""
    return _options(
        subparsers.add_parser("mcp", help="stdio MCP bridge to a running server (TAGURU_URL, TAGURU_API_TOKEN)")
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m taguru_server.server.mcp.stdio [--url URL]`: the bridge on its own."""
    args = _options(argparse.ArgumentParser(prog="taguru mcp", description=__doc__.splitlines()[0])).parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
