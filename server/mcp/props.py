"""JSON-schema pieces every MCP tool's input schema is built from."""

from __future__ import annotations

from typing import Any


def int_prop(description: str) -> dict[str, Any]:
    return {"description": description, "minimum": 0, "type": "integer"}


def str_prop(description: str) -> dict[str, Any]:
    return {"description": description, "type": "string"}


def num_prop(description: str) -> dict[str, Any]:
    return {"description": description, "type": "number"}


CONTEXT = str_prop("Context name (from list_contexts)")
STRINGS = {"items": {"type": "string"}, "type": "array"}

# A search that targets one context (`context`) or several at once (`contexts` and/or `groups`).
CONTEXTS = {
    "description": (
        "several contexts at once — full names; every match comes back tagged "
        "with its context. Combines with groups; don't pass context beside it."
    ),
    **STRINGS,
}
GROUPS = {
    "description": (
        "group names (from list_groups) — each resolves to every context it "
        "reaches, nested children included, deduped against contexts and each "
        "other. Combines with contexts; don't pass context beside it."
    ),
    **STRINGS,
}
ANY_TARGET = {"anyOf": [{"required": ["context"]}, {"required": ["contexts"]}, {"required": ["groups"]}]}


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
