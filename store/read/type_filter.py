"""The type filters of `query` (`subject_types`, `object_types`): which matches keep their place.

A filter is active when it names at least one type. On a context without a schema an active filter
keeps nothing (never an error, never the unfiltered set). Otherwise a match is kept when, for each
active side, the `is_a`-expanded union of that side's live asserted types (read from the unwindowed
graph: a window never hides a type) shares a name with the filter. Names compare exactly: no alias
folding and no closure on the filter's side, so an unknown type matches nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from taguru_server.store.model.context import Context
from taguru_server.store.model.schema_check import expanded_types


def active(values: Sequence[str] | None) -> bool:
    """Whether a filter names at least one type."""
    return bool(values)


def apply_type_filter(
    ctx: Context, matches: list[int], subject_types: Sequence[str] | None, object_types: Sequence[str] | None
) -> list[int]:
    """The matching edges (ids) the active filters keep, in their order."""
    wanted_s = set(subject_types or ())
    wanted_o = set(object_types or ())
    if not wanted_s and not wanted_o:
        return matches
    schema = ctx.schema
    if schema is None:
        return []
    memo: dict[int, set[str]] = {}

    def types_of(concept: int) -> set[str]:
        got = memo.get(concept)
        if got is None:
            got = memo[concept] = expanded_types(ctx, schema, concept)
        return got

    edges = ctx.edges
    return [
        e
        for e in matches
        if (not wanted_s or not wanted_s.isdisjoint(types_of(edges.subject[e])))
        and (not wanted_o or not wanted_o.isdisjoint(types_of(edges.object[e])))
    ]
