"""JSON-schema pieces every MCP tool's input schema is built from."""

from __future__ import annotations

from typing import Any


def int_prop(description: str) -> dict[str, Any]:
    return {"description": description, "minimum": 0, "type": "integer"}


def str_prop(description: str) -> dict[str, Any]:
    return {"description": description, "type": "string"}


CONTEXT = str_prop("Context name (from list_contexts)")
