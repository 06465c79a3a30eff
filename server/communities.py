"""POST /contexts/{name}/communities/search: the artifact's community summaries (§10.5)."""

from __future__ import annotations

from typing import Any

from server.body import check_name
from server.handlers import Call
from store.communities import NoArtifact, artifact_name, community_hits, load_manifest, recorded_graph_revision
from store.errors import ApiError, no_context


async def search_communities(call: Call) -> Any:
    typed = call.typed("CommunitySearchRequest")
    query = typed.string("query", required=True)
    assert query is not None
    requested = typed.uint("limit", name="usize")
    limit = min(5 if requested is None else requested, 1000)
    typed.number("semantic_floor", "f32")
    assert call.name is not None
    name = call.name
    derived = typed.string("derived") or artifact_name(name)
    check_name(derived, "derived")
    if not call.principal.may_access(derived):
        raise ApiError(
            "forbidden",
            f"this key's scope does not extend to the artifact context '{derived}' — grant it alongside '{name}'",
        )
    ctx = call.registry.get(name)
    if ctx is None:
        raise no_context(name)
    try:
        derived_ctx, manifest = load_manifest(call.registry, name, derived)
    except NoArtifact as exc:
        raise ApiError("no_context", str(exc)) from None
    recorded = recorded_graph_revision(manifest)
    lane_plan, hits = community_hits(derived_ctx, manifest, query, limit)
    ctx.meta.reads += 1
    return {
        "derived": derived,
        "algorithm": manifest.get("algorithm"),
        "stale": recorded != ctx.meta.rev_graph,
        "revision": {"recorded_graph": recorded, "current_graph": ctx.meta.rev_graph},
        "plan": {"contexts": [{"context": name, "lanes": lane_plan}]},
        "hits": hits,
    }
