"""Cross-context reads (`POST /recall`, `/query`, `/sources/search`): targets, merge, paging, errors, scope."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Client, start_client
from substrate_support import assert_error, ctx_path, make_context

pytestmark = pytest.mark.anyio


def _ok(resp: tuple[int, Any, dict[str, str]]) -> Any:
    status, body, _h = resp
    assert status == 200, body
    return body["result"]


async def _seed(client: Client, token: str | None = None) -> None:
    for name, (s, lab, o, w, src, text) in {
        "izakaya": ("蔵", "名物", "燗酒", 0.5, "iz.md", "蔵元の燗酒は冬の名物。"),
        "sakagura": ("蔵", "杜氏", "高瀬", 1.0, "sk.md", "杜氏の高瀬は蔵元を任されている。"),
    }.items():
        await make_context(client, name, token=token)
        assoc = [{"subject": s, "label": lab, "object": o, "weight": w, "source": src}]
        _ok(await client.call("POST", ctx_path(name, "associations"), assoc, token=token))
        _ok(await client.call("POST", ctx_path(name, "sources"), {"passages": {src: text}}, token=token))


def _attr(source: str, weight: float) -> dict[str, Any]:
    return {"source": source, "weight": weight, "count": 1, "paragraph": None, "section": None, "locator": None}


async def test_recall_and_query_merge_by_weight_then_names(client: Client) -> None:
    await _seed(client)
    got = _ok(await client.call("POST", "/recall", {"contexts": ["izakaya", "sakagura"], "cue": "蔵"}))
    assert got == {
        "total": 2,
        "matches": [
            {
                "context": "sakagura",
                "subject": "蔵",
                "label": "杜氏",
                "object": "高瀬",
                "weight": 1.0,
                "count": 1,
                "attributions": [_attr("sk.md", 1.0)],
            },
            {
                "context": "izakaya",
                "subject": "蔵",
                "label": "名物",
                "object": "燗酒",
                "weight": 0.5,
                "count": 1,
                "attributions": [_attr("iz.md", 0.5)],
            },
        ],
        "plan": {"contexts": ["izakaya", "sakagura"]},
    }
    one = _ok(await client.call("POST", "/recall", {"contexts": ["izakaya", "sakagura"], "cue": "蔵", "limit": 1}))
    assert one["total"] == 2 and [m["context"] for m in one["matches"]] == ["sakagura"]
    deduped = _ok(await client.call("POST", "/recall", {"contexts": ["izakaya", "izakaya", "sakagura"], "cue": "蔵"}))
    assert deduped["total"] == 2 and deduped["plan"]["contexts"] == ["izakaya", "sakagura"]
    q = _ok(await client.call("POST", "/query", {"contexts": ["izakaya", "sakagura"], "label": "杜氏"}))
    assert q["total"] == 1 and q["matches"][0]["context"] == "sakagura"
    typed = _ok(await client.call("POST", "/query", {"contexts": ["izakaya"], "subject": "蔵", "subject_types": ["T"]}))
    assert typed == {"total": 0, "matches": [], "plan": {"contexts": ["izakaya"]}}


async def test_cursor_ties_break_by_context_name(client: Client) -> None:
    for name in ("zeta", "alpha"):
        await make_context(client, name)
        assoc = [{"subject": "蔵", "label": "銘柄", "object": "青嶺", "weight": 1.0}]
        _ok(await client.call("POST", ctx_path(name, "associations"), assoc))
    first = _ok(await client.call("POST", "/recall", {"contexts": ["zeta", "alpha"], "cue": "蔵", "limit": 1}))
    assert [m["context"] for m in first["matches"]] == ["alpha"]
    after = {"weight": 1.0, "context": "alpha", "subject": "蔵", "label": "銘柄", "object": "青嶺"}
    second = _ok(
        await client.call("POST", "/recall", {"contexts": ["zeta", "alpha"], "cue": "蔵", "limit": 1, "after": after})
    )
    assert second["total"] == 2 and [m["context"] for m in second["matches"]] == ["zeta"]
    after["context"] = "zeta"
    third = _ok(await client.call("POST", "/recall", {"contexts": ["zeta", "alpha"], "cue": "蔵", "after": after}))
    assert third["matches"] == []
    # the cursor is closed, and must name its context
    del after["context"]
    status, _b, _h = await client.call("POST", "/recall", {"contexts": ["zeta"], "cue": "蔵", "after": after})
    assert status == 422
    after.update(context="zeta", extra=1)
    status, _b, _h = await client.call("POST", "/recall", {"contexts": ["zeta"], "cue": "蔵", "after": after})
    assert status == 422


async def test_groups_resolve_into_targets(client: Client) -> None:
    await _seed(client)
    for name in ("amber", "quartz"):
        await make_context(client, name)
    for name, body in {
        "sakaya": {"contexts": ["izakaya"]},
        "nomiya": {"contexts": ["sakagura"], "groups": ["sakaya"]},
        "minerals": {"contexts": ["amber", "quartz"]},
        "hollow": {},
    }.items():
        _ok(await client.call("PUT", f"/groups/{name}", body))
    assert _ok(await client.call("POST", "/recall", {"groups": ["nomiya"], "cue": "蔵"}))["total"] == 2
    both = _ok(
        await client.call("POST", "/recall", {"contexts": ["izakaya"], "groups": ["nomiya", "sakaya"], "cue": "蔵"})
    )
    assert both["total"] == 2 and both["plan"]["contexts"] == ["izakaya", "sakagura"]
    plan = _ok(await client.call("POST", "/query", {"contexts": ["quartz"], "groups": ["minerals"], "subject": "x"}))
    assert plan["plan"]["contexts"] == ["quartz", "amber"]
    empty = _ok(await client.call("POST", "/recall", {"groups": ["hollow"], "cue": "蔵"}))
    assert empty == {"total": 0, "matches": [], "plan": {"contexts": []}}
    assert _ok(await client.call("POST", "/sources/search", {"groups": ["hollow"], "query": "蔵元"})) == {
        "plan": {"contexts": []},
        "hits": [],
    }
    assert_error(
        await client.call("POST", "/recall", {"groups": ["maboroshi"], "cue": "蔵"}),
        404,
        "no_group",
        "group 'maboroshi' not found",
    )
    # direct names lead the tie order of the search interleave
    hits = _ok(
        await client.call("POST", "/sources/search", {"contexts": ["sakagura"], "groups": ["sakaya"], "query": "蔵元"})
    )
    assert [h["context"] for h in hits["hits"]] == ["sakagura", "izakaya"]


async def test_search_interleaves_and_reports_every_plan(client: Client) -> None:
    await _seed(client)
    status, body, _h = await client.call(
        "POST", "/sources/search", {"contexts": ["izakaya", "sakagura"], "query": "蔵元"}
    )
    assert status == 200
    no_provider = {"ran": False, "reason": "no embedding provider is configured"}
    assert body["result"] == {
        "plan": {
            "contexts": [
                {"context": "izakaya", "lanes": {"bm25": {"ran": True}, "vector": no_provider}},
                {"context": "sakagura", "lanes": {"bm25": {"ran": True}, "vector": no_provider}},
            ]
        },
        "hits": [
            {
                "context": "izakaya",
                "source": "iz.md",
                "paragraph": 0,
                "score": 0.28768212,
                "text": "蔵元の燗酒は冬の名物。",
                "lanes": {"bm25": {"rank": 1, "score": 0.28768212}},
            },
            {
                "context": "sakagura",
                "source": "sk.md",
                "paragraph": 0,
                "score": 0.28768212,
                "text": "杜氏の高瀬は蔵元を任されている。",
                "lanes": {"bm25": {"rank": 1, "score": 0.28768212}},
            },
        ],
    }
    zero = _ok(await client.call("POST", "/sources/search", {"contexts": ["izakaya"], "query": "蔵元", "limit": 0}))
    assert zero["hits"] == [] and zero["plan"]["contexts"][0]["lanes"]["bm25"]["reason"] == "the requested limit is 0"
    filtered = _ok(
        await client.call(
            "POST", "/sources/search", {"contexts": ["izakaya", "sakagura"], "query": "蔵元", "tags": ["t"]}
        )
    )
    assert [p["filter"] for p in filtered["plan"]["contexts"]] == [{"eligible_sources": 0, "total_sources": 1}] * 2
    # since/until filter sources here
    windowed = _ok(await client.call("POST", "/sources/search", {"contexts": ["izakaya"], "query": "蔵元", "until": 1}))
    assert windowed["hits"] == []
    assert_error(
        await client.call("POST", "/sources/search", {"contexts": ["izakaya"], "query": "q", "tags": [""]}),
        400,
        "invalid_argument",
        "a filter tag must not be empty; nothing was applied",
    )


async def test_error_table(client: Client) -> None:
    await _seed(client)
    for path, extra in (("/recall", {"cue": "蔵"}), ("/query", {"subject": "蔵"}), ("/sources/search", {"query": "q"})):
        assert_error(
            await client.call("POST", path, {**extra, "contexts": [], "groups": []}),
            400,
            "invalid_argument",
            "'contexts' or 'groups' must name at least one target",
        )
        assert_error(
            await client.call("POST", path, {**extra, "contexts": ["izakaya"] * 1001, "groups": ["g"] * 1001}),
            400,
            "over_limit",
            "contexts carries 1001 items, past the per-request limit of 1000; split the request",
        )
        assert_error(
            await client.call("POST", path, {**extra, "groups": ["g"] * 1001}),
            400,
            "over_limit",
            "groups carries 1001 items, past the per-request limit of 1000; split the request",
        )
        assert_error(
            await client.call("POST", path, {**extra, "contexts": ["izakaya", "ghost", "nope"]}),
            404,
            "no_context",
            "context 'ghost' not found",
        )
        status, _b, _h = await client.call("POST", path, {**extra, "contexts": "izakaya"})
        assert status == 422
        status, _b, _h = await client.call("POST", path, raw=b"{}", content_type="text/plain")
        assert status == 415
    window = "since/until are not supported on cross-context search — window one context at a time"
    assert_error(await client.call("POST", "/recall", {"cue": "x", "since": 1}), 400, "invalid_argument", window)
    assert_error(await client.call("POST", "/query", {"subject": "x", "until": 1}), 400, "invalid_argument", window)
    assert_error(
        await client.call("POST", "/query", {"contexts": ["izakaya"]}),
        400,
        "invalid_argument",
        "'subject', 'label', or 'object' must pin at least one value",
    )
    assert_error(
        await client.call("POST", "/query", {"contexts": ["izakaya"], "label": ["l"] * 1001}),
        400,
        "over_limit",
        "label carries 1001 items, past the per-request limit of 1000; split the request",
    )
    assert_error(
        await client.call("POST", "/query", {"contexts": ["izakaya"], "label": "l", "object_types": ["t"] * 1001}),
        400,
        "over_limit",
        "object_types carries 1001 items, past the per-request limit of 1000; split the request",
    )
    status, _b, _h = await client.call("POST", "/recall", {"contexts": ["izakaya"]})
    assert status == 422


# ----- scoped keys -------------------------------------------------------------------------------


@pytest.fixture
async def scoped(settings_factory: Any) -> AsyncIterator[Client]:
    settings = settings_factory(
        TAGURU_API_TOKENS="boss:atok,potter:stok",
        TAGURU_KEY_SCOPES=json.dumps({"potter": {"role": "read", "contexts": ["sake"]}}),
    )
    server, client, session = await start_client(settings)
    try:
        for name in ("sake", "bunko"):
            await make_context(client, name, token="atok")
            assoc = [{"subject": "蔵", "label": "在庫", "object": f"{name}-x", "weight": 1.0, "source": "s.md"}]
            _ok(await client.call("POST", ctx_path(name, "associations"), assoc, token="atok"))
            _ok(await client.call("POST", ctx_path(name, "sources"), {"passages": {"s.md": "蔵元"}}, token="atok"))
        _ok(await client.call("PUT", "/groups/zenbu", {"contexts": ["sake", "bunko"]}, token="atok"))
        yield client
    finally:
        await session.close()
        await server.close()


async def test_a_scoped_key_reaches_only_its_grant(scoped: Client) -> None:
    for path, extra in (
        ("/recall", {"cue": "蔵"}),
        ("/query", {"subject": "蔵"}),
        ("/sources/search", {"query": "蔵元"}),
    ):
        for outside in ("bunko", "ghost"):
            assert_error(
                await scoped.call("POST", path, {**extra, "contexts": ["sake", outside]}, token="stok"),
                403,
                "forbidden",
                f"key 'potter' has no grant on context '{outside}'; nothing was applied",
            )
        assert_error(
            await scoped.call("POST", path, {**extra, "contexts": ["sake", "ghost"]}, token="atok"), 404, "no_context"
        )
        status, body, _h = await scoped.call("POST", path, {**extra, "groups": ["zenbu"]}, token="stok")
        assert status == 200 and "bunko" not in json.dumps(body, ensure_ascii=False), body
        full = _ok(await scoped.call("POST", path, {**extra, "groups": ["zenbu"]}, token="atok"))
        assert "bunko" in json.dumps(full, ensure_ascii=False)


# ----- the merge against a plain transcription over single-context results ----------------------


def _cross_key(m: dict[str, Any]) -> tuple[Any, ...]:
    return (-abs(m["weight"]), m["context"], m["subject"], m["label"], m["object"])


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_merge_matches_a_transcription_over_single_context_results(client: Client, seed: int) -> None:
    rnd = random.Random(seed)
    names = [f"c{i}" for i in range(rnd.randint(2, 5))]
    words = ["蔵", "酒", "米", "水", "麹"]
    labels = ["造る", "使う", "名物"]
    for name in names:
        await make_context(client, name)
        assoc = [
            {
                "subject": rnd.choice(words),
                "label": rnd.choice(labels),
                "object": rnd.choice(words),
                "weight": rnd.choice([1.0, 0.5, -0.5, 2.0, 0.25]),
                "source": f"s{rnd.randint(0, 3)}.md",
            }
            for _ in range(rnd.randint(3, 25))
        ]
        _ok(await client.call("POST", ctx_path(name, "associations"), assoc))
        passages = {f"s{i}.md": " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 8))) for i in range(4)}
        _ok(await client.call("POST", ctx_path(name, "sources"), {"passages": passages}))
    _ok(await client.call("PUT", "/groups/half", {"contexts": names[: len(names) // 2 + 1]}))
    direct = rnd.sample(names, k=max(1, len(names) // 2))
    targets = list(dict.fromkeys(direct + sorted(names[: len(names) // 2 + 1])))
    for path, extra in (("recall", {"cue": rnd.choice(words)}), ("query", {"label": rnd.sample(labels, 2)})):
        pool: list[dict[str, Any]] = []
        total = 0
        for name in targets:
            single = _ok(await client.call("POST", ctx_path(name, path), {**extra, "limit": 1000}))
            total += single["total"]
            pool.extend({"context": name, **m} for m in single["matches"])
        expected = sorted(pool, key=_cross_key)
        limit = rnd.randint(1, 4)
        got: list[dict[str, Any]] = []
        after = None
        while True:
            body = {**extra, "contexts": direct, "groups": ["half"], "limit": limit}
            if after is not None:
                body["after"] = after
            page = _ok(await client.call("POST", f"/{path}", body))
            assert page["total"] == total and page["plan"]["contexts"] == targets
            if not page["matches"]:
                break
            got.extend(page["matches"])
            last = page["matches"][-1]
            after = {k: last[k] for k in ("weight", "context", "subject", "label", "object")}
        assert got == expected
    query = " ".join(rnd.sample(words, 2))
    limit = rnd.randint(1, 6)
    singles = [
        _ok(await client.call("POST", ctx_path(name, "sources/search"), {"query": query, "limit": limit}))
        for name in targets
    ]
    interleaved = sorted(
        (
            (rank, index, {"context": targets[index], **hit})
            for index, s in enumerate(singles)
            for rank, hit in enumerate(s["hits"])
        ),
        key=lambda r: (r[0], r[1]),
    )
    crossed = _ok(
        await client.call(
            "POST", "/sources/search", {"contexts": direct, "groups": ["half"], "query": query, "limit": limit}
        )
    )
    assert crossed["hits"] == [hit for _r, _i, hit in interleaved][:limit]
    assert crossed["plan"]["contexts"] == [p for s in singles for p in s["plan"]["contexts"]]


# ----- MCP: the group tools and the ST forms of query, recall, search_passages ---------------------


async def _tool(client: Client, name: str, args: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
    status, body, _h = await client.call("POST", "/mcp", msg, token=token)
    assert status == 200, body
    return body["result"]


def _text(result: dict[str, Any]) -> str:
    assert "isError" not in result, result
    return result["content"][0]["text"]


async def test_mcp_group_tools_and_st_forms(client: Client) -> None:
    await _seed(client)
    _ok(await client.call("PUT", "/groups/sakaya", {"contexts": ["izakaya"], "description": "酒屋"}))
    listed = json.loads(_text(await _tool(client, "list_groups", {"limit": 5})))
    assert [g["name"] for g in listed["result"]["groups"]] == ["sakaya"]
    got = json.loads(_text(await _tool(client, "get_group", {"name": "sakaya"})))
    assert got["result"]["contexts"] == ["izakaya"]
    line = _text(await _tool(client, "export_group", {"name": "sakaya"}))
    assert line == '{"taguru_group":1,"name":"sakaya","description":"酒屋","contexts":["izakaya"]}\n'
    missing = await _tool(client, "get_group", {"name": "nope"})
    assert missing["isError"] is True and missing["content"][0]["text"].startswith("HTTP 404: ")
    assert (await _tool(client, "get_group", {}))["content"][0]["text"] == "missing required argument 'name'"
    # ST: `context` is the per-context route, `contexts`/`groups` the cross route
    single = json.loads(_text(await _tool(client, "recall", {"context": "sakagura", "cue": "蔵"})))
    assert single["result"]["plan"] == {"contexts": ["sakagura"]} and "context" not in single["result"]["matches"][0]
    crossed = json.loads(
        _text(await _tool(client, "recall", {"contexts": ["sakagura"], "groups": ["sakaya"], "cue": "蔵"}))
    )
    assert [m["context"] for m in crossed["result"]["matches"]] == ["sakagura", "izakaya"]
    q = json.loads(_text(await _tool(client, "query", {"groups": ["sakaya"], "subject": "蔵"})))
    assert q["result"]["total"] == 1
    hits = json.loads(
        _text(await _tool(client, "search_passages", {"contexts": ["izakaya", "sakagura"], "query": "蔵元"}))
    )
    assert [h["context"] for h in hits["result"]["hits"]] == ["izakaya", "sakagura"]
    both = await _tool(client, "recall", {"context": "izakaya", "contexts": ["sakagura"], "cue": "蔵"})
    assert both["isError"] is True
    assert both["content"][0]["text"] == "pass either 'context' or 'contexts'/'groups', not both"
    neither = await _tool(client, "search_passages", {"query": "蔵元"})
    assert neither["content"][0]["text"] == (
        "missing required argument 'context' (or 'contexts'/'groups', to search several at once)"
    )
    windowed = await _tool(client, "recall", {"groups": ["sakaya"], "cue": "蔵", "since": 1})
    assert (
        windowed["isError"] is True
        and "since/until are not supported on cross-context search" in (windowed["content"][0]["text"])
    )
    no_cue = await _tool(client, "recall", {"groups": ["sakaya"]})
    assert no_cue["content"][0]["text"] == "missing required argument 'cue'"
    names = {t["name"] for t in (await _rpc_tools(client))}
    assert {"list_groups", "get_group", "export_group"} <= names


async def _rpc_tools(client: Client) -> list[dict[str, Any]]:
    status, body, _h = await client.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert status == 200
    return body["result"]["tools"]


async def test_mcp_cross_tools_keep_a_scoped_keys_grant(scoped: Client) -> None:
    refused = await _tool(scoped, "recall", {"contexts": ["sake", "bunko"], "cue": "蔵"}, token="stok")
    assert refused["isError"] is True and refused["content"][0]["text"].startswith("HTTP 403: ")
    over_group = _text(await _tool(scoped, "search_passages", {"groups": ["zenbu"], "query": "蔵元"}, token="stok"))
    assert "bunko" not in over_group
    row = _text(await _tool(scoped, "get_group", {"name": "zenbu"}, token="stok"))
    assert "bunko" not in row and json.loads(row)["result"]["contexts"] == ["sake"]
