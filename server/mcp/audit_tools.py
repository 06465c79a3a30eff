"""The MCP tools of the audits (docs/audits.md): vocabulary, consolidation, coverage, drift and the schema
audits.

Each tool is one routed call under the caller's key; the definitions are the reference's, verbatim. The tool
class is passed in by `tools.py`, which owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from taguru_server.server.mcp.props import CONTEXT, cursor_prop, int_prop

T = TypeVar("T")


def tools(tool: Callable[..., T]) -> tuple[T, ...]:
    """audit_vocabulary, audit_consolidation, audit_coverage, audit_drift, audit_schema, validate_schema, as
    `tool(...)` builds them."""
    return (
        tool(
            "audit_vocabulary",
            (
                "Vocabulary health check: lexical fork candidates (青嶺酒蔵/青嶺酒造) and "
                "semantic ones (創業年/設立年; needs embeddings). Candidates, not verdicts — "
                "same referent → alias onto one canonical; different things that will "
                "keep colliding → record one ordinary 別物/distinct_from fact (one "
                "direction suffices; it lands in both glosses and warns future resolves). "
                "Run at ingest milestones."
            ),
            {
                "context": CONTEXT,
                "cosine_floor": {"description": "semantic floor (default 0.6)", "type": "number"},
                "dice_floor": {"description": "lexical floor (default 0.6)", "type": "number"},
            },
            ("context",),
            "POST",
            "/contexts/{context}/vocabulary/audit",
            checks=("S:context",),
            body=("dice_floor", "cosine_floor"),
        ),
        tool(
            "audit_consolidation",
            (
                "Consolidation candidates (ADR 0012), sections chosen by `checks`: merge "
                "(spelling/synonym twins corroborated by shared live structure, types "
                "attached when a schema exists), contradiction (multiple live objects "
                "under one subject+label, ranked by how one-object the label usually is, "
                "rows dated; plus sign-contested edges with both sides' sources), "
                "staleness (facts whose latest assertion trails their own subject's "
                "newest, with an honest undatable count). CANDIDATES for review, never "
                "verdicts — judge each, then apply through ordinary writes (alias / "
                "retract / negative weight / re-import). Every candidate carries a "
                "`fingerprint` over its own evidence: judge once per fingerprint and "
                "reuse the judgment until it moves."
            ),
            {
                "checks": {
                    "description": "required, non-empty: each section is a full-graph pass",
                    "items": {"enum": ["merge", "contradiction", "staleness"], "type": "string"},
                    "minItems": 1,
                    "type": "array",
                },
                "context": CONTEXT,
                "cosine_floor": {"description": "merge: semantic floor (default 0.6)", "type": "number"},
                "dice_floor": {"description": "merge: lexical floor (default 0.6)", "type": "number"},
                "evidence_cap": int_prop("per-list merge evidence ceiling (default 20)"),
                "floor_secs": int_prop("staleness: minimum gap in seconds (default 0)"),
                "limit": int_prop("per-section candidate ceiling (default 100, capped at 1000); totals stay exact"),
            },
            ("context", "checks"),
            "POST",
            "/contexts/{context}/consolidation/audit",
            checks=("S:context", "P:checks"),
            body=("checks", "limit", "evidence_cap", "dice_floor", "cosine_floor", "floor_secs"),
        ),
        tool(
            "audit_coverage",
            (
                "Post-ingest audit: associations unreachable from origins (the document's "
                "main entities). Non-empty = membership edges are missing — add them "
                "before finishing."
            ),
            {
                "after": cursor_prop(
                    "resume past the previous page's last match — copy every field verbatim "
                    "from it. total stays constant across pages"
                ),
                "context": CONTEXT,
                "limit": int_prop("default 100, capped at 1000"),
                "origins": {"items": {"type": "string"}, "type": "array"},
            },
            ("context", "origins"),
            "POST",
            "/contexts/{context}/unreachable_from",
            checks=("S:context", "P:origins"),
            body=("origins", "limit", "after"),
        ),
        tool(
            "audit_drift",
            (
                "Graph-vs-archive drift audit: three read-only checks in one call. "
                "Unsourced weight — edges carrying weight no named source explains, the "
                "residue plain associate() calls or an export/import round trip leave "
                "behind — worst-first, paginated, filterable with unsourced_floor. "
                "Dead-canonical aliases — alias spellings whose canonical concept or "
                "label has zero live edges left. Optionally (include_twins) the same "
                "lexical/semantic fork candidates audit_vocabulary finds. Run "
                "periodically to catch drift audit_coverage and audit_vocabulary don't: "
                "weight nothing ingested explains, and aliases pointing at names nothing "
                "uses anymore."
            ),
            {
                "after": cursor_prop(
                    "resume past the previous page's last unsourced match — copy every field "
                    "verbatim from it. total stays constant across pages"
                ),
                "context": CONTEXT,
                "cosine_floor": {
                    "description": "semantic floor (default 0.6); only used when include_twins is set",
                    "type": "number",
                },
                "dice_floor": {
                    "description": "lexical floor (default 0.6); only used when include_twins is set",
                    "type": "number",
                },
                "include_twins": {
                    "description": (
                        "also run the lexical/semantic fork-candidate sweep and include it as "
                        "`twins` (default false — it's the same CPU-bound pairwise scan "
                        "audit_vocabulary runs)"
                    ),
                    "type": "boolean",
                },
                "limit": int_prop("default 100, capped at 1000"),
                "unsourced_floor": {
                    "description": "minimum unsourced weight (by magnitude) to include; default: any amount at all",
                    "type": "number",
                },
            },
            ("context",),
            "POST",
            "/contexts/{context}/drift/audit",
            checks=("S:context",),
            body=("unsourced_floor", "limit", "after", "include_twins", "dice_floor", "cosine_floor"),
        ),
        tool(
            "audit_schema",
            (
                "ADR 0009 schema audit: judges every live association against the "
                "installed schema document, surfacing what a `strict` flip would refuse "
                "without waiting for one — the pre-existing violations `strict` itself "
                "can never show (it only judges a write as it happens). Four "
                "candidates-not-verdicts sections in one call: violations (domain/range "
                "mismatches, paginated, worst-first), untyped_concepts (asserted no "
                "schema:type of their own), undeclared_types (asserted type names absent "
                "from `types`, always reported), unknown_labels (relation labels absent "
                "from `relations`, only when closed_labels is set), and "
                "reserved_alias_conflicts (a persisted label alias resolving to the "
                "reserved schema:type label). Never auto-applies a fix. 404 if the "
                "context has no installed schema."
            ),
            {
                "after": cursor_prop(
                    "resume past the previous page's last violation — copy every field "
                    "verbatim from it. total stays constant across pages"
                ),
                "context": CONTEXT,
                "limit": int_prop("default 100, capped at 1000 — pages violations only"),
            },
            ("context",),
            "POST",
            "/contexts/{context}/schema/audit",
            checks=("S:context",),
            body=("limit", "after"),
        ),
        tool(
            "validate_schema",
            (
                "Dry-run of a PROPOSED schema document (same shape as put_schema's own "
                "arguments) against the live graph — never persisted, and reads the "
                "installed schema for no purpose (the proposed document alone drives the "
                "judgment, even in a context with none installed yet). The pre-flight "
                "before flipping mode to strict: run this first with the intended "
                "document to see every "
                "violations()/untyped_concepts/undeclared_types/unknown_labels finding it "
                "would produce once installed. Same response shape as audit_schema."
            ),
            {
                "after": cursor_prop(
                    "resume past the previous page's last violation — copy every field "
                    "verbatim from it. total stays constant across pages"
                ),
                "context": CONTEXT,
                "document": {
                    "description": (
                        "the proposed schema document, same shape as put_schema's own arguments "
                        "(schema, mode, closed_labels, types, relations), never installed"
                    ),
                    "properties": {
                        "closed_labels": {"type": "boolean"},
                        "mode": {"enum": ["off", "warn", "strict"], "type": "string"},
                        "relations": {
                            "additionalProperties": {
                                "properties": {
                                    "domain": {"items": {"type": "string"}, "type": "array"},
                                    "range": {"items": {"type": "string"}, "type": "array"},
                                },
                                "type": "object",
                            },
                            "type": "object",
                        },
                        "schema": {
                            "description": "document format version this binary reads (currently 1)",
                            "type": "integer",
                        },
                        "types": {
                            "additionalProperties": {
                                "properties": {"is_a": {"items": {"type": "string"}, "type": "array"}},
                                "type": "object",
                            },
                            "type": "object",
                        },
                    },
                    "required": ["schema", "mode", "closed_labels", "types", "relations"],
                    "type": "object",
                },
                "limit": int_prop("default 100, capped at 1000 — pages violations only"),
            },
            ("context", "document"),
            "POST",
            "/contexts/{context}/schema/validate",
            checks=("S:context", "P:document"),
            body=("document", "limit", "after"),
        ),
    )
