"""The communities routes: GET …/communities, the analysis stream, POST …/communities/search (docs/communities.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from taguru_server.server.call import Call, Route
from taguru_server.server.communities.analysis import analyze
from taguru_server.server.communities.louvain import DeadlineExceeded, GraphSnapshot
from taguru_server.server.decode import check_name
from taguru_server.server.reply import Raw
from taguru_server.server.retrieval_cache import cached_read
from taguru_server.server.routes.common import count_read, count_search, heavy_op, search_vector, served_hits
from taguru_server.server.routes.contexts import revision
from taguru_server.server.wire.render.lanes import search_lanes
from taguru_server.server.wire.specs import COMMUNITY_SEARCH
from taguru_server.stages.render import community_hit_out, hit_lanes
from taguru_server.store.derive.communities import (
    NoArtifact,
    artifact_name,
    community_hits,
    load_manifest,
    recorded_graph_revision,
)
from taguru_server.store.errors import ApiError, Code, budget_spent, no_context
from taguru_server.store.model.context import Context
from taguru_server.store.text import query_terms
from taguru_server.store.wire import dumps


async def search_communities(call: Call) -> Any:
    args = await call.decode(COMMUNITY_SEARCH)
    query = args["query"]
    requested = args["limit"]
    limit = min(5 if requested is None else requested, 1000)
    assert call.name is not None
    name = call.name
    derived = args["derived"] or artifact_name(name)
    check_name(derived, "derived")
    if not call.principal.may_access(derived):
        raise ApiError(
            Code.FORBIDDEN,
            f"this key's scope does not extend to the artifact context '{derived}' — grant it alongside '{name}'",
        )
    ctx = call.registry.get(name)
    if ctx is None:
        raise no_context(name)
    try:
        derived_ctx, manifest = load_manifest(call.registry, name, derived)
    except NoArtifact as exc:
        raise ApiError(Code.NO_CONTEXT, str(exc)) from None
    recorded = recorded_graph_revision(manifest)
    vector = None
    if query_terms(query):  # resolve's matching on the artifact, with its own vectors and floor (limit + 1 is never 0)
        vector = await search_vector(call, derived_ctx, query, args["semantic_floor"])
    found, state, hits = community_hits(derived_ctx, manifest, query, limit, vector)
    count_search(call, ctx, "search_communities", not hits)
    served_hits(call, [{"lanes": hit_lanes(hit.hit)} for hit in hits])
    return {
        "derived": derived,
        "algorithm": manifest.get("algorithm"),
        "stale": recorded != ctx.meta.rev_graph,
        "revision": {"recorded_graph": recorded, "current_graph": ctx.meta.rev_graph},
        "plan": {"contexts": [{"context": name, "lanes": search_lanes(found, state)}]},
        "hits": [community_hit_out(hit) for hit in hits],
    }


def community_targets(call: Call, body: dict[str, Any]) -> list[Context]:
    """The retrieval cache's view of a community search: the context and its artifact context (granted)."""
    assert call.name is not None
    derived = body.get("derived") or artifact_name(call.name)
    if not isinstance(derived, str) or not call.principal.may_access(derived):
        raise ValueError("no key: the artifact is not named or not granted")
    found = [call.registry.get(call.name), call.registry.get(derived)]
    if None in found:
        raise ValueError("no key: a target does not exist")
    return [ctx for ctx in found if ctx is not None]


NDJSON = "application/x-ndjson; charset=utf-8"


async def stream_communities(call: Call) -> Raw:
    """GET /contexts/{name}/communities: the `louvain-cc/1` analysis as NDJSON, header line first."""
    ctx = call.context()
    with heavy_op(call):
        rev = revision(ctx)  # read before the analysis
        snapshot = GraphSnapshot.of(ctx)
        try:
            analysis = await asyncio.to_thread(analyze, snapshot, call.deadline)
        except DeadlineExceeded:
            raise budget_spent() from None
    count_read(ctx, not analysis["communities"])
    header = {
        "taguru_communities": 1,
        "context": ctx.name,
        "algorithm": analysis["algorithm"],
        "revision": rev,
        "concept_count": analysis["concept_count"],
        "edge_count": analysis["edge_count"],
        "levels": analysis["levels"],
        "communities": len(analysis["communities"]),
    }
    lines = [dumps(header)] + [dumps(c) for c in analysis["communities"]]
    return Raw(200, ("\n".join(lines) + "\n").encode("utf-8"), NDJSON)


ROUTES: list[Route] = [
    cached_read(
        "/contexts/{name}/communities/search",
        "search_communities",
        search_communities,
        community_targets,
        COMMUNITY_SEARCH,
        "CommunitySearch",
    ),
    Route("GET", "/contexts/{name}/communities", stream_communities, "read", response="ndjson"),
]
