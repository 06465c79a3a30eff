"""JSON-schema pieces every MCP tool's input schema is built from."""

from __future__ import annotations

from typing import Any


def int_prop(description: str) -> dict[str, Any]:
    return {"description": description, "minimum": 0, "type": "integer"}


def str_prop(description: str) -> dict[str, Any]:
    return {"description": description, "type": "string"}


CONTEXT = str_prop("Context name (from list_contexts)")


def cursor_prop(description: str, lead: str = "weight", lead_type: str = "number", **extra: Any) -> dict[str, Any]:
    """A keyset cursor argument: the ordering field `lead`, then the last match's triple (and `extra` fields)."""
    fields = {lead: {"type": lead_type}, "subject": {"type": "string"}, "label": {"type": "string"}}
    fields["object"] = {"type": "string"}
    return {
        "description": description,
        "properties": dict(sorted({**fields, **extra}.items())),
        "required": [lead, "subject", "label", "object"],
        "type": "object",
    }
