"""The wire result of the consolidation audit, rendered from the store's typed sections."""

from __future__ import annotations

from typing import Any

from taguru_server.store.derive.consolidation import (
    DETECTOR,
    Consolidation,
    ContestedCandidate,
    ContradictionSection,
    Fact,
    MergeCandidate,
    MergeSection,
    ObjectsCandidate,
    StalenessSection,
)


def consolidation_out(found: Consolidation) -> dict[str, Any]:
    """The consolidation audit's result: the detector, then the requested sections in check order."""
    out: dict[str, Any] = {"detector": DETECTOR}
    if found.merge is not None:
        out["merge"] = merge_out(found.merge)
    if found.contradiction is not None:
        out["contradiction"] = contradiction_out(found.contradiction)
    if found.staleness is not None:
        out["staleness"] = staleness_out(found.staleness)
    return out


def merge_out(section: MergeSection) -> dict[str, Any]:
    """The merge section: total, candidates, and the semantic tier's note when there is one."""
    out: dict[str, Any] = {"total": section.total, "candidates": [_merge_candidate(c) for c in section.candidates]}
    if section.semantic_note is not None:
        out["semantic_note"] = section.semantic_note
    return out


def _facts(facts: tuple[Fact, ...]) -> list[dict[str, str]]:
    return [{"direction": f.direction, "label": f.label, "other": f.other} for f in facts]


def _merge_candidate(c: MergeCandidate) -> dict[str, Any]:
    out: dict[str, Any] = {"a": c.a, "b": c.b, "tier": c.tier, "name_score": c.name_score}
    if c.types_a:
        out["types_a"] = list(c.types_a)
    if c.types_b:
        out["types_b"] = list(c.types_b)
    return out | {
        "overlap": c.overlap,
        "shared_total": c.shared_total,
        "only_a_total": c.only_a_total,
        "only_b_total": c.only_b_total,
        "shared": _facts(c.shared),
        "only_a": _facts(c.only_a),
        "only_b": _facts(c.only_b),
        "fingerprint": c.fingerprint,
    }


def contradiction_out(section: ContradictionSection) -> dict[str, Any]:
    """The contradiction section: total, and its candidates of kind objects or contested."""
    return {"total": section.total, "candidates": [_contradiction_candidate(c) for c in section.candidates]}


def _contradiction_candidate(c: ObjectsCandidate | ContestedCandidate) -> dict[str, Any]:
    if isinstance(c, ContestedCandidate):
        return {
            "kind": "contested",
            "subject": c.subject,
            "label": c.label,
            "object": c.object,
            "weight": c.weight,
            "count": c.count,
            "supporting_sources": list(c.supporting_sources),
            "disputing_sources": list(c.disputing_sources),
            "fingerprint": c.fingerprint,
        }
    rows = []
    for r in c.objects:
        row: dict[str, Any] = {"object": r.object, "weight": r.weight, "count": r.count, "sources": list(r.sources)}
        if r.latest is not None:
            row["latest"] = r.latest
        rows.append(row)
    return {
        "kind": "objects",
        "subject": c.subject,
        "label": c.label,
        "functional_tendency": c.functional_tendency,
        "objects": rows,
        "fingerprint": c.fingerprint,
    }


def staleness_out(section: StalenessSection) -> dict[str, Any]:
    """The staleness section: total, undatable, and the lagging edges."""
    shown = [
        {
            "subject": c.subject,
            "label": c.label,
            "object": c.object,
            "latest": c.latest,
            "neighborhood_latest": c.neighborhood_latest,
            "gap": c.gap,
            "sources": list(c.sources),
            "fingerprint": c.fingerprint,
        }
        for c in section.candidates
    ]
    return {"total": section.total, "undatable": section.undatable, "candidates": shown}
