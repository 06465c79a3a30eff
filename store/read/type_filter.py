"""The type filter of a single-context query: `subject_types` and `object_types` over the matching edges."""

from __future__ import annotations

from taguru_server.store.model.context import Context


def apply_type_filter(
    ctx: Context, matches: list[int], subject_types: list[str] | None, object_types: list[str] | None
) -> list[int]:
    """The matching edges whose subject and object carry the requested types, in the order given.

    The full rule (the context schemas' type-aware query, B.7.3 of the windows and schemas
    contract): each non-empty list is an OR-set of type names; an edge is kept when its subject's
    type set meets `subject_types` and its object's type set meets `object_types`, where a
    concept's types are the objects of its live `schema:type` edges in the unwindowed graph,
    expanded upwards along the schema's `is_a` declarations. It runs after the window and before
    the total, the cursor and the limit.

    A context without a schema declares no types, so nothing passes a type filter there; with a
    schema the matches pass unchanged until the type sets are built."""
    if getattr(ctx, "schema", None) is None:
        return []
    return matches
