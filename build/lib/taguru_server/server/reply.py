"""A handler result that also carries response headers."""

from __future__ import annotations

from typing import Any


class Reply:
    """The `result` to envelope plus extra HTTP headers (e.g. Server-Timing)."""

    def __init__(self, result: Any, headers: dict[str, str]) -> None:
        self.result = result
        self.headers = headers


class Raw:
    """A complete response that is not enveloped (JSON-RPC replies, 202 acknowledgements)."""

    def __init__(self, status: int, body: bytes, content_type: str | None = "application/json") -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
