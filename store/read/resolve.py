"""The resolve lane: a cue to canonical concept (or label) names, lexically, best first."""

from __future__ import annotations

import attrs

from taguru_server.store.model.context import CONCEPT, Context
from taguru_server.store.text import normalize

GLOSSED_CANDIDATES = 8


@attrs.frozen
class ResolveMatch:
    """One resolve candidate: the concept (or label) record, its name, Dice score and hit kind."""

    record: int
    name: str
    score: float
    kind: str


def resolve_matches(ctx: Context, kind: int, cue: str, dice_floor: float, limit: int) -> list[ResolveMatch]:
    """Lexical resolve of a cue to canonical concept (or label) names, best first."""
    names = ctx.concepts if kind == CONCEPT else ctx.labels
    lexicon = ctx.lexicons[kind]
    found = lexicon.lookup(cue, dice_floor)
    if not found:
        return []
    q = normalize(cue)
    rows = []
    for record, score, hit_kind in found:
        name = names[record]
        if hit_kind == "exact" and normalize(name) != q:
            hit_kind = "alias"
        rows.append(ResolveMatch(record, name, float(score), hit_kind))
    rows.sort(key=lambda r: (-r.score, r.name))
    return rows[:limit]
