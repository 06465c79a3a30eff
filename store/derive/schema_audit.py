"""The schema audit: every live association judged against a document as if it were strict, plus the name
sections (untyped concepts, undeclared types, unknown labels, reserved label aliases). Writes nothing."""

from __future__ import annotations

from typing import Any

import attrs

from taguru_server.store.model.context import Context
from taguru_server.store.model.schema import MAX_AUDIT_NAMES, SCHEMA_TYPE, Schema
from taguru_server.store.model.schema_check import Finding, check, label_alias_canonicals
from taguru_server.store.read.query import page_edges


@attrs.frozen
class Names:
    """One name section: the true count and the first MAX_AUDIT_NAMES names, sorted."""

    total: int
    names: list[str]


def _names(found: set[str]) -> Names:
    ordered = sorted(found)
    return Names(len(ordered), ordered[:MAX_AUDIT_NAMES])


@attrs.frozen
class SchemaAudit:
    """The audit's answer: one page of violating edges with their findings, and the four sections."""

    total: int
    violations: list[tuple[int, list[Finding]]]
    untyped_concepts: Names
    undeclared_types: Names
    unknown_labels: Names
    reserved_aliases: dict[str, str]
    reserved_total: int


def audit(ctx: Context, schema: Schema, limit: int, after: dict[str, Any] | None) -> SchemaAudit:
    """Judge every live edge against `schema` (its mode ignored) and page the violating ones like recall."""
    edges = ctx.edges
    live = [e for e in range(len(edges)) if edges.count[e] > 0]
    type_label = ctx.label_id.get(SCHEMA_TYPE)
    violating, findings = _violating(ctx, schema, [e for e in live if edges.label[e] != type_label])
    page = page_edges(ctx, violating, limit, after)
    untyped, undeclared, unknown = _sections(ctx, schema, live, type_label)
    reserved = {a: c for a, c in sorted(label_alias_canonicals(ctx).items()) if c == SCHEMA_TYPE}
    return SchemaAudit(
        len(violating),
        [(e, findings[e]) for e in page],
        _names(untyped),
        _names(undeclared),
        _names(unknown),
        dict(list(reserved.items())[:MAX_AUDIT_NAMES]),
        len(reserved),
    )


def _violating(ctx: Context, schema: Schema, facts: list[int]) -> tuple[list[int], dict[int, list[Finding]]]:
    """The fact edges with at least one issue (in edge order), and each one's findings."""
    edges, concepts, labels = ctx.edges, ctx.concepts, ctx.labels
    ops = [(concepts[edges.subject[e]], labels[edges.label[e]], concepts[edges.object[e]]) for e in facts]
    by_op: dict[int, list[Finding]] = {}
    for f in check(ctx, schema.with_mode("strict"), ops).violations:
        by_op.setdefault(f.op, []).append(f)
    return [facts[i] for i in sorted(by_op)], {facts[i]: fs for i, fs in by_op.items()}


def _sections(
    ctx: Context, schema: Schema, live: list[int], type_label: int | None
) -> tuple[set[str], set[str], set[str]]:
    """Untyped concepts, undeclared type names, and (closed labels) labels with no relation entry."""
    edges, concepts, labels = ctx.edges, ctx.concepts, ctx.labels
    live_concepts = {c for e in live for c in (edges.subject[e], edges.object[e])}
    typed = {edges.subject[e] for e in live if edges.label[e] == type_label}
    type_names = {concepts[edges.object[e]] for e in live if edges.label[e] == type_label}
    untyped = {
        concepts[c]
        for c in live_concepts
        if c not in typed and concepts[c] not in type_names and concepts[c] not in schema.types
    }
    unknown: set[str] = set()
    if schema.closed_labels:
        unknown = {labels[lab] for lab in {edges.label[e] for e in live}} - {SCHEMA_TYPE} - set(schema.relations)
    return untyped, {t for t in type_names if t not in schema.types}, unknown
