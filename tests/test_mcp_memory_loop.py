"""An agent's memory loop over `POST /mcp` with the official MCP client (create a context, add associations,
store passages, retrieve, assemble evidence, retract a source, read the change feed), the same loop under a
scoped key refused outside its grant and role with the reference's texts, and the other tools end to end:
groups, flush and export, import, get_context/get_group, the schema tools, paths, the result cap."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import Client, start_client

pytestmark = pytest.mark.anyio

TOKENS = {"admin": "tok-admin", "agent": "tok-agent"}
SCOPES = {"agent": {"role": "write", "contexts": ["notes"]}}
KURA = "青嶺酒造は雲居県霧沢町の蔵元である。杜氏は高瀬である。"
EDGE = {
    "subject": "青嶺酒造",
    "label": "杜氏",
    "object": "高瀬",
    "weight": 1.0,
    "source": "docs/kura.md",
    "paragraph": 0,
}


@pytest.fixture
async def auth_client(settings_factory) -> AsyncIterator[Client]:
    settings = settings_factory(
        TAGURU_API_TOKENS=",".join(f"{k}:{v}" for k, v in TOKENS.items()),
        TAGURU_KEY_SCOPES=json.dumps(SCOPES),
        TAGURU_AUTH_FAIL_LIMIT_PER_MIN="0",
    )
    server, client, session = await start_client(settings)
    try:
        yield client
    finally:
        await session.close()
        await server.close()


@asynccontextmanager
async def capped_client(settings_factory, tmp_path: Path, cap: int) -> AsyncIterator[Client]:
    """A second server, on a store of its own, with TAGURU_MCP_MAX_RESULT_BYTES set to `cap`."""
    settings = settings_factory(TAGURU_DATA_DIR=str(tmp_path / f"capped-{cap}"), TAGURU_MCP_MAX_RESULT_BYTES=str(cap))
    server, client, session = await start_client(settings)
    try:
        yield client
    finally:
        await session.close()
        await server.close()


class Agent:
    """The official MCP client over streamable HTTP, with a bearer token."""

    def __init__(self, client: Client, token: str | None) -> None:
        self.url = client.base + "/mcp"
        self.token = token

    async def __aenter__(self) -> Agent:
        from mcp.client.client import Client as McpClient
        from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        self.http = create_mcp_http_client(headers=headers)
        self.mcp = McpClient(streamable_http_client(self.url, http_client=self.http), mode="legacy")
        await self.mcp.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.mcp.__aexit__(*exc)
        await self.http.aclose()

    async def call(self, name: str, args: dict[str, Any]) -> Any:
        """A tool's text, parsed; the call must succeed."""
        result = await self.mcp.call_tool(name, args)
        assert not result.is_error, (name, result.content[0].text)
        assert result.structured_content is None
        return json.loads(result.content[0].text)

    async def fail(self, name: str, args: dict[str, Any]) -> tuple[str, Any]:
        """A refused call's text and structured content."""
        result = await self.mcp.call_tool(name, args)
        assert result.is_error, name
        return result.content[0].text, result.structured_content


async def test_an_agents_memory_loop_through_the_official_client(auth_client: Client) -> None:
    async with Agent(auth_client, TOKENS["admin"]) as agent:
        assert (await agent.call("create_context", {"name": "notes", "description": "酒蔵の記録"}))["status"] == "ok"
        tail = (await agent.call("changes", {"context": "notes"}))["result"]
        assert tail["events"] == [] and isinstance(tail["next"], str)
        added = await agent.call("add_associations", {"context": "notes", "associations": [EDGE]})
        assert added["status"] == "ok"
        stored = await agent.call("store_passages", {"context": "notes", "passages": {"docs/kura.md": KURA}})
        assert stored["status"] == "ok"
        found = await agent.call("retrieve", {"context": "notes", "origins": ["青嶺酒造"]})
        assert [a["object"] for a in found["associations"]] == ["高瀬"]
        assert found["citations"][0]["citation"]["text"] == KURA
        package = (await agent.call("assemble_evidence", {"context": "notes", "origins": ["青嶺酒造"]}))["result"]
        assert package["citations"] and package["citations"][0]["source"] == "docs/kura.md"
        retracted = await agent.call("retract_source", {"context": "notes", "source": "docs/kura.md"})
        assert retracted["status"] == "ok"
        after = await agent.call("retrieve", {"context": "notes", "origins": ["青嶺酒造"]})
        assert after["associations"] == [] and after["citations"] == []
        feed = (await agent.call("changes", {"context": "notes", "since": tail["next"]}))["result"]
        kinds = [e["kind"] for e in feed["events"]]
        assert "associations_added" in kinds and "source_stored" in kinds and "source_retracted" in kinds
        listed = (await agent.call("list_contexts", {}))["result"]
        assert [c["name"] for c in listed["contexts"]] == ["notes"]


async def test_the_same_loop_under_a_scoped_key_is_refused_outside_its_grant(auth_client: Client) -> None:
    await auth_client.ok("PUT", "/contexts/elsewhere", content_type=None, token=TOKENS["admin"])
    async with Agent(auth_client, TOKENS["agent"]) as agent:
        await agent.call("create_context", {"name": "notes"})
        await agent.call("add_associations", {"context": "notes", "associations": [EDGE]})
        await agent.call("store_passages", {"context": "notes", "passages": {"docs/kura.md": KURA}})
        assert (await agent.call("retrieve", {"context": "notes", "origins": ["青嶺酒造"]}))["citations"]
        await agent.call("retract_source", {"context": "notes", "source": "docs/kura.md"})
        await agent.call("changes", {"context": "notes"})
        no_grant = "key 'agent' has no grant on context 'elsewhere'"
        for name, args in (
            ("create_context", {"name": "elsewhere"}),
            ("add_associations", {"context": "elsewhere", "associations": [EDGE]}),
            ("store_passages", {"context": "elsewhere", "passages": {"d": "x"}}),
            ("assemble_evidence", {"context": "elsewhere", "origins": ["x"]}),
            ("retract_source", {"context": "elsewhere", "source": "d"}),
            ("changes", {"context": "elsewhere"}),
        ):
            text, structured = await agent.fail(name, args)
            assert text.startswith("HTTP 403: ") and structured["error"] == no_grant, name
            assert structured["code"] == "forbidden"
        text, structured = await agent.fail("retrieve", {"context": "elsewhere", "origins": ["x"]})
        assert text.startswith("HTTP 403: ") and no_grant in text and structured is None
        text, structured = await agent.fail("delete_context", {"name": "notes"})
        assert structured["error"] == "key 'agent' has role 'write', but DELETE /contexts/{name} needs 'admin'"
        text, structured = await agent.fail("flush", {})
        assert structured["error"] == "key 'agent' has role 'write', but POST /flush needs 'admin'"
        text, structured = await agent.fail("import", {"stream": ""})
        assert structured["error"] == "key 'agent' has role 'write', but POST /import needs 'admin'"


async def call(client: Client, name: str, args: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
    status, reply, _h = await client.call("POST", "/mcp", rpc, token=token)
    assert status == 200
    result: dict[str, Any] = reply["result"]
    return result


def text_of(result: dict[str, Any]) -> str:
    assert "isError" not in result, result["content"][0]["text"]
    out: str = result["content"][0]["text"]
    return out


async def test_groups_ride_the_mcp_transport(client: Client) -> None:
    for name in ("a", "b"):
        text_of(await call(client, "create_context", {"name": name}))
    text_of(await call(client, "create_group", {"name": "inner", "contexts": ["b"]}))
    text_of(await call(client, "create_group", {"name": "g", "contexts": ["a", "b"], "groups": ["inner"]}))
    listed = json.loads(text_of(await call(client, "list_groups", {})))["result"]
    assert {g["name"] for g in listed["groups"]} == {"g", "inner"}
    text_of(await call(client, "update_group", {"name": "g", "remove_contexts": ["b"]}))
    got = json.loads(text_of(await call(client, "get_group", {"name": "g"})))["result"]
    assert got["contexts"] == ["a"] and got["name"] == "g"
    assert "taguru_group" in text_of(await call(client, "export_group", {"name": "g"}))
    text_of(await call(client, "rename_group", {"name": "g", "to": "h"}))
    text_of(await call(client, "delete_group", {"name": "h"}))
    again = await call(client, "delete_group", {"name": "h"})
    assert again["isError"] is True and again["content"][0]["text"].startswith("HTTP 404: ")
    row = json.loads(text_of(await call(client, "get_context", {"context": "a"})))
    assert row["status"] == "ok" and row["result"]["name"] == "a"
    text_of(await call(client, "update_context", {"name": "a", "description": "new"}))
    row = json.loads(text_of(await call(client, "get_context", {"context": "a"})))
    assert row["result"]["description"] == "new"
    text_of(await call(client, "rename_context", {"name": "a", "to": "c"}))
    text_of(await call(client, "delete_context", {"name": "c"}))


async def test_flush_export_and_the_result_cap(client: Client, settings_factory, tmp_path: Path) -> None:
    text_of(await call(client, "create_context", {"name": "sake"}))
    text_of(await call(client, "add_associations", {"context": "sake", "associations": [EDGE]}))
    assert json.loads(text_of(await call(client, "flush", {})))["status"] == "ok"
    exported = text_of(await call(client, "export_context", {"context": "sake"}))
    async with client.session.get(client.base + "/contexts/sake/export") as resp:
        assert exported == await resp.text()  # the route's own stream, byte for byte
    assert "taguru_batch" in exported and exported.endswith("\n")
    missing = await call(client, "export_context", {"context": "nope"})
    assert missing["isError"] is True and missing["structuredContent"]["code"] == "no_context"
    manual = text_of(await call(client, "get_protocol", {}))
    assert manual.startswith("Taguru keeps knowledge contexts")
    async with capped_client(settings_factory, tmp_path, 64) as small:
        text_of(await call(small, "create_context", {"name": "sake"}))
        text_of(await call(small, "add_associations", {"context": "sake", "associations": [EDGE]}))
        capped = await call(small, "export_context", {"context": "sake"})
        status, _b, _h = await small.call("GET", "/contexts/sake/export")
        assert status == 200
    assert capped["isError"] is True
    assert (
        "GET /contexts/{name}/export" in capped["content"][0]["text"]
        and "taguru export" in capped["content"][0]["text"]
    )
    status, _b, _h = await client.call("GET", "/contexts/sake/export")
    assert status == 200


async def test_the_import_tool_applies_a_multi_line_stream(client: Client) -> None:
    stream = "\n".join(
        json.dumps(line, ensure_ascii=False)
        for line in (
            {"taguru_batch": 1, "context": "imp", "source": "docs/kura.md", "create": {"description": "d"}},
            {"subject": "青嶺酒造", "label": "杜氏", "object": "高瀬", "weight": 1.0},
            {"passage": KURA},
        )
    )
    preview = json.loads(text_of(await call(client, "import", {"stream": stream, "dry_run": True})))
    assert "created" in json.dumps(preview["result"])
    assert (await call(client, "get_context", {"context": "imp"}))["isError"] is True
    applied = json.loads(text_of(await call(client, "import", {"stream": stream})))["result"]
    assert "created" in json.dumps(applied) and "passage_stored" in json.dumps(applied)
    rows = json.loads(text_of(await call(client, "get_context", {"context": "imp"})))["result"]
    assert rows["name"] == "imp"
    broken = await call(client, "import", {"stream": "{nope"})
    assert broken["isError"] is True and broken["structuredContent"]["integrity"] == "nothing_written"


async def test_the_schema_tools_round_trip_through_their_routes(client: Client) -> None:
    text_of(await call(client, "create_context", {"name": "s"}))
    none = await call(client, "get_schema", {"context": "s"})
    assert none["isError"] is True and none["content"][0]["text"].startswith("HTTP 404: ")
    document = {
        "schema": 1,
        "mode": "strict",
        "closed_labels": False,
        "types": {"Brewery": {"is_a": []}, "Person": {"is_a": []}},
        "relations": {"杜氏": {"domain": ["Brewery"], "range": ["Person"]}},
    }
    text_of(await call(client, "put_schema", {"context": "s", **document}))
    got = json.loads(text_of(await call(client, "get_schema", {"context": "s"})))["result"]
    assert got["mode"] == "strict" and set(got["types"]) == {"Brewery", "Person"}
    audit = json.loads(text_of(await call(client, "audit_schema", {"context": "s", "limit": 5})))
    assert audit["status"] == "ok"
    validated = json.loads(text_of(await call(client, "validate_schema", {"context": "s", "document": document})))
    assert validated["status"] == "ok"
    text_of(await call(client, "put_schema", {"context": "s", **document, "closed_labels": True}))
    unknown = {"subject": "a", "label": "undeclared", "object": "b", "weight": 1.0}
    refused = await call(client, "add_associations", {"context": "s", "associations": [unknown]})
    assert refused["isError"] is True and refused["content"][0]["text"].startswith("HTTP ")
    assert refused["structuredContent"]["integrity"] == "nothing_written"


async def test_paths_refusals_and_a_large_write_end_to_end(client: Client) -> None:
    text_of(await call(client, "create_context", {"name": "p"}))
    text_of(await call(client, "add_associations", {"context": "p", "associations": [EDGE]}))
    trail = json.loads(
        text_of(await call(client, "paths", {"context": "p", "origins": ["青嶺酒造"], "targets": ["高瀬"]}))
    )
    assert trail["result"]["total"] == 1
    missing = await call(client, "paths", {"context": "p", "origins": ["青嶺酒造"]})
    assert missing == {
        "content": [{"type": "text", "text": "missing required argument 'targets'"}],
        "isError": True,
        "resultType": "complete",
        "_meta": missing["_meta"],
    }
    big = "word " * (600 * 1024)  # 3 MiB: no inner cap below the server's body cap
    text_of(await call(client, "store_passages", {"context": "p", "passages": {"big.md": big}}))
    described = await call(client, "describe", {"context": "nope", "concept": "x"})
    assert described["isError"] is True and described["content"][0]["text"].startswith("HTTP 404: ")
    long_name = await call(client, "get_context", {"context": "x" * 100_000})
    assert long_name["isError"] is True and "could not build" in long_name["content"][0]["text"]
    refresh = await call(client, "refresh_embeddings", {"context": "p"})
    assert refresh["content"][0]["text"].startswith(("HTTP ", "{"))
    aliases = json.loads(text_of(await call(client, "add_aliases", {"context": "p", "concepts": {"青嶺": "青嶺酒造"}})))
    assert aliases["status"] == "ok"
    text_of(await call(client, "remove_aliases", {"context": "p", "concepts": ["青嶺"]}))
    gone = await call(
        client, "retract_association", {"context": "p", "subject": "青嶺酒造", "label": "杜氏", "object": "高瀬"}
    )
    assert json.loads(text_of(gone))["status"] == "ok"


async def test_a_rejected_write_carries_its_structured_body(client: Client, settings_factory, tmp_path: Path) -> None:
    text_of(await call(client, "create_context", {"name": "w"}))
    bad = {"subject": "a", "label": "l", "object": "b", "weight": "heavy"}
    refused = await call(client, "add_associations", {"context": "w", "associations": [bad]})
    text = refused["content"][0]["text"]
    assert refused["isError"] is True and text.startswith("HTTP 400: ") and "associations[0].weight" in text
    structured = refused["structuredContent"]
    assert structured["code"] == "invalid_argument" and structured["integrity"] == "nothing_written"
    assert structured["retryable_after_correction"] is True
    assert [(i["path"], i["kind"]) for i in structured["issues"]] == [("associations[0].weight", "type")]
    async with capped_client(settings_factory, tmp_path, 16) as small:
        big_error = await call(small, "get_context", {"context": "nope"})
    assert big_error["content"][0]["text"] == (
        "HTTP 404: (error body exceeds the MCP response cap, TAGURU_MCP_MAX_RESULT_BYTES)"
    )
    assert "structuredContent" not in big_error


async def test_the_import_tool_reports_a_durable_prefix_on_a_mid_stream_rejection(client: Client) -> None:
    lines = [
        {"taguru_batch": 1, "context": "imp", "source": "one.md", "create": {"description": "d"}},
        {"subject": "Aomine", "label": "l", "object": "x", "weight": 1.0},
        {"taguru_batch": 1, "context": "imp", "source": "two.md"},
        {"alias": "Aomine", "canonical": "存在しない", "kind": "concept"},
    ]
    stream = "\n".join(json.dumps(line, ensure_ascii=False) for line in lines)
    refused = await call(client, "import", {"stream": stream})
    assert refused["isError"] is True, refused
    structured = refused["structuredContent"]
    assert structured["integrity"] == "durable_prefix" and structured["durable_batches"] == 1
    assert [i["path"] for i in structured["issues"]] == ["batches[1].concepts['Aomine']"]
    assert refused["content"][0]["text"].startswith("HTTP 409: ")
