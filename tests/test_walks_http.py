"""POST …/explore, …/paths, …/unreachable_from over HTTP: the recorded reference exchanges, the
refusals in the contract's order, usage counters, the search metric, and the MCP tools."""

from __future__ import annotations

import json
import time
import types
from typing import Any

import pytest
from conftest import Client, exact, load_fixture, normalize
from reference_setups import SETUPS, _basic, recorded

from taguru_server.server.routes import common as common_routes
from taguru_server.server.routes import walks as walk_routes

# graph-reads.md Z and AA: explore and paths on group B's corpus, unreachable_from on group W's
WALK_SETUPS = {
    "explore": (_basic("corpus-b"), "corpus-b"),
    "paths": (_basic("corpus-b"), "corpus-b"),
    "unreachable_from": (SETUPS["labels"][0], "corpus-i"),
}
GATE = (
    "request exceeded its budget before this operation could start; narrow the query or raise "
    "TAGURU_REQUEST_TIMEOUT_SECS"
)
DURING = "request exceeded its budget; narrow the query (TAGURU_REQUEST_TIMEOUT_SECS tunes this)"


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(WALK_SETUPS))
async def test_reference_fixture(client: Client, name: str) -> None:
    fixture = load_fixture("http", name)
    steps, context = WALK_SETUPS[name]
    for method, path, body in steps:
        status, parsed, _h = await client.call(
            method, path, body, content_type=None if body is None else "application/json"
        )
        assert status == 200, (method, path, parsed)
    method, path, body = recorded("http", name, context)
    status, parsed, _h = await client.call(method, path, body)
    assert status == fixture["status"], parsed
    assert exact(normalize(parsed)) == exact(normalize(fixture["response"]))


async def _hub(client: Client) -> None:
    await client.ok("PUT", "/contexts/g", content_type=None)
    rows = [{"subject": "hub", "label": "l", "object": o, "weight": 1.0} for o in "dbac"]
    rows.append({"subject": "x", "label": "r", "object": "y", "weight": -3.0})
    await client.ok("POST", "/contexts/g/associations", rows)


@pytest.mark.anyio
async def test_explore_pages_and_closed_cursor(client: Client) -> None:
    await _hub(client)
    first = (await client.ok("POST", "/contexts/g/explore", {"origins": ["hub"], "limit": 2}))["result"]
    assert first["total"] == 4 and [m["association"]["object"] for m in first["matches"]] == ["a", "b"]
    after = {"distance": 1, "subject": "hub", "label": "l", "object": "b"}
    second = await client.ok("POST", "/contexts/g/explore", {"origins": ["hub"], "limit": 2, "after": after})
    assert [m["association"]["object"] for m in second["result"]["matches"]] == ["c", "d"]
    raw = '{"origins":["hub"],"after":{"bogus":true}}'
    status, body, _h = await client.call("POST", "/contexts/g/explore", raw=raw)
    assert (status, body["code"]) == (422, "malformed_request")
    assert body["error"] == (
        "Failed to deserialize the JSON body into the target type: after.bogus: unknown field `bogus`, "
        "expected one of `distance`, `subject`, `label`, `object` at line 1 column 40"
    )
    status, body, _h = await client.call("POST", "/contexts/g/explore", {"origins": ["hub"], "max_depth": -1})
    assert status == 422 and "max_depth: invalid value: integer `-1`, expected usize" in body["error"]
    status, body, _h = await client.call("POST", "/contexts/g/explore", {"max_depth": 1})
    assert status == 422 and "missing field `origins`" in body["error"]
    # limit 0: no matches, the total still counted; max_depth 0 reaches nothing
    assert (await client.ok("POST", "/contexts/g/explore", {"origins": ["hub"], "limit": 0}))["result"] == {
        "total": 4,
        "matches": [],
    }
    zero = await client.ok("POST", "/contexts/g/explore", {"origins": ["hub"], "max_depth": 0})
    assert zero["result"] == {"total": 0, "matches": []}


@pytest.mark.anyio
async def test_paths_and_unreachable_from(client: Client) -> None:
    await _hub(client)
    got = (await client.ok("POST", "/contexts/g/paths", {"origins": ["a"], "targets": ["d", "a"]}))["result"]
    assert got["total"] == 1 and got["capped"] is False
    assert got["matches"][0]["path"] == ["a", "hub", "d"] and got["matches"][0]["strength"] == 1.0
    assert [a["object"] for a in got["matches"][0]["associations"]] == ["a", "d"]
    none = await client.ok("POST", "/contexts/g/paths", {"origins": ["a"], "targets": ["d"], "limit": 0})
    assert none["result"] == {"total": 0, "capped": False, "matches": []}
    orphans = (await client.ok("POST", "/contexts/g/unreachable_from", {"origins": ["hub"]}))["result"]
    assert orphans["total"] == 1 and orphans["matches"][0]["subject"] == "x" and "plan" not in orphans
    every = (await client.ok("POST", "/contexts/g/unreachable_from", {"origins": [], "limit": 2}))["result"]
    assert every["total"] == 5 and [m["object"] for m in every["matches"]] == ["y", "a"]
    after = {"weight": 1.0, "subject": "hub", "label": "l", "object": "a"}
    rest = await client.ok("POST", "/contexts/g/unreachable_from", {"origins": [], "after": after})
    assert [m["object"] for m in rest["result"]["matches"]] == ["b", "c", "d"]
    status, body, _h = await client.call(
        "POST", "/contexts/g/unreachable_from", {"origins": [], "after": {**after, "distance": 1}}
    )
    assert status == 422 and "after.distance: unknown field `distance`, expected one of `weight`" in body["error"]


@pytest.mark.anyio
async def test_refusals_in_order(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    await _hub(client)
    many = [f"n{i}" for i in range(1001)]
    for route, extra in (("explore", {}), ("paths", {"targets": ["a"]}), ("unreachable_from", {})):
        status, body, _h = await client.call("POST", f"/contexts/nope/{route}", {"origins": many, **extra})
        assert (status, body["code"]) == (400, "over_limit")
        assert body["error"] == "origins carries 1001 items, past the per-request limit of 1000; split the request"
        status, body, _h = await client.call("POST", f"/contexts/nope/{route}", {"origins": ["a"], **extra})
        assert (status, body["code"], body["error"]) == (404, "no_context", "context 'nope' not found")
        status, body, _h = await client.call("POST", f"/contexts/nope/{route}", {"origins": 5, **extra})
        assert (status, body["code"]) == (422, "malformed_request")
    status, body, _h = await client.call("POST", "/contexts/nope/paths", {"origins": ["a"], "targets": many})
    assert body["error"] == "targets carries 1001 items, past the per-request limit of 1000; split the request"
    # the budget gate runs after the item caps and before the context lookup
    monkeypatch.setattr(common_routes, "time", types.SimpleNamespace(monotonic=lambda: time.monotonic() + 1e6))
    for route, extra in (("explore", {}), ("paths", {"targets": ["a"]}), ("unreachable_from", {})):
        status, body, _h = await client.call("POST", f"/contexts/nope/{route}", {"origins": ["a"], **extra})
        assert (status, body["code"], body["error"]) == (408, "timeout", GATE)
        status, body, _h = await client.call("POST", f"/contexts/nope/{route}", {"origins": many, **extra})
        assert status == 400


@pytest.mark.anyio
async def test_unreachable_from_checks_its_deadline_during_the_scan(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _hub(client)
    ticks: list[int] = []

    def monotonic() -> float:
        ticks.append(1)
        return time.monotonic() + (1e6 if len(ticks) > 1 else 0.0)  # the gate passes, the scan runs late

    monkeypatch.setattr(walk_routes, "time", types.SimpleNamespace(monotonic=monotonic))
    status, body, _h = await client.call("POST", "/contexts/g/unreachable_from", {"origins": ["hub"]})
    assert (status, body["code"], body["error"]) == (408, "timeout", DURING)


async def _usage(client: Client) -> dict[str, Any]:
    entry: dict[str, Any] = (await client.ok("GET", "/contexts/g"))["result"]["usage"]
    return entry


@pytest.mark.anyio
async def test_usage_and_search_metric(client: Client) -> None:
    await _hub(client)
    calls = [
        ("explore", {"origins": ["hub"]}, 0),
        ("explore", {"origins": ["nobody"]}, 1),
        ("explore", {"origins": ["hub"], "limit": 0}, 0),  # total 4: a hit, though no match is served
        ("paths", {"origins": ["a"], "targets": ["b"]}, 0),
        ("paths", {"origins": ["a"], "targets": ["y"]}, 1),
        ("unreachable_from", {"origins": ["hub"]}, 0),
        ("unreachable_from", {"origins": ["hub", "x"]}, 0),  # no orphans is not an empty read
    ]
    for route, body, empty in calls:
        before = await _usage(client)
        await client.ok("POST", f"/contexts/g/{route}", body)
        after = await _usage(client)
        assert after["reads"] - before["reads"] == 1, route
        assert after["empty_reads"] - before["empty_reads"] == empty, (route, body)
    status, text, _h = await client.call("GET", "/metrics")
    assert status == 200
    lines = set(text.splitlines())
    assert 'taguru_searches_total{op="explore",outcome="hit"} 2.0' in lines
    assert 'taguru_searches_total{op="explore",outcome="empty"} 1.0' in lines
    assert 'taguru_searches_total{op="paths",outcome="hit"} 1.0' in lines
    assert 'taguru_searches_total{op="paths",outcome="empty"} 1.0' in lines
    assert not any('op="unreachable_from"' in line for line in lines)


@pytest.mark.anyio
async def test_mcp_tools(client: Client) -> None:
    await _hub(client)

    async def call(name: str, args: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
        _s, reply, _h = await client.call("POST", "/mcp", body)
        return reply["result"]

    _s, listed, _h = await client.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    tools = {t["name"]: t for t in listed["result"]["tools"]}
    assert tools["paths"]["inputSchema"]["required"] == ["context", "origins", "targets"]
    assert tools["audit_coverage"]["inputSchema"]["required"] == ["context", "origins"]
    explored = await call("explore", {"context": "g", "origins": ["hub"], "limit": 1})
    assert json.loads(explored["content"][0]["text"])["result"]["total"] == 4
    trails = await call("paths", {"context": "g", "origins": ["a"], "targets": ["b"], "max_depth": 2})
    assert json.loads(trails["content"][0]["text"])["result"]["matches"][0]["path"] == ["a", "hub", "b"]
    audit = await call("audit_coverage", {"context": "g", "origins": ["hub"]})
    assert json.loads(audit["content"][0]["text"])["result"]["total"] == 1
    missing = await call("paths", {"context": "g", "origins": ["a"]})
    assert missing["content"][0]["text"] == "missing required argument 'targets'"
    refused = await call("explore", {"context": "g", "origins": ["hub"], "after": {"bogus": 1}})
    assert refused["isError"] is True and refused["structuredContent"]["code"] == "malformed_request"
