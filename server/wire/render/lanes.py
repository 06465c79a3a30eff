"""The wire results of the single-context read lanes, rendered from the store's typed results.

resolve (its candidates with their glosses, and the ladder with the semantic tier), describe, the query
and recall pages and activate (each also inside a time window), passage search (BM25 and the vector
lane's plan entries) and citations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec

from taguru_server.stages.render import association_out, citation_out, passage_hit_out, windowed_association_out
from taguru_server.store.model.context import CONCEPT, Context
from taguru_server.store.read.activation import activation, windowed_activation
from taguru_server.store.read.citations import find_citation
from taguru_server.store.read.gloss import concept_gloss, concept_types, description, label_gloss
from taguru_server.store.read.passages import NO_EMBEDDINGS, PassageHit, PassageSearch, searched
from taguru_server.store.read.query import page_edges
from taguru_server.store.read.resolve import GLOSSED_CANDIDATES, ResolveMatch, resolve_matches
from taguru_server.store.read.semantic import ladder
from taguru_server.store.read.spread import Activation
from taguru_server.store.read.vector_lane import FusedHit, LaneState
from taguru_server.store.read.window import WindowView, windowed_page
from taguru_server.store.wire import F32

P = ParamSpec("P")


def resolve(ctx: Context, kind: int, cue: str, dice_floor: float, limit: int) -> list[dict[str, Any]]:
    """The resolve lane's wire candidates: `resolve_matches`, the first few with a gloss."""
    out = []
    for i, m in enumerate(resolve_matches(ctx, kind, cue, dice_floor, limit)):
        item: dict[str, Any] = {"name": m.name, "score": m.score, "tier": "lexical", "kind": m.kind}
        if i < GLOSSED_CANDIDATES:
            item["gloss"] = concept_gloss(ctx, m.record) if kind == CONCEPT else label_gloss(ctx, m.record)
            _add_types(ctx, kind, item, m.record)
        out.append(item)
    return out


def ladder_out(
    ctx: Context, kind: int, found: list[ResolveMatch], semantic: list[tuple[str, float]], limit: int
) -> list[dict[str, Any]]:
    """The resolve ladder's wire candidates (`semantic.ladder`'s cut): lexical, then semantic; the first few
    with a gloss."""
    lex, sem = ladder(found, semantic, limit)
    gloss = concept_gloss if kind == CONCEPT else label_gloss
    ids = ctx.concept_id if kind == CONCEPT else ctx.label_id
    out: list[dict[str, Any]] = []
    for m in lex:
        out.append({"name": m.name, "score": m.score, "tier": "lexical", "kind": m.kind, "_record": m.record})
    for name, score in sem:
        out.append({"name": name, "score": score, "tier": "semantic", "_record": ids.get(name)})
    for i, item in enumerate(out):
        record = item.pop("_record")
        if i < GLOSSED_CANDIDATES and record is not None:
            item["gloss"] = gloss(ctx, record)
            _add_types(ctx, kind, item, record)
    return out


def _add_types(ctx: Context, kind: int, item: dict[str, Any], record: int) -> None:
    """A glossed concept candidate's `types` (a schema installed, the concept typed); never on a label."""
    if kind == CONCEPT:
        types = concept_types(ctx, record)
        if types:
            item["types"] = list(types)


def describe(ctx: Context, concept: str) -> dict[str, Any] | None:
    """The describe result: the concept and its label tallies as subject and as object, or None."""
    found = description(ctx, concept)
    if found is None:
        return None
    out: dict[str, Any] = {
        "concept": found.concept,
        "as_subject": [{"label": t.label, "count": t.count} for t in found.as_subject],
        "as_object": [{"label": t.label, "count": t.count} for t in found.as_object],
    }
    if found.types:
        out["types"] = list(found.types)
    return out


def page_matches(ctx: Context, edges: list[int], limit: int, after: dict[str, Any] | None) -> dict[str, Any]:
    """The query (or recall) page of the matching edges: their total, the page's associations, the plan."""
    return {
        "total": len(edges),
        "matches": [association_out(ctx, e) for e in page_edges(ctx, edges, limit, after)],
        "plan": {"contexts": [ctx.name]},
    }


def windowed_page_matches(
    ctx: Context, view: WindowView, edges: list[int], limit: int, after: dict[str, Any] | None
) -> dict[str, Any]:
    """The query (or recall) page of the edges alive in a window, ranked and rendered on their windowed view."""
    return {
        "total": len(edges),
        "matches": [windowed_association_out(ctx, e, view) for e in windowed_page(view, edges, limit, after)],
        "plan": {"contexts": [ctx.name]},
    }


def activate(ctx: Context, origins: list[str], decay: float, limit: int) -> dict[str, Any]:
    """The activate lane's wire result (`activation`, rendered)."""
    return render_activation(ctx, activation(ctx, origins, decay, limit))


def render_activation(ctx: Context, found: Activation) -> dict[str, Any]:
    """An Activation as the wire's {total, matches: [{strength, path, association}]}."""
    concepts = ctx.concepts
    return {
        "total": found.total,
        "matches": [
            {"strength": m.strength, "path": [concepts[c] for c in m.path], "association": association_out(ctx, m.edge)}
            for m in found.matches
        ],
    }


def windowed_activate(ctx: Context, view: WindowView, origins: list[str], decay: float, limit: int) -> dict[str, Any]:
    """The activate lane's wire result inside a window (`windowed_activation`, rendered on the windowed view)."""
    found = windowed_activation(ctx, view, origins, decay, limit)
    concepts = ctx.concepts
    return {
        "total": found.total,
        "matches": [
            {
                "strength": m.strength,
                "path": [concepts[c] for c in m.path],
                "association": windowed_association_out(ctx, m.edge, view),
            }
            for m in found.matches
        ],
    }


def search_lanes(found: PassageSearch, state: LaneState | None = None) -> dict[str, Any]:
    """The wire `lanes` block of a passage search: BM25 ran or why not; the vector lane's state."""
    if found.skipped is not None:
        reason = found.skipped.text
        return {"bm25": {"ran": False, "reason": reason}, "vector": {"ran": False, "reason": reason}}
    vector = vector_lane(state) if state is not None else {"ran": False, "reason": NO_EMBEDDINGS}
    return {"bm25": {"ran": True}, "vector": vector}


def vector_lane(state: LaneState) -> dict[str, Any]:
    """The vector lane's plan entry: ran with its f32 floor, or why not."""
    if state.ran:
        assert state.floor is not None
        return {"ran": True, "floor": F32(state.floor)}
    return {"ran": False, "reason": state.reason}


def render_search(
    ctx: Context, found: PassageSearch, state: LaneState | None, hits: list[PassageHit | FusedHit]
) -> dict[str, Any]:
    """The search wire result of `searched`'s lanes: the plan (lanes, filter counts) and the hits."""
    entry: dict[str, Any] = {"context": ctx.name, "lanes": search_lanes(found, state)}
    if found.eligible_sources is not None:
        entry["filter"] = {"eligible_sources": found.eligible_sources, "total_sources": found.total_sources}
    return {"plan": {"contexts": [entry]}, "hits": [passage_hit_out(hit) for hit in hits]}


def rendered(
    lanes: Callable[Concatenate[Context, P], tuple[PassageSearch, LaneState | None, list[PassageHit | FusedHit]]],
) -> Callable[Concatenate[Context, P], dict[str, Any]]:
    """The passage lanes `lanes` runs, answering their wire result (`render_search`); same parameters."""

    def search(ctx: Context, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        return render_search(ctx, *lanes(ctx, *args, **kwargs))

    return search


# The search wire result: BM25, and the vector lane fused in by rank when it runs (`store/read/vector_lane.py`).
search_passages = rendered(searched)


def citation(ctx: Context, source: str, paragraph: int) -> dict[str, Any] | str:
    """The citation's wire shape, or 'no_source' / 'no_paragraph'."""
    found = find_citation(ctx, source, paragraph)
    return found if isinstance(found, str) else citation_out(found)
