"""POST /mcp: JSON-RPC framing, methods, routed errors, auth, and the official MCP client."""

from __future__ import annotations

import json

import pytest
from conftest import Client, start_client


async def post(client: Client, body, raw: bytes | None = None, token: str | None = None):
    if raw is not None:
        return await client.call("POST", "/mcp", raw=raw, token=token)
    return await client.call("POST", "/mcp", body, token=token)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("raw", "status", "code", "message"),
    [
        (b"{nope", 400, -32700, "body is not JSON"),
        (b"[]", 400, -32600, "batch messages are not part of MCP; send one message per request"),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', 400, -32600, "id must be a string, a number, or null"),
        (
            b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
            400,
            -32600,
            'not a JSON-RPC 2.0 message (jsonrpc must be "2.0")',
        ),
        (b'{"jsonrpc":"2.0","id":1}', 400, -32600, "not a JSON-RPC message (no method)"),
        (b'{"jsonrpc":"2.0","id":1,"method":"nope/nope"}', 200, -32601, "unknown method 'nope/nope'"),
    ],
)
async def test_framing_errors(client: Client, raw, status, code, message) -> None:
    got, body, _h = await post(client, None, raw=raw)
    assert got == status
    assert body["error"] == {"code": code, "message": message}


@pytest.mark.anyio
async def test_notification_is_202_empty_and_get_is_405(client: Client) -> None:
    status, body, _h = await post(client, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert status == 202 and body is None
    status, body, _h = await client.call("GET", "/mcp")
    assert status == 405 and body["code"] == "method_not_allowed"


@pytest.mark.anyio
async def test_initialize_ping_and_modern_probe(client: Client) -> None:
    _s, body, _h = await post(
        client, {"jsonrpc": "2.0", "id": "a", "method": "initialize", "params": {"protocolVersion": "2025-03-26"}}
    )
    assert body["id"] == "a" and body["result"]["protocolVersion"] == "2025-03-26"
    assert body["result"]["serverInfo"]["name"] == "taguru" and body["result"]["capabilities"] == {"tools": {}}
    _s, body, _h = await post(
        client, {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "1999-01-01"}}
    )
    assert body["result"]["protocolVersion"] == "2025-06-18"
    _s, body, _h = await post(client, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert body["result"] == {}
    status, body, _h = await post(
        client,
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "server/discover",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
        },
    )
    assert status == 400 and body["error"]["code"] == -32022
    assert body["error"]["data"]["requested"] == "2026-07-28"


@pytest.mark.anyio
async def test_routed_errors_are_tool_errors(client: Client) -> None:
    async def call(name, args):
        _s, body, _h = await post(
            client, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
        )
        return body["result"]

    missing = await call("assemble_evidence", {"context": "nope", "origins": ["x"]})
    assert missing["isError"] is True
    assert missing["content"][0]["text"].startswith('HTTP 404: {"status":"error","code":"no_context"')
    assert missing["structuredContent"]["error"] == "context 'nope' not found"
    assert (await call("nope", {}))["content"][0]["text"] == "unknown tool 'nope'"
    assert (await call("assemble_evidence", {"context": 5, "origins": []}))["content"][0][
        "text"
    ] == "argument 'context' must be a string"
    assert (await call("cite_passage", {"context": "c", "source": "s"}))["content"][0][
        "text"
    ] == "missing required argument 'paragraph' (or its deprecated alias 'index')"
    _s, body, _h = await post(client, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}})
    assert (
        body["result"]["content"][0]["text"]
        == "tool name is required — params.name was missing, empty, or not a string"
    )
    await client.ok("PUT", "/contexts/c", content_type=None)
    await client.ok("POST", "/contexts/c/sources", {"passages": {"s.md": "一段落目。\n\n二段落目。"}})
    cited = await call("cite_passage", {"context": "c", "source": "s.md", "paragraph": 1})
    assert "isError" not in cited and json.loads(cited["content"][0]["text"])["result"]["text"] == "二段落目。"
    listed = await call("list_contexts", {"limit": 5})
    assert json.loads(listed["content"][0]["text"])["result"]["total"] == 1


@pytest.mark.anyio
async def test_scope_applies_to_routed_calls(settings_factory) -> None:
    env = {
        "TAGURU_API_TOKENS": "boss:atok,reader:rtok",
        "TAGURU_KEY_SCOPES": '{"reader": {"role": "read", "contexts": ["mine"]}}',
    }
    server, client, session = await start_client(settings_factory(**env))
    try:
        for name in ("mine", "theirs"):
            await client.ok("PUT", f"/contexts/{name}", content_type=None, token="atok")
        status, _b, _h = await post(client, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert status == 401
        _s, body, _h = await post(
            client,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "get_context", "arguments": {"context": "theirs"}},
            },
            token="rtok",
        )
        assert body["result"]["isError"] is True
        assert body["result"]["structuredContent"]["error"] == "key 'reader' has no grant on context 'theirs'"
        _s, body, _h = await post(
            client,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "get_context", "arguments": {"context": "mine"}},
            },
            token="rtok",
        )
        assert "isError" not in body["result"]
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_official_mcp_client(client: Client, mode: str) -> None:
    from mcp.client.client import Client as McpClient

    await client.ok("PUT", "/contexts/mcp-corpus", content_type=None)
    await client.ok(
        "POST", "/contexts/mcp-corpus/associations", [{"label": "rel", "object": "b", "subject": "a", "weight": 1.0}]
    )
    async with McpClient(client.base + "/mcp", mode=mode) as mcp_client:
        tools = await mcp_client.list_tools()
        assert "assemble_evidence" in [t.name for t in tools.tools]
        result = await mcp_client.call_tool("assemble_evidence", {"context": "mcp-corpus", "origins": ["a"]})
        assert not result.is_error
        package = json.loads(result.content[0].text)["result"]
        assert package["budget"] == {
            "items_used": 1,
            "bytes_used": 260,
            "tokens_used": 65,
            "limits": {"max_items": 40, "max_bytes": 65536, "max_tokens": 4000},
        }
        failed = await mcp_client.call_tool("assemble_evidence", {"context": "mcp-corpus"})
        assert failed.is_error and failed.content[0].text == "missing required argument 'origins'"
