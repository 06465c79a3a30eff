"""The schema's write-time check, shared by every write entrance, the audit and the dry run; and the type reads.

A concept's type set is the objects of its live (count > 0) outgoing `schema:type` edges. The
check builds the type environment of a write (the write's own type assertions, all of them, plus
the live types of the concepts its facts name) before it judges any op, so line order never
matters; type ops themselves are never judged. Untyped sides never violate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from taguru_server.store.errors import Issue
from taguru_server.store.model.context import LABEL, Context
from taguru_server.store.model.schema import RESERVED_WHY, SCHEMA_TYPE, Schema, join_capped

RESERVED_EXPECTED = "a canonical spelling other than the one reserved for type assertions"
RESERVED_ACTUAL = f"resolves to 'schema:type', {RESERVED_WHY} — rename the alias"
CLOSED_EXPECTED = "a label declared in this context's schema (closed_labels)"
CLOSED_ACTUAL = "not declared in this context's schema"

Op = tuple[str, str, str]
"""(subject, label, object) of one association a write applies, as written."""


@attrs.frozen
class Finding:
    """One violation: the op it is about (its index among the write's association items) and the issue."""

    op: int
    side: str
    kind: str
    expected: str
    actual: str


@attrs.frozen
class Checked:
    """What the check found: reserved-alias issues (any mode) and violations (never truncated)."""

    reserved: list[Issue]
    violations: list[Finding]

    def outcome(self, mode: str) -> str:
        """The metric outcome of a counted check."""
        if self.reserved:
            return "refused"
        if not self.violations:
            return "ok"
        return "refused" if mode == "strict" else "warned"


def label_alias_canonicals(ctx: Context) -> dict[str, str]:
    """Every live label alias → its canonical spelling, in registration order."""
    labels = ctx.labels
    return {alias: labels[target] for alias, target in ctx.aliases[LABEL].items()}


def canonical_concept(ctx: Context, name: str) -> str:
    """The canonical spelling of a concept (exact, alias-folded); a name the context never interned stays as written."""
    cid = ctx.find_concept(name)
    return name if cid is None else ctx.concepts[cid]


def live_types(ctx: Context, concept: int, skip: Callable[[int], bool] | None = None) -> set[str]:
    """The objects of a concept's live outgoing `schema:type` edges (those `skip` does not drop)."""
    lab = ctx.label_id.get(SCHEMA_TYPE)
    if lab is None:
        return set()
    edges = ctx.edges
    return {
        ctx.concepts[edges.object[e]]
        for e in ctx.out_edges[concept]
        if edges.label[e] == lab and edges.count[e] > 0 and (skip is None or not skip(e))
    }


def hidden_label(ctx: Context) -> int | None:
    """The label id the read walks leave out: `schema:type`'s once a schema is installed (any mode), else None."""
    if ctx.meta.schema is None:
        return None
    return ctx.label_id.get(SCHEMA_TYPE)


def type_names(ctx: Context, schema: Schema) -> set[str]:
    """Every type name: the document's declared types and the object of every live `schema:type` edge."""
    out = set(schema.types)
    lab = ctx.label_id.get(SCHEMA_TYPE)
    if lab is not None:
        edges = ctx.edges
        out.update(ctx.concepts[edges.object[e]] for e in ctx.label_edges[lab] if edges.count[e] > 0)
    return out


def asserted_types(ctx: Context, name: str) -> list[str]:
    """The sorted live types of a concept named (alias-folded), as asserted (never `is_a`-expanded)."""
    cid = ctx.find_concept(name)
    return [] if cid is None else sorted(live_types(ctx, cid))


def expanded_types(ctx: Context, schema: Schema, concept: int) -> set[str]:
    """A concept's live types with everything each `is_a`."""
    return _expand(schema, live_types(ctx, concept))


def check(
    ctx: Context,
    schema: Schema,
    ops: Sequence[Op],
    declared_labels: Mapping[str, str] | None = None,
    retracted_source: str | None = None,
) -> Checked:
    """Judge the ops a write will apply against `schema` (see the module docstring)."""
    declared = declared_labels or {}
    reserved = [
        Issue(f"labels['{alias}']", "conflict", RESERVED_EXPECTED, RESERVED_ACTUAL)
        for alias, canonical in sorted(declared.items())
        if canonical == SCHEMA_TYPE
    ]
    if schema.mode == "off":
        return Checked(reserved, [])
    live = label_alias_canonicals(ctx)

    def resolve_label(spelling: str) -> str:
        cur = spelling
        for _ in range(4):  # declared first, then live
            nxt = declared.get(cur, live.get(cur))
            if nxt is None or nxt == cur:
                break
            cur = nxt
        return cur

    label_of = {label: resolve_label(label) for _s, label, _o in ops}
    canon: dict[str, str] = {}

    def canonical(name: str) -> str:
        got = canon.get(name)
        if got is None:
            got = canon[name] = canonical_concept(ctx, name)
        return got

    asserted: dict[str, set[str]] = {}
    facts: set[str] = set()
    for s, label, o in ops:
        if label_of[label] == SCHEMA_TYPE:
            asserted.setdefault(canonical(s), set()).add(canonical(o))
        else:
            facts.add(canonical(s))
            facts.add(canonical(o))
    skip = _kept_by(ctx, retracted_source)
    for name in sorted(facts):
        cid = ctx.concept_id.get(name)
        if cid is not None:
            found = live_types(ctx, cid, skip)
            if found:
                asserted.setdefault(name, set()).update(found)
    expanded = {c: _expand(schema, ts) for c, ts in asserted.items()}
    return Checked(reserved, list(_violations(schema, ops, label_of, canonical, asserted, expanded)))


def _kept_by(ctx: Context, source: str | None) -> Callable[[int], bool] | None:
    """Retract-then-apply: a type edge that only `source` keeps alive is about to go."""
    if source is None:
        return None
    sid = ctx.find_source(source)
    if sid is None:
        return None
    edges = ctx.edges

    def only_this_source(e: int) -> bool:
        mine = next((rec[2] for rec in edges.attributions[e] if rec[0] == sid), 0)
        return bool(edges.count[e] - mine <= 0)

    return only_this_source


def _expand(schema: Schema, types: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for t in types:
        out |= schema.closure(t)
    return out


def _violations(
    schema: Schema,
    ops: Sequence[Op],
    label_of: Mapping[str, str],
    canonical: Callable[[str], str],
    asserted: Mapping[str, set[str]],
    expanded: Mapping[str, set[str]],
) -> Iterable[Finding]:
    for i, (s, label, o) in enumerate(ops):  # every op, in request order
        canon_label = label_of[label]
        if canon_label == SCHEMA_TYPE:
            continue  # type ops are never judged
        rel = schema.relations.get(canon_label)
        if rel is None:
            if schema.closed_labels:
                yield Finding(i, "label", "unknown_reference", CLOSED_EXPECTED, CLOSED_ACTUAL)
            continue
        for side, name, wanted, kind in (("subject", s, rel.domain, "domain"), ("object", o, rel.range, "range")):
            have = expanded.get(canonical(name), set())
            if wanted and have and wanted.isdisjoint(have):
                yield Finding(
                    i,
                    side,
                    kind,
                    f"'{name}' typed as one of [{join_capped(sorted(wanted))}] (or a subtype), "
                    f"for relation '{canon_label}'",
                    f"typed as [{join_capped(sorted(asserted[canonical(name)]))}]",
                )


def issues(found: Iterable[Finding], prefix: str = "associations") -> list[Issue]:
    """Findings as issues with paths `{prefix}[{i}].{side}` (the bare side when `prefix` is empty)."""
    return [Issue(f"{prefix}[{f.op}].{f.side}" if prefix else f.side, f.kind, f.expected, f.actual) for f in found]
