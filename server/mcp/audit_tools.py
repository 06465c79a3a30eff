"""The MCP tools of the audits and promote (docs/audits.md): one routed call each, under the caller's key.

`audit_consolidation` is the reference's definition verbatim (`mcp/audit_consolidation_tool_schema.json`).
The tool class is passed in by `tools.py`, which owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from taguru_server.server.mcp.props import CONTEXT as _CONTEXT
from taguru_server.server.mcp.props import int_prop as _int_prop
from taguru_server.server.mcp.props import str_prop as _str_prop

T = TypeVar("T")

CONSOLIDATION_DESCRIPTION = (
    "Consolidation candidates (ADR 0012), sections chosen by `checks`: merge (spelling/synonym twins corroborated by "
    "shared live structure, types attached when a schema exists), contradiction (multiple live objects under one "
    "subject+label, ranked by how one-object the label usually is, rows dated; plus sign-contested edges with both "
    "sides' sources), staleness (facts whose latest assertion trails their own subject's newest, with an honest "
    "undatable count). CANDIDATES for review, never verdicts — judge each, then apply through ordinary writes "
    "(alias / retract / negative weight / re-import). Every candidate carries a `fingerprint` over its own evidence: "
    "judge once per fingerprint and reuse the judgment until it moves."
)


def tools(tool: Callable[..., T]) -> tuple[T, ...]:
    """audit_vocabulary, audit_drift, audit_consolidation and promote, as `tool(...)` builds them."""
    return (
        tool(
            "audit_vocabulary",
            "Spelling twins (bigram Dice over concept and label names, plus gloss-vector twins when vectors exist): "
            "CANDIDATES for alias review, never verdicts.",
            {
                "context": _CONTEXT,
                "dice_floor": {"description": "lexical floor (default 0.6)", "type": "number"},
                "cosine_floor": {"description": "semantic floor (default 0.6)", "type": "number"},
            },
            ("context",),
            "POST",
            "/contexts/{context}/vocabulary/audit",
            ("dice_floor", "cosine_floor"),
        ),
        tool(
            "audit_drift",
            "Drift in one pass: edges whose weight no source covers (paged like recall, ranked by unsourced weight), "
            "aliases whose canonical has no live edge, and optionally the vocabulary twins.",
            {
                "context": _CONTEXT,
                "unsourced_floor": {"description": "minimum |unsourced weight| (default 0)", "type": "number"},
                "limit": _int_prop("unsourced page size (default 100, capped at 1000)"),
                "after": {
                    "description": "cursor: the last entry's unsourced_weight, subject, label, object",
                    "type": "object",
                },
                "include_twins": {"description": "also run the vocabulary audit (default false)", "type": "boolean"},
                "dice_floor": {"description": "twins: lexical floor (default 0.6)", "type": "number"},
                "cosine_floor": {"description": "twins: semantic floor (default 0.6)", "type": "number"},
            },
            ("context",),
            "POST",
            "/contexts/{context}/drift/audit",
            ("unsourced_floor", "limit", "after", "include_twins", "dice_floor", "cosine_floor"),
        ),
        tool(
            "audit_consolidation",
            CONSOLIDATION_DESCRIPTION,
            {
                "checks": {
                    "description": "required, non-empty: each section is a full-graph pass",
                    "items": {"enum": ["merge", "contradiction", "staleness"], "type": "string"},
                    "minItems": 1,
                    "type": "array",
                },
                "context": _CONTEXT,
                "cosine_floor": {"description": "merge: semantic floor (default 0.6)", "type": "number"},
                "dice_floor": {"description": "merge: lexical floor (default 0.6)", "type": "number"},
                "evidence_cap": _int_prop("per-list merge evidence ceiling (default 20)"),
                "floor_secs": _int_prop("staleness: minimum gap in seconds (default 0)"),
                "limit": _int_prop("per-section candidate ceiling (default 100, capped at 1000); totals stay exact"),
            },
            ("context", "checks"),
            "POST",
            "/contexts/{context}/consolidation/audit",
            ("checks", "limit", "evidence_cap", "dice_floor", "cosine_floor", "floor_secs"),
        ),
        tool(
            "promote",
            "Move named sources whole from this context into another, established one (write role; a scoped key "
            "needs a grant on both): each source's own shares, passage and live aliases, replacing that source "
            "there. `dry_run` previews the batches without writing; a real run ends with the destination's "
            "consolidation audit.",
            {
                "context": _CONTEXT,
                "into": _str_prop("the destination context (must exist)"),
                "sources": {"description": "source ids to promote", "items": {"type": "string"}, "type": "array"},
                "audit": {
                    "description": "run the destination's consolidation audit afterwards (default true)",
                    "type": "boolean",
                },
                "dry_run": {"description": "preview only (default false)", "type": "boolean"},
            },
            ("context", "into", "sources"),
            "POST",
            "/contexts/{context}/promote",
            ("into", "sources", "audit"),
            query_keys=("dry_run",),
        ),
    )
