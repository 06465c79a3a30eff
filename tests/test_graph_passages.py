"""The graph-passages mode over real HTTP: the lane on and off, the server default, validation, explain's anchors.

Run on both backends (TAGURU_TEST_BACKEND=postgres for the PostgreSQL pass)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Client, compact, start_client

KURA = "青嶺酒造は雲居県霧沢町の蔵元である。杜氏は高瀬である。"
TOJI = "高瀬は南部杜氏組合に所属し、吟醸造りで知られる。"
SHOP = "青嶺酒造 青嶺酒造 取扱店一覧。青嶺酒造の商品は全国の酒販店で購入できます。青嶺酒造。"
REVIEW = "青嶺酒造を飲んだ。青嶺酒造はおいしい。青嶺酒造をまた買いたい。"


async def seed(client: Client, name: str = "sake") -> None:
    """A two-hop world: the brewery's toji (a.md) belongs to a guild (b.md, which never names the brewery);
    two pages repeat the brewery's name without a fact."""
    await client.ok("PUT", f"/contexts/{name}", {"description": "graph passages"})
    await client.ok(
        "POST",
        f"/contexts/{name}/sources",
        {"passages": {"docs/a.md": KURA, "docs/b.md": TOJI, "shop/list.md": SHOP, "shop/review.md": REVIEW}},
    )
    await client.ok(
        "POST",
        f"/contexts/{name}/associations",
        [
            {
                "subject": "青嶺酒造",
                "label": "杜氏",
                "object": "高瀬",
                "source": "docs/a.md",
                "paragraph": 0,
                "weight": 1.0,
            },
            {
                "subject": "青嶺酒造",
                "label": "所在地",
                "object": "霧沢町",
                "source": "docs/a.md",
                "paragraph": 0,
                "weight": 1.0,
            },
            {
                "subject": "高瀬",
                "label": "所属",
                "object": "南部杜氏組合",
                "source": "docs/b.md",
                "paragraph": 0,
                "weight": 1.0,
            },
        ],
    )


async def raw(client: Client, body: Any, name: str = "sake") -> tuple[int, bytes, Any]:
    status, parsed, _h = await client.call("POST", f"/contexts/{name}/evidence", body)
    return status, compact(parsed["result"]) if status == 200 else b"", parsed


def passages_of(package: dict[str, Any]) -> list[tuple[str, int]]:
    return [(i["passage"]["source"], i["passage"]["paragraph"]) for i in package["items"] if i["kind"] == "passage"]


@pytest.mark.anyio
async def test_off_is_the_package_of_today(client: Client) -> None:
    await seed(client)
    body = {"origins": ["青嶺酒造"], "budget": {"max_items": 8, "max_tokens": 1500}}
    status, plain, parsed = await raw(client, body)
    assert status == 200
    assert "graph_passages" not in parsed["result"]["plan"]["lanes"]
    for off in (False, None):
        assert (await raw(client, {**body, "include_graph_passages": off}))[1] == plain
    explain = {**body, "explain": True}
    _s, with_explain, parsed = await raw(client, explain)
    assert [s["stage"] for s in parsed["result"]["plan"]["stages"]].count("graph_passages") == 0
    assert (await raw(client, {**explain, "include_graph_passages": False}))[1] == with_explain


@pytest.mark.anyio
async def test_on_ranks_the_second_hop_and_reports_the_lane(client: Client) -> None:
    await seed(client)
    body = {"origins": ["青嶺酒造"], "include_graph_passages": True, "budget": {"max_items": 4, "max_tokens": 800}}
    status, first, parsed = await raw(client, body)
    assert status == 200
    package = parsed["result"]
    assert package["plan"]["lanes"]["graph_passages"] == {"ran": True}
    assert list(package["plan"]["lanes"]) == [
        "resolve",
        "query",
        "activate",
        "passages",
        "graph_passages",
        "communities",
        "citations",
    ]
    found = passages_of(package)
    assert ("docs/a.md", 0) in found and ("docs/b.md", 0) in found  # the second hop never names the brewery
    graph_items = [i for i in package["items"] if any(r["lane"] == "passage_graph" for r in i["lane_ranks"])]
    assert graph_items and all(i["kind"] == "passage" for i in graph_items)
    first_graph = graph_items[0]["passage"]
    assert set(first_graph) == {"source", "paragraph", "score", "text", "lanes"}
    assert list(first_graph["lanes"]) in (["graph"], ["bm25"])
    for _ in range(3):  # deterministic: the same bytes every time
        assert (await raw(client, body))[1] == first


def carried(item: dict[str, Any]) -> list[tuple[str, int]]:
    """The paragraphs an item puts in the package: a passage its own, any other item its citation_refs."""
    if item["kind"] == "passage":
        return [(item["passage"]["source"], item["passage"]["paragraph"])]
    return [(r["source"], r["paragraph"]) for r in item["citation_refs"]]


@pytest.mark.anyio
async def test_on_an_item_adding_no_paragraph_waits_behind_every_item_adding_one(client: Client) -> None:
    """The brewery's two facts cite docs/a.md#0 and the toji's guild docs/b.md#0, which the passages ranked
    before them carry already: at three items the third is the shop listing's paragraph (a third source),
    not a fact citing a paragraph the package has; with room for all, every passage comes before them."""
    await seed(client)
    body: dict[str, Any] = {"origins": ["青嶺酒造"], "include_graph_passages": True}
    _s, _b, parsed = await raw(client, {**body, "budget": {"max_items": 3}})
    items = parsed["result"]["items"]
    assert [carried(i) for i in items] == [[("docs/a.md", 0)], [("docs/b.md", 0)], [("shop/list.md", 0)]]
    _s, _b, parsed = await raw(client, {**body, "budget": {"max_items": 7}})
    items = parsed["result"]["items"]
    kinds = [i["kind"] for i in items]
    assert kinds == ["passage"] * 4 + ["association"] * 3
    assert [i["fused_rank"] for i in items[4:]] == sorted(i["fused_rank"] for i in items[4:])
    assert min(i["fused_rank"] for i in items[4:]) < max(i["fused_rank"] for i in items[:4])  # moved, not ranked
    seen: set[tuple[str, int]] = set()
    for item in items:
        new = set(carried(item)) - seen
        assert bool(new) is (item["kind"] == "passage")
        seen |= new


@pytest.mark.anyio
async def test_on_without_anchors_skips_the_lane(client: Client) -> None:
    await seed(client)
    _s, _b, parsed = await raw(client, {"origins": ["存在しない名前"], "include_graph_passages": True, "explain": True})
    plan = parsed["result"]["plan"]
    assert plan["lanes"]["graph_passages"] == {"ran": False, "reason": "no anchors resolved from 'origins'"}
    entry = next(s for s in plan["stages"] if s["stage"] == "graph_passages")
    assert (entry["status"], entry["reason"]) == ("skipped", "no_anchors")


@pytest.mark.anyio
@pytest.mark.parametrize("value", ["yes", 1, 0, [], {}, 1.5])
async def test_a_wrong_type_is_refused(client: Client, value: Any) -> None:
    await seed(client)
    status, _b, parsed = await raw(client, {"origins": ["青嶺酒造"], "include_graph_passages": value})
    assert (status, parsed["code"]) == (422, "malformed_request")
    prefix = "Failed to deserialize the JSON body into the target type: include_graph_passages: invalid type: "
    assert parsed["error"].startswith(prefix)
    assert ", expected a boolean at line 1 column " in parsed["error"]


@pytest.mark.anyio
async def test_explain_names_each_origins_anchor(client: Client) -> None:
    await seed(client)
    _s, _b, parsed = await raw(client, {"origins": ["青嶺酒蔵", "高瀬", "まったく別物"], "explain": True})
    anchors = parsed["result"]["plan"]["anchors"]
    assert anchors[0]["origin"] == "青嶺酒蔵"
    assert anchors[0]["anchor"]["name"] == "青嶺酒造"  # a fuzzy resolve to another spelling is visible
    assert anchors[0]["anchor"]["tier"] == "fuzzy" and 0 < anchors[0]["anchor"]["score"] < 1
    assert anchors[1] == {"origin": "高瀬", "anchor": {"name": "高瀬", "tier": "exact", "score": 1.0}}
    assert anchors[2] == {"origin": "まったく別物", "anchor": None}
    _s, _b, parsed = await raw(client, {"origins": ["青嶺酒蔵"]})
    assert "anchors" not in parsed["result"]["plan"]


@pytest.mark.anyio
async def test_the_server_default_turns_the_mode_on(settings_factory) -> None:
    server, client, session = await start_client(settings_factory(TAGURU_EVIDENCE_GRAPH_PASSAGES="1"))
    try:
        await seed(client)
        body = {"origins": ["青嶺酒造"]}
        _s, by_default, parsed = await raw(client, body)
        assert parsed["result"]["plan"]["lanes"]["graph_passages"] == {"ran": True}
        assert (await raw(client, {**body, "include_graph_passages": True}))[1] == by_default
        _s, _b, parsed = await raw(client, {**body, "include_graph_passages": False})
        assert "graph_passages" not in parsed["result"]["plan"]["lanes"]
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
async def test_the_field_is_published(client: Client) -> None:
    doc = await client.ok("GET", "/openapi.json")
    schemas = doc["components"]["schemas"]
    field = schemas["EvidenceRequest"]["properties"]["include_graph_passages"]
    assert field["type"] in ("boolean", ["boolean", "null"])
    lanes = schemas["EvidencePackage"]["properties"]["plan"]["properties"]["lanes"]
    assert "graph_passages" in lanes["properties"] and "graph_passages" not in lanes["required"]


@pytest.mark.anyio
async def test_a_write_rebuilds_the_graph(client: Client) -> None:
    await seed(client)
    body = {"origins": ["南部杜氏組合"], "include_graph_passages": True}
    _s, _b, parsed = await raw(client, body)
    assert ("docs/c.md", 0) not in passages_of(parsed["result"])
    await client.ok("POST", "/contexts/sake/sources", {"passages": {"docs/c.md": "南部杜氏組合は岩手県にある。"}})
    await client.ok(
        "POST",
        "/contexts/sake/associations",
        [
            {
                "subject": "南部杜氏組合",
                "label": "所在地",
                "object": "岩手県",
                "source": "docs/c.md",
                "paragraph": 0,
                "weight": 1.0,
            }
        ],
    )
    _s, _b, parsed = await raw(client, body)
    assert ("docs/c.md", 0) in passages_of(parsed["result"])


async def mcp_evidence(client: Client, args: dict[str, Any]) -> dict[str, Any]:
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "assemble_evidence", "arguments": args},
    }
    status, reply, _h = await client.call("POST", "/mcp", rpc)
    assert status == 200 and reply["result"].get("isError") is not True, reply
    return reply["result"]


@pytest.mark.anyio
async def test_the_mcp_tool_follows_the_server_default(settings_factory, tmp_path) -> None:
    for env, lanes_with_graph in (({}, False), ({"TAGURU_EVIDENCE_GRAPH_PASSAGES": "1"}, True)):
        data = str(tmp_path / f"data-{lanes_with_graph}")
        server, client, session = await start_client(settings_factory(TAGURU_DATA_DIR=data, **env))
        try:
            await seed(client)
            tools = (await client.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))[1]
            tool = next(t for t in tools["result"]["tools"] if t["name"] == "assemble_evidence")
            assert "include_graph_passages" not in tool["inputSchema"]["properties"]  # the reference's schema
            result = await mcp_evidence(client, {"context": "sake", "origins": ["青嶺酒造"]})
            package = json.loads(result["content"][0]["text"])
            package = package.get("result", package)
            assert ("graph_passages" in package["plan"]["lanes"]) is lanes_with_graph
        finally:
            await session.close()
            await server.close()
