"""The wire records of typed store results that the evidence package and the server's responses share.

The store returns typed results; their JSON shapes are drawn here, below the server (which may import
stages, never the other way), so an evidence item's payload and a route's response are one rendering:
an edge's AssociationOut, a passage hit, a citation, a community hit."""

from __future__ import annotations

from typing import Any

from taguru_server.store.derive.communities import CommunityHit
from taguru_server.store.model.context import Context
from taguru_server.store.read.citations import Citation
from taguru_server.store.read.passage_graph import GraphPassageHit
from taguru_server.store.read.passages import PassageHit
from taguru_server.store.read.vector_lane import FusedHit
from taguru_server.store.read.window import WindowView
from taguru_server.store.wire import F32


def attributions_out(ctx: Context, records: list[list[Any]]) -> list[dict[str, Any]]:
    """The wire attributions of an edge's records: source, raw weight, count, paragraph, and the
    paragraph's section and locator resolved from the stored passage."""
    attributions = []
    sources = ctx.sources
    for sid, rsum, rcount, paragraph in records:
        section = locator = None
        if paragraph is not None:
            passage = ctx.passages.get(sid)
            if passage is not None:
                section = passage.section_for(paragraph)
                locator = passage.locator_for(paragraph)
        attributions.append(
            {
                "source": sources[sid],
                "weight": float(rsum),
                "count": rcount,
                "paragraph": paragraph,
                "section": section,
                "locator": locator,
            }
        )
    return attributions


def association_out(ctx: Context, e: int) -> dict[str, Any]:
    """The AssociationOut wire shape of one edge."""
    return {
        "subject": ctx.concepts[ctx.edges.subject[e]],
        "label": ctx.labels[ctx.edges.label[e]],
        "object": ctx.concepts[ctx.edges.object[e]],
        "weight": float(ctx.weight(e)),
        "count": ctx.edges.count[e],
        "attributions": attributions_out(ctx, ctx.edges.attributions[e]),
    }


def windowed_association_out(ctx: Context, e: int, view: WindowView) -> dict[str, Any]:
    """The AssociationOut wire shape of one edge inside a window: its eligible attributions only, the
    windowed count and their mean weight."""
    return {
        "subject": ctx.concepts[ctx.edges.subject[e]],
        "label": ctx.labels[ctx.edges.label[e]],
        "object": ctx.concepts[ctx.edges.object[e]],
        "weight": float(view.weight(e)),
        "count": view.totals(e)[0],
        "attributions": attributions_out(ctx, view.records(e)),
    }


def passage_hit_out(hit: PassageHit | FusedHit) -> dict[str, Any]:
    """The wire record of a passage hit: BM25's alone, or fused with each lane's own rank and raw score."""
    score = hit.score if isinstance(hit, PassageHit) else F32(hit.score)
    return _hit_out(hit, score, hit_lanes(hit))


def graph_passage_hit_out(hit: GraphPassageHit) -> dict[str, Any]:
    """The wire record of a graph-ranked paragraph: the PassageHit shape, its one lane `graph` (rank, f32 mass)."""
    score = F32(hit.score)
    return _hit_out(hit, score, {"graph": {"rank": hit.rank, "score": score}})


def _hit_out(hit: PassageHit | FusedHit | GraphPassageHit, score: float, lanes: dict[str, Any]) -> dict[str, Any]:
    """A paragraph hit's wire record, in wire order: which paragraph, its score and text, the lanes that found it."""
    return {"source": hit.source, "paragraph": hit.paragraph, "score": score, "text": hit.text, "lanes": lanes}


def _fused_lanes(hit: FusedHit) -> dict[str, Any]:
    lanes: dict[str, Any] = {}
    if hit.bm25 is not None:
        lanes["bm25"] = {"rank": hit.bm25[0], "score": F32(hit.bm25[1])}
    if hit.vector is not None:
        lanes["vector"] = {"rank": hit.vector[0], "score": F32(hit.vector[1])}
    return lanes


def hit_lanes(hit: PassageHit | FusedHit) -> dict[str, Any]:
    """The `lanes` of a passage hit's wire record: which lanes found it, each with its rank and raw score."""
    if isinstance(hit, PassageHit):
        return {"bm25": {"rank": hit.rank, "score": hit.score}}
    return _fused_lanes(hit)


def citation_out(citation: Citation) -> dict[str, Any]:
    """The wire record of a citation: text, source, section and locator (kind and value)."""
    loc = citation.locator
    return {
        "text": citation.text,
        "source": citation.source,
        "section": citation.section,
        "locator": None if loc is None else {"kind": loc.kind, "value": loc.value},
    }


def community_hit_out(found: CommunityHit) -> dict[str, Any]:
    """The wire record of a community hit: the search hit's score (BM25's raw f32, or the fused score when
    the vector lane ran), the manifest's facts, and its members when it has any."""
    hit = found.hit
    score = hit.score if isinstance(hit, PassageHit) else F32(hit.score)
    out: dict[str, Any] = {"community": found.community, "score": score, "text": hit.text, "paragraph": hit.paragraph}
    out.update(found.facts)
    if found.members:
        out["members"] = [{"name": n, "strength": w} for n, w in found.members]
    if found.members_truncated:
        out["members_truncated"] = True
    return out
