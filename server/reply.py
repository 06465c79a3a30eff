"""A handler result that also carries response headers."""

from __future__ import annotations

from typing import Any


class Reply:
    """The `result` to envelope plus extra HTTP headers (e.g. Server-Timing)."""

    def __init__(self, result: Any, headers: dict[str, str]) -> None:
        self.result = result
        self.headers = headers
