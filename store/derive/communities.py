"""Reading the derived communities artifact: manifest checks and community search (docs/communities.md)."""

from __future__ import annotations

import json
from typing import Any

import attrs

from taguru_server.store.errors import ApiError, Code
from taguru_server.store.model.context import Context
from taguru_server.store.persist.registry import Registry
from taguru_server.store.read import passages
from taguru_server.store.read import query as query_lane
from taguru_server.store.read.passages import PassageHit
from taguru_server.store.read.vector_lane import FusedHit, LaneState, VectorQuery

MANIFEST_SOURCE = "communities:manifest"
COMMUNITY_PREFIX = "community:"
MAX_MEMBERS = 12


class NoArtifact(Exception):
    """The artifact context or its manifest is missing; the message is the wire reason."""


def artifact_name(name: str) -> str:
    return f"{name}::communities"


def load_manifest(registry: Registry, name: str, derived: str) -> tuple[Context, dict[str, Any]]:
    """The artifact context and its parsed manifest, or NoArtifact / a 409 conflict."""
    ctx = registry.get(derived)
    if ctx is None:
        raise NoArtifact(
            f"no communities artifact for '{name}': context '{derived}' does not exist — run `taguru communities` "
            "to build it"
        )
    sid = ctx.find_source(MANIFEST_SOURCE)
    passage = ctx.passages.get(sid) if sid is not None else None
    if passage is None:
        raise NoArtifact(
            f"context '{derived}' holds no 'communities:manifest' record — run `taguru communities` to (re)build "
            "the artifact"
        )
    try:
        manifest = json.loads(passage.text)
        if not isinstance(manifest, dict):
            raise ValueError("the manifest is not a JSON object")
    except ValueError as exc:
        raise ApiError(
            Code.CONFLICT,
            f"the 'communities:manifest' record in '{derived}' does not parse ({exc}) — rebuild the artifact with "
            "`taguru communities`",
        ) from None
    source = manifest.get("source_context")
    if source != name:
        raise ApiError(Code.CONFLICT, f"artifact '{derived}' was derived from '{source}', not '{name}'")
    return ctx, manifest


def recorded_graph_revision(manifest: dict[str, Any]) -> int:
    rev = manifest.get("revision")
    if isinstance(rev, dict) and type(rev.get("graph")) is int:
        return int(rev["graph"])
    return 0


@attrs.frozen
class CommunityHit:
    """A community summary paragraph found by search: the search hit, the manifest's facts, its members."""

    community: str
    hit: PassageHit | FusedHit  # BM25's hit, or the fused hit when the vector lane ran
    facts: tuple[tuple[str, Any], ...]  # the manifest's level, parent and concept_count that are set, in that order
    members: tuple[tuple[str, float], ...]  # (concept, strength) by |strength| desc, name asc; at most MAX_MEMBERS
    members_truncated: bool

    @property
    def paragraph(self) -> int:
        return self.hit.paragraph

    @property
    def text(self) -> str:
        return self.hit.text


def community_hits(
    derived_ctx: Context, manifest: dict[str, Any], query: str, limit: int, vector: VectorQuery | None = None
) -> tuple[passages.PassageSearch, LaneState | None, tuple[CommunityHit, ...]]:
    """Search the artifact's passages (BM25, and its vector lane with its own vectors and floor when it runs);
    keep the community hits, with manifest facts and members. Also the vector lane's state, for the plan."""
    found, state, searched = passages.searched(derived_ctx, query, limit + 1, vector=vector)
    return found, state, _records(derived_ctx, manifest, searched, limit)


def _records(
    derived_ctx: Context, manifest: dict[str, Any], searched: list[PassageHit | FusedHit], limit: int
) -> tuple[CommunityHit, ...]:
    by_id: dict[str, dict[str, Any]] = {}
    for entry in manifest.get("communities") or []:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            by_id.setdefault(entry["id"], entry)
    hits: list[CommunityHit] = []
    for hit in searched:
        if not hit.source.startswith(COMMUNITY_PREFIX):
            continue
        if len(hits) >= limit:
            break
        cid = hit.source[len(COMMUNITY_PREFIX) :]
        facts = by_id.get(cid, {})
        kept = tuple((key, facts[key]) for key in ("level", "parent", "concept_count") if facts.get(key) is not None)
        members, truncated = _members(derived_ctx, hit.source)
        hits.append(CommunityHit(cid, hit, kept, members, truncated))
    return tuple(hits)


def _members(ctx: Context, subject: str) -> tuple[tuple[tuple[str, float], ...], bool]:
    edges = query_lane.query_edges(ctx, [subject], ["contains"], None)
    rows = sorted(((ctx.concepts[ctx.edges.object[e]], ctx.weight(e)) for e in edges), key=lambda r: (-abs(r[1]), r[0]))
    return tuple((n, float(w)) for n, w in rows[:MAX_MEMBERS]), len(rows) > MAX_MEMBERS
