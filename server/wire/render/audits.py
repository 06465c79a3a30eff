"""The wire results of the vocabulary and drift audits, rendered from the store's typed sweeps."""

from __future__ import annotations

from typing import Any

from taguru_server.stages.render import association_out
from taguru_server.store.derive import audits
from taguru_server.store.derive.twins import Twins, semantic_pairs
from taguru_server.store.model.context import CONCEPT, LABEL, Context


def semantic_out(ctx: Context, kind: int, found: Twins) -> list[dict[str, Any]]:
    """The semantic pairs of one namespace on the wire, related pairs removed (read on the loop)."""
    return [{"a": a, "b": b, "score": score} for a, b, score in semantic_pairs(ctx, kind, found)]


def vocabulary(ctx: Context, found: Twins) -> dict[str, Any]:
    """The vocabulary audit's result from a sweep of both namespaces."""
    return {
        "lexical_concepts": _pairs_out(ctx.concepts, found.lexical[CONCEPT]),
        "lexical_labels": _pairs_out(ctx.labels, found.lexical[LABEL]),
        "semantic_concepts": semantic_out(ctx, CONCEPT, found),
        "semantic_labels": semantic_out(ctx, LABEL, found),
        "semantic_note": found.note,
    }


def _pairs_out(names: list[str], pairs: list[tuple[int, int, float]]) -> list[dict[str, Any]]:
    return [{"a": names[a], "b": names[b], "score": d} for a, b, d in pairs]


def unsourced(
    ctx: Context, floor: float, limit: int, after: dict[str, Any] | None, deadline: float | None
) -> tuple[int, list[dict[str, Any]]]:
    """(total past the floor, one wire page) of the unsourced sweep: weight and count left, the association."""
    total, page = audits.unsourced(ctx, floor, limit, after, deadline)
    return total, [
        {"unsourced_weight": u.weight, "unsourced_count": u.count, "association": association_out(ctx, u.edge)}
        for u in page
    ]
