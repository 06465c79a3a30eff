"""The communities_search fixture, on an artifact seeded by hand as the reference recorded it."""

from __future__ import annotations

import pytest
from conftest import Client, exact, load_fixture, normalize
from reference_setups import seed_communities_artifact


@pytest.mark.anyio
async def test_communities_search_fixture(client: Client) -> None:
    fixture = load_fixture("http", "communities_search")
    await seed_communities_artifact(client)
    status, parsed, _h = await client.call("POST", "/contexts/corpus-d/communities/search", fixture["request"])
    assert status == fixture["status"]
    assert exact(normalize(parsed)) == exact(normalize(fixture["response"]))


@pytest.mark.anyio
async def test_evidence_reads_the_seeded_artifact(client: Client) -> None:
    await seed_communities_artifact(client)
    body = await client.ok(
        "POST",
        "/contexts/corpus-d/evidence",
        {"origins": ["a1"], "include_communities": True, "text_fallback_query": "酒造りの歴史"},
    )
    result = body["result"]
    assert result["plan"]["lanes"]["communities"] == {"ran": True}
    community = [i for i in result["items"] if i["kind"] == "community"]
    assert len(community) == 1
    assert community[0]["candidate_id"] == "community\u0000corpus-d\u0000community:L0-0\u00000"
    assert community[0]["community"]["members"] == [{"name": "a1", "strength": 6.0}, {"name": "a2", "strength": 4.0}]
    assert community[0]["lane_ranks"] == [{"lane": "community", "rank": 1}]


@pytest.mark.anyio
async def test_stale_artifact_is_reported(client: Client) -> None:
    await seed_communities_artifact(client)
    await client.ok(
        "POST", "/contexts/corpus-d/associations", [{"label": "近い", "object": "a3", "subject": "a1", "weight": 1.0}]
    )
    body = await client.ok("POST", "/contexts/corpus-d/communities/search", {"query": "酒造り"})
    assert body["result"]["stale"] is True
    assert body["result"]["revision"] == {"recorded_graph": 1, "current_graph": 2}


@pytest.mark.anyio
async def test_missing_manifest_degrades_evidence_and_refuses_search(client: Client) -> None:
    await client.ok("PUT", "/contexts/c", content_type=None)
    await client.ok("PUT", "/contexts/c::communities", content_type=None)
    body = await client.ok("POST", "/contexts/c/evidence", {"origins": [], "include_communities": True})
    reason = (
        "context 'c::communities' holds no 'communities:manifest' record — run `taguru communities` "
        "to (re)build the artifact"
    )
    assert body["result"]["plan"]["lanes"]["communities"] == {"ran": False, "reason": reason}
    status, parsed, _h = await client.call("POST", "/contexts/c/communities/search", {"query": "x"})
    assert (status, parsed["code"], parsed["error"]) == (404, "no_context", reason)


@pytest.mark.anyio
async def test_foreign_manifest_is_a_conflict(client: Client) -> None:
    await client.ok("PUT", "/contexts/c", content_type=None)
    await client.ok("PUT", "/contexts/c::communities", content_type=None)
    await client.ok(
        "POST",
        "/contexts/c::communities/sources",
        {"passages": {"communities:manifest": '{"source_context":"other","algorithm":"louvain-cc/1"}'}},
    )
    status, parsed, _h = await client.call("POST", "/contexts/c/evidence", {"origins": [], "include_communities": True})
    assert (status, parsed["code"]) == (409, "conflict")
    assert parsed["error"] == "artifact 'c::communities' was derived from 'other', not 'c'"
    await client.ok("POST", "/contexts/c::communities/sources", {"passages": {"communities:manifest": "{not json"}})
    status, parsed, _h = await client.call("POST", "/contexts/c/communities/search", {"query": "x"})
    assert (status, parsed["code"]) == (409, "conflict")
    assert parsed["error"].startswith("the 'communities:manifest' record in 'c::communities' does not parse (")
