"""The three MCP reference fixtures, replayed over POST /mcp."""

from __future__ import annotations

import json

import pytest
from conftest import Client, exact, load_fixture, normalize


async def rpc(client: Client, method: str, params: dict, rid=1):
    status, body, _h = await client.call(
        "POST", "/mcp", {"id": rid, "jsonrpc": "2.0", "method": method, "params": params}
    )
    assert status == 200, body
    return body["result"]


def _normalize_result(result: dict) -> dict:
    out = normalize(result)
    for item in out.get("content", []):
        try:
            item["text"] = normalize(json.loads(item["text"]))
        except ValueError:
            pass
    return out


@pytest.mark.anyio
async def test_tool_schema(client: Client) -> None:
    fixture = load_fixture("mcp", "assemble_evidence_tool_schema")
    result = await rpc(client, "tools/list", {})
    tool = [t for t in result["tools"] if t["name"] == "assemble_evidence"]
    assert exact({"tools": tool}) == exact(fixture["response"])


@pytest.mark.anyio
async def test_tool_call(client: Client) -> None:
    fixture = load_fixture("mcp", "assemble_evidence_call")
    await client.ok("PUT", "/contexts/mcp-corpus", content_type=None)
    await client.ok(
        "POST", "/contexts/mcp-corpus/associations", [{"label": "rel", "object": "b", "subject": "a", "weight": 1.0}]
    )
    result = await rpc(client, "tools/call", {"arguments": fixture["request"], "name": "assemble_evidence"})
    assert exact(_normalize_result(result)) == exact(_normalize_result(fixture["response"]))
    direct = await client.ok("POST", "/contexts/mcp-corpus/evidence", {"origins": ["a"]})
    assert json.loads(result["content"][0]["text"])["result"] == direct["result"]


@pytest.mark.anyio
async def test_tool_error(client: Client) -> None:
    fixture = load_fixture("mcp", "assemble_evidence_tool_error")
    await client.ok("PUT", "/contexts/mcp-error-corpus", content_type=None)
    result = await rpc(client, "tools/call", {"arguments": fixture["request"], "name": "assemble_evidence"})
    assert exact(normalize(result)) == exact(normalize(fixture["response"]))
