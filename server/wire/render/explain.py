"""The wire results of the resolve explanation (docs/explain.md), rendered from the store's placement and verdict."""

from __future__ import annotations

from typing import Any

from taguru_server.store.read.explain import (
    GlossLane,
    Vocabulary,
    namespace,
    place,
    resolve_verdict,
    semantic_reason,
)
from taguru_server.store.read.resolve import ResolveMatch
from taguru_server.store.read.semantic import confident
from taguru_server.store.wire import F32 as WireF32


def not_in_vocabulary(
    kind: int,
    cue: str,
    expected: str,
    view: Vocabulary,
    glosses: list[tuple[str, float]],
    note: str | None,
) -> dict[str, Any]:
    """The first verdict: `expected` is no stored spelling; the nearest ones are attached."""
    nearest: dict[str, Any] = {
        "lexical": [{"name": m.name, "score": m.score, "kind": m.kind} for m in view.nearest],
        "semantic": [{"name": n, "cosine": WireF32(c)} for n, c in glosses],
    }
    if note is not None:
        nearest["semantic_note"] = note
    return {
        "verdict": "not_in_vocabulary",
        "summary": f"'{expected}' is not in this context's {namespace(kind)} vocabulary — no entry, no alias, no "
        "canonical spelling; the nearest stored spellings are attached",
        "cue": cue,
        "expected": expected,
        "in_vocabulary": False,
        "nearest": nearest,
    }


def _semantic_block(entered: bool, lane: GlossLane, reason: str | None) -> dict[str, Any]:
    """The semantic tier's part of a resolve explanation: whether it joined, why not, the canonical's seat."""
    out: dict[str, Any] = {"entered": entered}
    if reason is not None:
        out["reason"] = reason
    if lane.ran:
        out["floor"] = WireF32(lane.floor or 0.0)
        if lane.cosine is not None:
            out["cosine"] = WireF32(lane.cosine)
        if lane.rank is not None:
            out["rank"] = lane.rank
        out["cap"] = lane.cap
    return out


def resolve_explanation(
    cue: str,
    expected: str,
    view: Vocabulary,
    full: list[ResolveMatch],
    semantic: list[tuple[str, float]],
    limit: int,
    lane: GlossLane,
) -> dict[str, Any]:
    """The explanation when `expected` is a stored spelling: `full` is the lexical list at the floor (not cut),
    `semantic` the candidates the semantic tier added to the real call, `lane` the gloss lane's account."""
    assert view.membership is not None
    p = place(view, full, semantic, limit)
    entered = not confident(full)
    reason = semantic_reason(entered, lane, p.canonical)
    block = _semantic_block(entered, lane, reason)
    verdict, summary = resolve_verdict(p, view, entered, lane, reason)
    lexical: dict[str, Any] = {}
    if p.target is not None:
        lexical = {"score": p.target.score, "kind": p.target.kind}
    ranking: dict[str, Any] = {}
    if p.merged_at is not None:
        seat = p.merged[p.merged_at]
        ranking = {"rank": p.merged_at + 1, "tier": seat.tier, "score": seat.score}
    ranking.update({"limit": limit, "served": p.served_at is not None})
    if p.reach is not None:
        ranking["limit_to_reach"] = p.reach
    return {
        "verdict": verdict,
        "summary": summary,
        "cue": cue,
        "expected": expected,
        "in_vocabulary": True,
        "canonical": p.canonical,
        "expected_kind": view.membership.kind,
        "lexical": {**lexical, "floor": view.floor, "confident": not entered},
        "semantic": block,
        "ranking": ranking,
    }
