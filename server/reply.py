"""Handler results and how they become responses: the ok envelope, `Reply` headers, `Raw` bodies."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from taguru_server.store.wire import Encoded, dumps_bytes


class Reply:
    """The `result` to envelope plus extra HTTP headers (e.g. Server-Timing) and extra envelope keys
    after `time` (a warned write's `issues` and `schema_violations`)."""

    def __init__(self, result: Any, headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> None:
        self.result = result
        self.headers = headers
        self.extra = extra


class Raw:
    """A complete response that is not enveloped (JSON-RPC replies, 202 acknowledgements)."""

    def __init__(self, status: int, body: bytes, content_type: str | None = "application/json") -> None:
        self.status = status
        self.body = body
        self.content_type = content_type


def ok_body(result: Any, elapsed: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The success envelope (with any extra keys after `time`)."""
    body = {"result": result, "status": "ok", "time": elapsed}
    if extra:
        body.update(extra)
    return body


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """Compact UTF-8 JSON with the reference float layout."""
    return web.Response(
        body=dumps_bytes(body), status=status, content_type="application/json", charset="utf-8", headers=headers
    )


def render(result: Any, started: float) -> web.StreamResponse:
    """A handler's result as the HTTP response: a streamed response or `Raw` as is, anything else enveloped."""
    if isinstance(result, web.StreamResponse):
        return result
    if isinstance(result, Raw):
        raw = web.Response(body=result.body, status=result.status)
        if result.content_type:
            raw.content_type = result.content_type
        return raw
    headers = extra = None
    if isinstance(result, Reply):
        headers, extra, result = result.headers, result.extra, result.result
    if isinstance(result, Encoded):  # encoded ahead, off the loop: spliced into the envelope, not re-encoded
        elapsed = dumps_bytes(time.perf_counter() - started)
        body = b"".join((b'{"result":', result.data, b',"status":"ok","time":', elapsed, b"}"))
        return web.Response(body=body, content_type="application/json", charset="utf-8", headers=headers)
    return json_response(ok_body(result, time.perf_counter() - started, extra), headers=headers)
