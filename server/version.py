"""The server version and the contract versions `GET /version` publishes."""

from __future__ import annotations

from typing import Any

VERSION = "0.1.0"


def version_body() -> dict[str, Any]:
    """The `GET /version` body: this build and the contract versions it speaks."""
    return {
        "server": VERSION,
        "http_contract": {"current": 1, "supported": [1]},
        "mcp_contract": {"current": 1, "supported": [1]},
        "mcp_protocol": {"supported": ["2024-11-05", "2025-03-26", "2025-06-18"]},
        "batch_formats": [1],
        "schema_formats": [1],
        "image_formats": [],
        "communities_formats": [1],
    }
