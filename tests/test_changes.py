"""GET /contexts/{name}/changes: the reference fixtures, every event kind, cursors, limits and staleness."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import Client, exact, load_fixture, normalize, start_client
from reference_setups import _basic

from taguru_server.server.state import REGISTRY_KEY

CURSOR = re.compile(r"cf1-[0-9a-f]{16}-(\d+)")


async def _changes(client: Client, name: str, query: str = "") -> tuple[int, dict]:
    status, body, _h = await client.call("GET", f"/contexts/{name}/changes{query}", content_type=None)
    return status, body


async def _setup(client: Client, name: str) -> None:
    for method, path, body in _basic(name):
        await client.ok(method, path, body)


@pytest.mark.anyio
async def test_the_reference_fixtures_replay(client: Client) -> None:
    await _setup(client, "corpus-cf")
    status, tail = await _changes(client, "corpus-cf")
    assert status == 200 and tail["result"]["events"] == [] and tail["result"]["more"] is False
    cursor = tail["result"]["next"]
    m = CURSOR.fullmatch(cursor)
    assert m is not None and m.group(1) == "2" and not cursor.startswith("cf1-0000000000000000")
    edge = [{"label": "connects_to", "object": "gamma", "subject": "beta", "weight": 1.0}]
    await client.ok("POST", "/contexts/corpus-cf/associations", edge)
    status, body = await _changes(client, "corpus-cf", f"?since={cursor}")
    fixture = load_fixture("http", "changes")
    assert status == fixture["status"]
    assert body["result"]["next"] == cursor[: -len("-2")] + "-3"
    assert exact(normalize(body)) == exact(normalize(fixture["response"]))
    status, body = await _changes(client, "corpus-cf", "?since=cf1-0000000000000000-999")
    fixture = load_fixture("http", "changes_stale_cursor")
    assert status == fixture["status"] == 410
    assert exact(normalize(body)) == exact(normalize(fixture["response"]))


@pytest.mark.anyio
async def test_every_kind_in_write_order(client: Client) -> None:
    await client.ok("PUT", "/contexts/k", {"description": "d"})
    tail = (await _changes(client, "k"))[1]["result"]["next"]
    edges = [
        {"subject": "a", "label": "rel", "object": "b", "weight": 1.0},
        {"subject": "b", "label": "rel", "object": "c", "weight": 1.0},
    ]
    await client.ok("POST", "/contexts/k/associations", edges)
    await client.ok("POST", "/contexts/k/aliases", {"concepts": {"A": "a"}})
    await client.ok("DELETE", "/contexts/k/aliases", {"concepts": ["A"]})
    await client.ok("POST", "/contexts/k/sources", {"passages": {"doc.md": "alpha.\n\nbeta."}})
    await client.ok("POST", "/contexts/k/associations/retract", {"subject": "a", "label": "rel", "object": "b"})
    await client.ok("POST", "/contexts/k/sources/retract", {"source": "doc.md"})
    await client.ok("POST", "/contexts/k/sources/retract", {"source": "never.md"})  # unknown: nothing
    await client.ok("POST", "/contexts/k/sources/retract?dry_run=true", {"source": "doc.md"})  # dry run: nothing
    status, body = await _changes(client, "k", f"?since={tail}")
    assert status == 200
    assert body["result"]["events"] == [
        {"seq": 1, "kind": "associations_added", "count": 2},
        {"seq": 2, "kind": "aliases_added", "count": 1},
        {"seq": 3, "kind": "aliases_removed", "count": 1},
        {"seq": 4, "kind": "source_stored", "source": "doc.md"},
        {"seq": 5, "kind": "association_retracted", "subject": "a", "label": "rel", "object": "b"},
        {"seq": 6, "kind": "source_retracted", "source": "doc.md"},
    ]
    assert body["result"]["more"] is False and body["result"]["next"].endswith("-6")


@pytest.mark.anyio
async def test_an_import_batch_emits_retract_store_associations_aliases(client: Client) -> None:
    stream = "\n".join(
        [
            '{"taguru_batch": 1, "context": "imp", "source": "s.md", "create": {"description": "d"}}',
            '{"passage": "one.\\n\\ntwo."}',
            '{"subject": "x", "label": "rel", "object": "y", "weight": 1.0, "paragraph": 0}',
            '{"alias": "X", "canonical": "x", "kind": "concept"}',
        ]
    )
    await client.ok("POST", "/import", raw=stream, content_type="application/x-ndjson")
    await client.ok("POST", "/import", raw=stream, content_type="application/x-ndjson")  # a re-import
    epoch = (await _changes(client, "imp"))[1]["result"]["next"].split("-")[1]
    _status, body = await _changes(client, "imp", f"?since=cf1-{epoch}-0")
    kinds = [(e["kind"], e.get("source"), e.get("count")) for e in body["result"]["events"]]
    assert kinds == [
        ("source_stored", "s.md", None),
        ("associations_added", None, 1),
        ("aliases_added", None, 1),
        ("source_retracted", "s.md", None),
        ("source_stored", "s.md", None),
        ("associations_added", None, 1),
        ("aliases_added", None, 1),
    ]


@pytest.mark.anyio
async def test_limits_more_and_staleness(client: Client) -> None:
    await client.ok("PUT", "/contexts/k", {"description": "d"})
    start = (await _changes(client, "k"))[1]["result"]["next"]
    for i in range(5):
        await client.ok(
            "POST", "/contexts/k/associations", [{"subject": f"s{i}", "label": "r", "object": "o", "weight": 1}]
        )
    status, body = await _changes(client, "k", f"?since={start}&limit=0")  # 0 is raised to 1
    assert status == 200 and [e["seq"] for e in body["result"]["events"]] == [1] and body["result"]["more"] is True
    status, body = await _changes(client, "k", f"?since={body['result']['next']}&limit=3")
    assert [e["seq"] for e in body["result"]["events"]] == [2, 3, 4] and body["result"]["more"] is True
    epoch = start.split("-")[1]
    for bad in (f"cf1-{epoch}-6", "", "cf1-xyz-1", "nonsense", f"cf2-{epoch}-1", f"cf1-{epoch}-99999999999999999999"):
        status, body = await _changes(client, "k", f"?since={bad}")
        assert (status, body["code"]) == (410, "stale_cursor"), bad
    status, body = await _changes(client, "k", "?limit=x")
    assert (status, body["code"]) == (400, "malformed_request")
    status, body = await _changes(client, "nope")
    assert (status, body["code"]) == (404, "no_context")
    # delete and recreate: a new epoch, so the old cursor is stale
    await client.ok("DELETE", "/contexts/k")
    await client.ok("PUT", "/contexts/k", {"description": "d"})
    status, body = await _changes(client, "k", f"?since={start}")
    assert (status, body["code"]) == (410, "stale_cursor")
    assert (await _changes(client, "k"))[1]["result"]["next"].split("-")[1] != epoch


@pytest.mark.anyio
async def test_the_feed_keeps_1024_events_and_survives_a_restart(settings_factory, tmp_path: Path) -> None:
    settings = settings_factory()
    server, client, session = await start_client(settings)
    try:
        await client.ok("PUT", "/contexts/k", {"description": "d"})
        start = (await _changes(client, "k"))[1]["result"]["next"]
        for i in range(1030):
            ctx = server.app[REGISTRY_KEY].get("k")
            ctx.intern_concept(f"c{i}")
            ctx.emit("associations_added", count=1)
            server.app[REGISTRY_KEY].commit([ctx])
        status, body = await _changes(client, "k", f"?since={start}")  # events 1..6 were dropped
        assert (status, body["code"]) == (410, "stale_cursor")
        status, body = await _changes(client, "k", f"?since={start[:-1]}6&limit=2")
        assert [e["seq"] for e in body["result"]["events"]] == [7, 8]
        last = (await _changes(client, "k"))[1]["result"]["next"]
        assert last.endswith("-1030")
    finally:
        await session.close()
        await server.close()
    server, client, session = await start_client(settings)  # same data dir: the history is durable
    try:
        status, body = await _changes(client, "k", f"?since={last[:-4]}1029")
        assert status == 200 and [e["seq"] for e in body["result"]["events"]] == [1030]
    finally:
        await session.close()
        await server.close()
