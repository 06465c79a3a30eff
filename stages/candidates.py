"""Turning lane results into candidates (docs/stages.md, "Lanes")."""

from __future__ import annotations

from typing import Any

from taguru_server.stages.model import Candidate
from taguru_server.stages.render import association_out, community_hit_out, graph_passage_hit_out, passage_hit_out
from taguru_server.store.derive.communities import CommunityHit
from taguru_server.store.model.context import Context
from taguru_server.store.read import cache as cache_lane
from taguru_server.store.read import query
from taguru_server.store.read.passage_graph import GraphPassageHit
from taguru_server.store.read.passages import PassageHit
from taguru_server.store.read.query import Attribution
from taguru_server.store.read.vector_lane import FusedHit
from taguru_server.store.wire import EncodedDict, encoded


def primary_source(attributions: tuple[Attribution, ...]) -> str | None:
    """Greatest |weight|; ties: smallest source, then with-paragraph, then smallest paragraph."""
    if not attributions:
        return None
    best = min(attributions, key=lambda a: (-abs(a.weight), a.source, a.paragraph is None, a.paragraph or 0))
    return best.source


EDGE_CACHE_ENTRIES = 20_000  # edges whose candidate facts are kept per read version


def association_candidate(ctx: Context, edge: int, lane: str, rank: int) -> Candidate:
    """A candidate for one edge (its identity is the exact triple; its payload the AssociationOut).

    Everything but the lane and rank depends on the edge alone, so it is built once per read
    version (`cache_lane.read_version`) and shared: a hub edge carries thousands of attributions,
    and its payload is served with its JSON text already encoded."""
    cache = cache_lane.versioned_cache(ctx, "association_candidates", EDGE_CACHE_ENTRIES)
    fields = cache.get(edge)
    if fields is None:
        fields = cache[edge] = _association_fields(ctx, edge)
    return Candidate("association", fields[0], lane, rank, *fields[1:])


def _kept_payload(payload: dict[str, Any]) -> EncodedDict:
    """The payload with its JSON; its attributions as a tuple (the same JSON array) of dicts of
    plain values, which the cyclic collector stops tracking, so a kept hub edge with thousands of
    attributions does not lengthen every full collection."""
    out = encoded(payload)
    out["attributions"] = tuple(payload["attributions"])
    return out


def _association_fields(ctx: Context, edge: int) -> tuple[Any, ...]:
    facts = query.association_facts(ctx, edge)
    attributions = facts.attributions
    locators = tuple(sorted({(a.source, a.paragraph) for a in attributions if a.paragraph is not None}))
    return (
        f"{facts.subject}\u0000{facts.label}\u0000{facts.object}",
        _kept_payload(association_out(ctx, edge)),
        primary_source(attributions),
        locators,
        tuple(sorted({a.source for a in attributions})),
        (facts.subject, facts.label),
        f"{facts.subject} {facts.label} {facts.object}",
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
        payload=passage_hit_out(hit),
        source=hit.source,
        text=hit.text,
    )


def graph_passage_candidate(context_name: str, hit: GraphPassageHit) -> Candidate:
    """A candidate for a graph-ranked paragraph (lane `passage_graph`): the same identity as the paragraph's
    search hit, so a paragraph both lanes find merges in dedup."""
    return Candidate(
        kind="passage",
        canonical_key=f"{context_name}\u0000{hit.source}\u0000{hit.paragraph}",
        lane="passage_graph",
        rank=hit.rank,
        payload=graph_passage_hit_out(hit),
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
        payload=community_hit_out(hit),
        source=source,
        text=hit.text,
    )
