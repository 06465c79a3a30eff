"""The communities stage: search the derived `{name}::communities` artifact (opt-in)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.candidates import community_candidate
from taguru_server.stages.lanes import COMMUNITY_HITS
from taguru_server.stages.model import CONTEXT, REQUEST, SERVICES, LaneResult, gate
from taguru_server.store.derive.communities import NoArtifact, artifact_name, community_hits, load_manifest
from taguru_server.store.errors import ApiError, Code
from taguru_server.store.text import query_terms


@attrs.frozen
class Communities:
    """Community-summary evidence from the artifact, degrading when it does not exist."""

    name: ClassVar[str] = "communities"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, CONTEXT, SERVICES)
    provides: ClassVar[tuple[Key[Any], ...]] = (COMMUNITY_HITS,)

    async def run(self, ctx: StageContext) -> Outcome:
        request = ctx[REQUEST]
        if not request.include_communities:
            return Outcome.skipped(
                "communities_disabled", {COMMUNITY_HITS: LaneResult((), False, "include_communities was false")}
            )
        name = ctx[CONTEXT].name
        derived = artifact_name(name)
        services = ctx[SERVICES]
        if not services.may_access(derived):
            raise ApiError(
                Code.FORBIDDEN,
                f"this key's scope does not extend to the artifact context '{derived}' — grant it alongside '{name}'",
            )
        gate(ctx.remaining())
        try:
            derived_ctx, manifest = load_manifest(services.registry, name, derived)
        except NoArtifact as exc:
            return Outcome.degraded("no_communities_artifact", {COMMUNITY_HITS: LaneResult((), False, str(exc))})
        vq = None
        embed = services.vector_query
        if embed is not None and request.search_limit + 1 > 0 and query_terms(request.query):
            vq = await embed(derived_ctx, request.query, request.semantic_floor)  # the artifact's own floor
        _found, _state, hits = community_hits(derived_ctx, manifest, request.query, request.search_limit, vq)
        candidates = tuple(community_candidate(name, hit, i + 1) for i, hit in enumerate(hits))
        return Outcome.ran({COMMUNITY_HITS: LaneResult(candidates, True)}, detail={"out": len(candidates)})
