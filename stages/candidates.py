"""Turning lane results into candidates (§5)."""

from __future__ import annotations

from taguru_server.stages.model import Candidate
from taguru_server.store import lanes
from taguru_server.store.communities import CommunityHit
from taguru_server.store.context import Context
from taguru_server.store.lanes import Attribution, PassageHit
from taguru_server.store.vector_lane import FusedHit


def primary_source(attributions: tuple[Attribution, ...]) -> str | None:
    """Greatest |weight|; ties: smallest source, then with-paragraph, then smallest paragraph."""
    if not attributions:
        return None
    best = min(attributions, key=lambda a: (-abs(a.weight), a.source, a.paragraph is None, a.paragraph or 0))
    return best.source


def association_candidate(ctx: Context, edge: int, lane: str, rank: int) -> Candidate:
    """A candidate for one edge (its identity is the exact triple; its payload the AssociationOut)."""
    facts = lanes.association_facts(ctx, edge)
    attributions = facts.attributions
    locators = tuple(sorted({(a.source, a.paragraph) for a in attributions if a.paragraph is not None}))
    return Candidate(
        kind="association",
        canonical_key=f"{facts.subject}\u0000{facts.label}\u0000{facts.object}",
        lane=lane,
        rank=rank,
        payload=ctx.association_out(edge),
        source=primary_source(attributions),
        locators=locators,
        corroborating=tuple(sorted({a.source for a in attributions})),
        relation=(facts.subject, facts.label),
        text=f"{facts.subject} {facts.label} {facts.object}",
    )


def passage_candidate(context_name: str, hit: PassageHit | FusedHit, rank: int) -> Candidate:
    """A candidate for a passage hit at its 1-based position in the search result; the lane says which
    evidence it carries (both lanes, the vector lane only, or BM25)."""
    if isinstance(hit, FusedHit) and hit.vector is not None:
        lane = "passage_fused" if hit.bm25 is not None else "passage_vector"
    else:
        lane = "passage_bm25"
    return Candidate(
        kind="passage",
        canonical_key=f"{context_name}\u0000{hit.source}\u0000{hit.paragraph}",
        lane=lane,
        rank=rank,
        payload=hit.to_wire(),
        source=hit.source,
        text=hit.text,
    )


def community_candidate(context_name: str, hit: CommunityHit, rank: int) -> Candidate:
    source = f"community:{hit.community}"
    return Candidate(
        kind="community",
        canonical_key=f"{context_name}\u0000{source}\u0000{hit.paragraph}",
        lane="community",
        rank=rank,
        payload=hit.record,
        source=source,
        text=hit.text,
    )
