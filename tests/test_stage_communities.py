"""The communities stage: artifact search, degrade reasons and the scope check."""

from __future__ import annotations

import json

import pytest
from stage_support import make_context, memory_registry, plain, request, run_stage, services

from taguru_server.stages.communities import Communities
from taguru_server.stages.lanes import COMMUNITY_HITS
from taguru_server.stages.model import CONTEXT, REQUEST, SERVICES
from taguru_server.store.errors import ApiError


def _artifact(registry):
    source = make_context("c", associations=[("a1", "近い", "a2", 2.0, None, None)], registry=registry)
    manifest = {
        "algorithm": "louvain-cc/1",
        "source_context": "c",
        "taguru_communities": 1,
        "levels": 1,
        "revision": {"graph": 1, "passages": 0, "config": 0},
        "communities": [{"id": "L0-0", "level": 0, "fingerprint": "00aa00aa00aa00aa", "concept_count": 2}],
    }
    make_context(
        "c::communities",
        registry=registry,
        passages={"communities:manifest": json.dumps(manifest), "community:L0-0": "酒造りの歴史のまとめ。"},
        associations=[("community:L0-0", "contains", "a1", 6.0, None, None)],
    )
    return source


@pytest.mark.anyio
async def test_community_candidates(snapshot) -> None:
    registry = memory_registry()
    ctx = _artifact(registry)
    out = await run_stage(
        Communities(),
        {REQUEST: request(origins=("酒造り",), include_communities=True), CONTEXT: ctx, SERVICES: services(registry)},
    )
    hits = out.values[COMMUNITY_HITS].value
    assert [h.candidate_id for h in hits] == ["community\x00c\x00community:L0-0\x000"]
    assert plain(out) == snapshot


@pytest.mark.anyio
async def test_communities_disabled_and_missing(snapshot) -> None:
    registry = memory_registry()
    ctx = make_context("c", registry=registry)
    off = await run_stage(Communities(), {REQUEST: request(origins=()), CONTEXT: ctx, SERVICES: services(registry)})
    missing = await run_stage(
        Communities(),
        {REQUEST: request(origins=(), include_communities=True), CONTEXT: ctx, SERVICES: services(registry)},
    )
    assert off.status == "skipped" and missing.status == "degraded"
    assert plain([off, missing]) == snapshot


@pytest.mark.anyio
async def test_communities_scope_check() -> None:
    registry = memory_registry()
    ctx = make_context("c", registry=registry)
    with pytest.raises(ApiError) as err:
        await run_stage(
            Communities(),
            {
                REQUEST: request(origins=(), include_communities=True),
                CONTEXT: ctx,
                SERVICES: services(registry, may_access=lambda n: n == "c"),
            },
        )
    assert err.value.message == (
        "this key's scope does not extend to the artifact context 'c::communities' — grant it alongside 'c'"
    )
