"""`taguru mcp` / `taguru-mcp`: the stdio MCP bridge (docs/operations.md, "MCP").

It is an HTTP client of a running server: each `tools/call` is forwarded as one JSON-RPC
`tools/call` to `POST {TAGURU_URL}/mcp`, where the server routes it in process exactly as it does
for its own MCP clients, so the texts are the server's: a 2xx routed call gives the raw body, a
failed one `HTTP <code>: <body>` plus `structuredContent`. A non-2xx answer from `/mcp` itself
(a wrong token, say) is shaped the same way; no answer at all is `failed to reach the taguru
server`. The tool list is the server's own (`server.mcp.tools.TOOLS`).

One JSON-RPC message per stdin line, each through the per-line gate (frame cap, UTF-8, JSON, no
batches, cancellation, protocol version); `initialize`, `ping`, `tools/list` and `server/discover`
are answered inline, each `tools/call` goes to a pool of workers through a bounded queue and is
answered when it completes (match replies by id). When stdin closes, every queued and running call
is still answered before the bridge exits 0. stdout carries only JSON-RPC frames (compact, sorted
keys, one per line); every log line goes to stderr.

Environment: `TAGURU_URL` (http://127.0.0.1:8248), `TAGURU_API_TOKEN` (sent as Bearer),
`TAGURU_MCP_TIMEOUT_SECS` (75), `TAGURU_MCP_MAX_LINE_BYTES` (64 MiB),
`TAGURU_MCP_MAX_CONCURRENT_TOOLS` (8; up to 4× that many more wait in the queue).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit

import structlog

from taguru_server.server.mcp.jsonrpc import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
    batch_refused,
    error_frame,
    reply_frame,
    shape_problem,
)
from taguru_server.server.variables import process_environment
from taguru_server.store.json_depth import parse_bounded

# The CLI imports this module to register `taguru mcp`, so the MCP SDK, aiohttp and the tool
# table are imported only when the bridge actually runs (they cost seconds on a cold start).
if TYPE_CHECKING:
    from taguru_server.client.http import TaguruClient
    from taguru_server.server.config import BridgeSettings
    from taguru_server.server.otel import Tracing

log = structlog.get_logger("taguru.mcp_stdio")

QUEUE_FACTOR = 4
INSTRUCTIONS_TIMEOUT_CAP = 5.0
UNREACHABLE = "failed to reach the taguru server"
QUEUE_FULL = "tool queue is full; retry the call"
PANICKED = "internal error: the tool call panicked; see the bridge's stderr log"
MODERN_PROTOCOL = "2026-07-28"
PROTOCOL_KEY = "io.modelcontextprotocol/protocolVersion"


def startup_warnings(settings: BridgeSettings) -> None:
    """The two start-up warnings, as plain stderr lines."""
    from taguru_server.client.urls import is_loopback_host

    if settings.token is None:
        print("taguru-mcp: TAGURU_API_TOKEN not set; requests go out without credentials", file=sys.stderr)
        return
    parts = urlsplit(settings.url)
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        print(
            "taguru-mcp: TAGURU_URL is plain http beyond loopback, so TAGURU_API_TOKEN travels unencrypted — prefer "
            "https, or tunnel to loopback",
            file=sys.stderr,
        )


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
        """`GET /protocol` (at most 5 s), served as `initialize.instructions`; else the bundled copy."""
        from taguru_server.client.http import TransportError
        from taguru_server.server.mcp.protocol import INSTRUCTIONS

        try:
            reply = await self.client.send(
                "GET", "/protocol", timeout=min(self.settings.timeout, INSTRUCTIONS_TIMEOUT_CAP)
            )
            if reply.status < 400:
                return reply.body.decode("utf-8")
            problem = f"HTTP {reply.status}"
        except TransportError as exc:
            problem = exc.detail
        except UnicodeDecodeError:
            problem = "the body is not UTF-8"
        print(
            f"taguru-mcp: GET /protocol failed ({problem}); serving the bundled copy — is the server up at "
            f"{self.settings.url}?",
            file=sys.stderr,
        )
        return INSTRUCTIONS

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

    async def call_tool(self, name: str, arguments: Any, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One tool call's `result`: the server's own, or a tool error of the bridge's."""
        from taguru_server.client.http import TransportError

        try:
            status, raw = await self.forward(name, arguments if isinstance(arguments, dict) else None, meta)
        except TransportError:
            log.warning("taguru.degrade", reason="bridge_unreachable", tool=name)
            return tool_error(UNREACHABLE)
        text = raw.decode("utf-8", "replace")
        try:
            reply = json.loads(text)
        except ValueError:
            reply = None
        if status >= 300 or not isinstance(reply, dict):
            return tool_error(f"HTTP {status}: {text}", reply)
        result = reply.get("result")
        if isinstance(result, dict):
            return result
        found = reply.get("error")
        error: dict[str, Any] = found if isinstance(found, dict) else {}
        raise ToolRpcError(int(error.get("code", SERVER_ERROR)), str(error.get("message", text)), error.get("data"))


class ToolRpcError(Exception):
    """The server answered a forwarded call with a JSON-RPC error: the bridge answers with the same."""

    def __init__(self, code: int, message: str, data: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def tool_error(text: str, structured: Any = None) -> dict[str, Any]:
    """A tool error result, as `POST /mcp` words one (`structuredContent` when the body was a JSON object)."""
    from taguru_server.server.mcp.endpoint import tool_error as endpoint_tool_error

    return endpoint_tool_error(text, structured)


def inline_result(method: str, params: dict[str, Any], instructions: str) -> dict[str, Any] | None:
    """The answer to a method the bridge answers itself, as `POST /mcp` would; None for an unknown one."""
    from taguru_server.server.mcp.endpoint import tools_list_result
    from taguru_server.server.mcp.protocol import LATEST_PROTOCOL, SERVER_META, SUPPORTED_PROTOCOLS
    from taguru_server.server.version import VERSION

    if method == "initialize":
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in SUPPORTED_PROTOCOLS else LATEST_PROTOCOL,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "taguru", "version": VERSION},
            "instructions": instructions,
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return tools_list_result()
    if method == "server/discover":
        return {
            "supportedVersions": [MODERN_PROTOCOL],
            "capabilities": {"tools": {}},
            "instructions": instructions,
            "ttlMs": 3600000,
            "cacheScope": "private",
            "resultType": "complete",
            "_meta": SERVER_META,
        }
    return None


class Call:
    """One queued `tools/call`: its id (and the id's JSON text, which cancellation matches), its params."""

    __slots__ = ("rid", "key", "params", "cancelled", "done")

    def __init__(self, rid: Any, params: dict[str, Any]) -> None:
        self.rid = rid
        self.key = json.dumps(rid)
        self.params = params
        self.cancelled = False
        self.done = False


class Bridge:
    """The stdio side: the per-line gate, inline answers, the worker pool, cancellation, and the drain at EOF."""

    def __init__(self, forwarder: Forwarder, instructions: str, out: BinaryIO) -> None:
        self.forwarder = forwarder
        self.instructions = instructions
        self.out = out
        self.lock = threading.Lock()
        workers = forwarder.settings.max_concurrent
        self.queue: asyncio.Queue[Call] = asyncio.Queue(maxsize=workers * QUEUE_FACTOR)
        self.live: list[Call] = []  # queued or running, in queue order
        self.workers = [asyncio.ensure_future(self._work()) for _ in range(workers)]

    def write(self, frame: dict[str, Any]) -> None:
        """One compact frame with sorted keys on its own line, flushed at once."""
        data = json.dumps(frame, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")
        with self.lock:
            self.out.write(data + b"\n")
            self.out.flush()

    def line(self, raw: bytes) -> None:
        """Gates 2-9 for one line (the frame cap is the reader's)."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.write(error_frame(PARSE_ERROR, "line is not UTF-8"))
            return
        if not text.strip():
            return
        try:
            value = parse_bounded(json.loads, text)  # the nesting limit of every JSON request
        except ValueError:
            self.write(error_frame(PARSE_ERROR, "line is not JSON"))
            return
        if isinstance(value, list):
            self.write(error_frame(INVALID_REQUEST, batch_refused("line")))
            return
        self.message(value)

    def message(self, value: Any) -> None:
        """One JSON-RPC message: cancellation, shape, notification, protocol version, then queue or answer."""
        if isinstance(value, dict) and self._cancellation(value):
            return
        problem = shape_problem(value)
        if problem is not None:
            self.write(error_frame(INVALID_REQUEST, problem[0], problem[1]))
            return
        rid, method = value.get("id"), value["method"]
        if rid is None:
            return  # a notification
        params = value.get("params") if isinstance(value.get("params"), dict) else {}
        meta = params.get("_meta")
        asked = meta.get(PROTOCOL_KEY) if isinstance(meta, dict) else None
        if isinstance(asked, str) and asked != MODERN_PROTOCOL:
            data = {"supported": [MODERN_PROTOCOL], "requested": asked}
            self.write(error_frame(-32022, "unsupported protocol version", rid, data))
            return
        if method == "tools/call":
            self._queue(Call(rid, params))
            return
        result = inline_result(method, params, self.instructions)
        if result is None:
            self.write(error_frame(METHOD_NOT_FOUND, f"unknown method '{method}'", rid))
        else:
            self.write(reply_frame(rid, result))

    def _cancellation(self, value: dict[str, Any]) -> bool:
        """A well-formed `notifications/cancelled`: the most recently queued live call with that id goes silent."""
        params = value.get("params")
        if (
            value.get("method") != "notifications/cancelled"
            or "id" in value
            or value.get("jsonrpc") != "2.0"
            or not isinstance(params, dict)
            or "requestId" not in params
        ):
            return False
        key = json.dumps(params["requestId"])
        for call in reversed(self.live):
            if call.key == key and not call.done:
                call.cancelled = True
                break
        return True

    def _queue(self, call: Call) -> None:
        try:
            self.queue.put_nowait(call)
        except asyncio.QueueFull:
            self.write(error_frame(SERVER_ERROR, QUEUE_FULL, call.rid))
            return
        self.live.append(call)

    async def _work(self) -> None:
        while True:
            call = await self.queue.get()
            try:
                if not call.cancelled:
                    frame = await self._run(call)
                    if not call.cancelled:
                        self.write(frame)
            finally:
                call.done = True
                self.live.remove(call)
                self.queue.task_done()

    async def _run(self, call: Call) -> dict[str, Any]:
        params = call.params
        name = params.get("name")
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else None
        try:
            result = await self.forwarder.call_tool(
                name if isinstance(name, str) else "", params.get("arguments"), meta
            )
        except ToolRpcError as err:
            return error_frame(err.code, err.message, call.rid, err.data)
        except Exception:
            log.exception("bridge.tool_call_failed")
            result = tool_error(PANICKED)
        return reply_frame(call.rid, result)

    async def drain(self) -> None:
        """Stdin closed: every queued and running call is answered, then the workers stop."""
        await self.queue.join()
        for worker in self.workers:
            worker.cancel()
        await asyncio.gather(*self.workers, return_exceptions=True)


async def read_lines(bridge: Bridge, stdin: BinaryIO, cap: int) -> None:
    """Read stdin (in a thread) until EOF; an oversized line is refused and the rest of it drained."""
    loop = asyncio.get_running_loop()
    while True:
        raw = await loop.run_in_executor(None, stdin.readline, cap + 2)
        if not raw:
            return
        if len(raw.rstrip(b"\r\n")) > cap:
            while raw and not raw.endswith(b"\n"):  # drop the rest of the oversized frame
                raw = await loop.run_in_executor(None, stdin.readline, 1024 * 1024)
            bridge.write(error_frame(PARSE_ERROR, f"line exceeds the {cap}-byte frame cap"))
            continue
        bridge.line(raw.rstrip(b"\r\n"))


async def serve(
    settings: BridgeSettings, stdin: BinaryIO | None = None, tracing: Tracing | None = None, out: BinaryIO | None = None
) -> None:
    """Run the bridge until stdin closes and every call it took is answered."""
    from taguru_server.client.http import TaguruClient

    startup_warnings(settings)
    bridge_client = TaguruClient(
        settings.url, settings.token, timeout=settings.timeout, max_response_bytes=None, connections=100
    )
    async with bridge_client as client:
        forwarder = Forwarder(settings, client, tracing)
        bridge = Bridge(forwarder, await forwarder.instructions(), out if out is not None else sys.stdout.buffer)
        log.info("bridge.ready", url=settings.url)
        await read_lines(bridge, stdin if stdin is not None else sys.stdin.buffer, settings.max_line_bytes)
        await bridge.drain()


def _url_refused(url: str, given_as: str) -> str | None:
    from taguru_server.client.urls import url_refusal

    return url_refusal(url, given_as)


def cmd_mcp(args: argparse.Namespace) -> int:
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
        asyncio.run(serve(settings, None, tracing))
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
