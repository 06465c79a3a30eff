"""The wire result of the schema audit and validate."""

from __future__ import annotations

from typing import Any

from taguru_server.server.errors import issue_out
from taguru_server.stages.render import association_out
from taguru_server.store.derive.schema_audit import Names, SchemaAudit
from taguru_server.store.model.context import Context
from taguru_server.store.model.schema_check import issues


def _names(section: Names) -> dict[str, Any]:
    return {"total": section.total, "names": section.names}


def audit_out(ctx: Context, found: SchemaAudit) -> dict[str, Any]:
    """`{total, violations, untyped_concepts, undeclared_types, unknown_labels, reserved_alias_conflicts}`."""
    return {
        "total": found.total,
        "violations": [
            {"association": association_out(ctx, e), "issues": [issue_out(i) for i in issues(fs, prefix="")]}
            for e, fs in found.violations
        ],
        "untyped_concepts": _names(found.untyped_concepts),
        "undeclared_types": _names(found.undeclared_types),
        "unknown_labels": _names(found.unknown_labels),
        "reserved_alias_conflicts": {"total": found.reserved_total, "aliases": found.reserved_aliases},
    }
