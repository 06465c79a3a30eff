"""Time windows on the single-context graph reads: `since`/`until` on recall, query, activate, explore.

The two worked examples of the windows contract (the reference test's corpus; unsourced and
negative weight) as HTTP calls with their exact results, the refusals and their order, the typed
body's 422s, cursor paging on windowed weights, the cache's independence of windowed and
unwindowed reads, the cross-context refusal, the MCP tools' forwarding, and a store-level oracle:
a windowed walk equals the unwindowed walk of the same graph stripped to its eligible records.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from conftest import Client
from substrate_support import assert_error, assert_ok, ctx_path, make_context

from taguru_server.store.model.context import F64_MAX, Context, Meta
from taguru_server.store.read.activation import activation, windowed_activation
from taguru_server.store.read.spread import activation_plain
from taguru_server.store.read.walks import explored
from taguru_server.store.read.window import Window, WindowView, window_view

pytestmark = pytest.mark.anyio

DESER_422 = "Failed to deserialize the JSON body into the target type: "
CROSS = "since/until are not supported on cross-context search — window one context at a time"
ROUTES = ("recall", "query", "activate", "explore")
VALID = {
    "recall": {"cue": "蔵"},
    "query": {"subject": "蔵"},
    "activate": {"origins": ["蔵"]},
    "explore": {"origins": ["蔵"]},
}


def att(source: str, weight: float, count: int = 1) -> dict[str, Any]:
    return {"source": source, "weight": weight, "count": count, "paragraph": None, "section": None, "locator": None}


def assoc(s: str, lab: str, o: str, weight: float, count: int, *atts: dict[str, Any]) -> dict[str, Any]:
    return {"subject": s, "label": lab, "object": o, "weight": weight, "count": count, "attributions": list(atts)}


def refused(since: Any, until: Any) -> str:
    return (
        f"since {since} is not before until {until} — the window is half-open [since, until) and this one "
        "selects nothing"
    )


async def post(client: Client, name: str, route: str, body: Any) -> Any:
    return assert_ok(await client.call("POST", ctx_path(name, route), body))


async def sake(client: Client) -> None:
    """The reference test's corpus: two dated sources, one undated associations-only source."""
    assert_ok(await client.call("PUT", ctx_path("sake"), {"description": "窓"}))
    rows = [
        {"subject": "蔵", "label": "杜氏", "object": "高瀬", "weight": 1.0, "source": "doc-2019"},
        {"subject": "蔵", "label": "銘柄", "object": "青嶺", "weight": 2.0, "source": "doc-2019"},
        {"subject": "蔵", "label": "杜氏", "object": "青山", "weight": 1.0, "source": "doc-2024"},
        {"subject": "蔵", "label": "銘柄", "object": "青嶺", "weight": 4.0, "source": "doc-2024"},
        {"subject": "蔵", "label": "幽霊", "object": "無日付", "weight": 1.0, "source": "doc-undated"},
    ]
    assert_ok(await client.call("POST", ctx_path("sake", "associations"), rows))
    passages = {"doc-2019": "杜氏は高瀬。銘柄は青嶺。", "doc-2024": "杜氏は青山。銘柄は青嶺。"}
    body = {"passages": passages, "dates": {"doc-2019": 1000, "doc-2024": 2000}}
    assert_ok(await client.call("POST", ctx_path("sake", "sources"), body))


E0 = assoc("蔵", "杜氏", "高瀬", 1.0, 1, att("doc-2019", 1.0))
E1_2019 = assoc("蔵", "銘柄", "青嶺", 2.0, 1, att("doc-2019", 2.0))


async def test_example_one_query_recall(client: Client) -> None:
    await sake(client)
    as_of = await post(client, "sake", "query", {"subject": "蔵", "label": "杜氏", "until": 1500})
    assert as_of == {"total": 1, "matches": [E0], "plan": {"contexts": ["sake"]}}
    reweighed = await post(client, "sake", "query", {"subject": "蔵", "label": "銘柄", "until": 1500})
    assert reweighed == {"total": 1, "matches": [E1_2019], "plan": {"contexts": ["sake"]}}
    plain = await post(client, "sake", "query", {"subject": "蔵", "label": "銘柄"})
    assert plain["matches"] == [assoc("蔵", "銘柄", "青嶺", 3.0, 2, att("doc-2019", 2.0), att("doc-2024", 4.0))]
    since = await post(client, "sake", "recall", {"cue": "蔵", "since": 1500})
    assert since == {
        "total": 2,
        "matches": [
            assoc("蔵", "銘柄", "青嶺", 4.0, 1, att("doc-2024", 4.0)),
            assoc("蔵", "杜氏", "青山", 1.0, 1, att("doc-2024", 1.0)),
        ],
        "plan": {"contexts": ["sake"]},
    }
    assert (await post(client, "sake", "query", {"subject": "蔵", "label": "幽霊", "since": 0}))["total"] == 0
    assert (await post(client, "sake", "query", {"subject": "蔵", "label": "幽霊"}))["total"] == 1
    # the boundary: until is exclusive, since inclusive
    assert (await post(client, "sake", "query", {"subject": "蔵", "label": "杜氏", "until": 1000}))["total"] == 0
    both = await post(client, "sake", "query", {"subject": "蔵", "label": "杜氏", "since": 1000, "until": 1500})
    assert both["total"] == 1 and both["matches"] == [E0]
    # a one-sided window that selects nothing is legal
    assert (await post(client, "sake", "recall", {"cue": "蔵", "until": 0})) == {
        "total": 0,
        "matches": [],
        "plan": {"contexts": ["sake"]},
    }


async def test_example_one_activate_explore(client: Client) -> None:
    await sake(client)
    for decay in (1.0, 0.5):  # the plain heap walk, then the banded walk
        found = await post(client, "sake", "activate", {"origins": ["蔵"], "decay": decay, "until": 1500})
        assert found == {
            "total": 2,
            "matches": [
                {"strength": 2.0 * decay, "path": ["蔵"], "association": E1_2019},
                {"strength": 1.0 * decay, "path": ["蔵"], "association": E0},
            ],
        }
    plain = await post(client, "sake", "activate", {"origins": ["蔵"], "decay": 1.0})
    assert plain["total"] == 4
    assert [(m["strength"], m["association"]["object"]) for m in plain["matches"]] == [
        (6.0, "青嶺"),
        (1.0, "高瀬"),
        (1.0, "青山"),
        (1.0, "無日付"),
    ]
    walked = await post(client, "sake", "explore", {"origins": ["蔵"], "until": 1500})
    assert walked == {
        "total": 2,
        "matches": [
            {"distance": 1, "path": ["蔵"], "association": E0},
            {"distance": 1, "path": ["蔵"], "association": E1_2019},
        ],
    }


async def test_example_one_stored_at_refusals_and_cache(client: Client) -> None:
    await sake(client)
    memo = [{"subject": "蔵D", "label": "銘柄", "object": "残雪", "weight": 1.0, "source": "doc-memo"}]
    assert_ok(await client.call("POST", ctx_path("sake", "associations"), memo))
    assert (await post(client, "sake", "query", {"subject": "蔵D", "since": 2001}))["total"] == 0  # no passage yet
    assert_ok(await client.call("POST", ctx_path("sake", "sources"), {"passages": {"doc-memo": "日付なしのメモ。"}}))
    assert (await post(client, "sake", "query", {"subject": "蔵D", "since": 2001}))["total"] == 1
    assert_error(
        await client.call("POST", ctx_path("sake", "query"), {"subject": "蔵", "since": 2000, "until": 2000}),
        400,
        "invalid_argument",
        refused(2000, 2000),
    )
    assert_error(
        await client.call("POST", "/query", {"contexts": ["sake"], "subject": "蔵", "until": 1500}),
        400,
        "invalid_argument",
        CROSS,
    )
    assert_error(
        await client.call("POST", "/recall", {"contexts": ["sake"], "cue": "蔵", "since": 1}),
        400,
        "invalid_argument",
        CROSS,
    )
    # on /query the refusal is the very first check, on /recall before the targets are resolved
    assert_error(
        await client.call("POST", "/query", {"contexts": ["nope"], "since": 1}), 400, "invalid_argument", CROSS
    )
    assert_error(await client.call("POST", "/recall", {"cue": "x", "until": 5}), 400, "invalid_argument", CROSS)
    # the same reads, windowed and not, in either order: distinct answers
    for _round in range(2):
        assert (await post(client, "sake", "query", {"subject": "蔵", "label": "杜氏"}))["total"] == 2
        assert (await post(client, "sake", "query", {"subject": "蔵", "label": "杜氏", "until": 1500}))["total"] == 1
    # re-storing a passage restamps it: its facts move out of the window with no graph write
    body = {"passages": {"doc-2019": "杜氏は高瀬。"}, "dates": {"doc-2019": 3000}}
    assert_ok(await client.call("POST", ctx_path("sake", "sources"), body))
    assert (await post(client, "sake", "query", {"subject": "蔵", "label": "杜氏", "until": 1500}))["total"] == 0
    # retracting a source drops its metadata and attributions
    assert_ok(await client.call("POST", ctx_path("sake", "sources/retract"), {"source": "doc-2024"}))
    after = await post(client, "sake", "recall", {"cue": "蔵", "since": 1500})  # doc-2019, now at 3000
    assert after["matches"] == [E1_2019, E0]


async def win(client: Client) -> None:
    """Context `win`: one edge with an unsourced share and a negative in-window record, one more edge."""
    await make_context(client, "win")
    rows = [
        {"subject": "A", "label": "r", "object": "B", "weight": 2.0, "source": "s1"},
        {"subject": "A", "label": "r", "object": "B", "weight": -0.5, "source": "s2"},
        {"subject": "A", "label": "r", "object": "B", "weight": 3.0},
        {"subject": "B", "label": "q", "object": "C", "weight": 1.0, "source": "s2"},
    ]
    assert_ok(await client.call("POST", ctx_path("win", "associations"), rows))
    body = {"passages": {"s1": "一。", "s2": "二。"}, "dates": {"s1": 100, "s2": 200}}
    assert_ok(await client.call("POST", ctx_path("win", "sources"), body))


ARB_S2 = assoc("A", "r", "B", -0.5, 1, att("s2", -0.5))
BQC = assoc("B", "q", "C", 1.0, 1, att("s2", 1.0))


async def test_example_two_table(client: Client) -> None:
    await win(client)

    async def served(window: dict[str, Any]) -> list[Any]:
        found = await post(client, "win", "query", {"label": ["r", "q"], **window})
        return sorted(found["matches"], key=lambda m: m["label"], reverse=True)

    assert await served({}) == [assoc("A", "r", "B", 1.5, 3, att("s1", 2.0), att("s2", -0.5)), BQC]
    assert await served({"until": 150}) == [assoc("A", "r", "B", 2.0, 1, att("s1", 2.0))]
    assert await served({"since": 150}) == [ARB_S2, BQC]
    assert await served({"since": 0}) == [assoc("A", "r", "B", 0.75, 2, att("s1", 2.0), att("s2", -0.5)), BQC]
    # explicit nulls are no bound: the unwindowed answer
    assert await served({"since": None, "until": None}) == await served({})


async def test_example_two_activate_explore(client: Client) -> None:
    await win(client)
    status, body, _h = await client.call("POST", ctx_path("win", "activate"), {"origins": ["A"], "since": 150})
    assert status == 200 and body["status"] == "ok"
    assert body["result"] == {
        "total": 2,
        "matches": [
            {"strength": 0.25, "path": ["A"], "association": ARB_S2},
            {"strength": 0.25, "path": ["A", "B"], "association": BQC},
        ],
    }

    async def strengths(window: dict[str, Any]) -> list[tuple[float, str]]:
        found = await post(client, "win", "activate", {"origins": ["A"], **window})
        return [(m["strength"], m["association"]["label"]) for m in found["matches"]]

    assert await strengths({}) == [(2.25, "r"), (0.25, "q")]
    assert await strengths({"since": 0}) == [(0.75, "r"), (0.25, "q")]
    assert await strengths({"until": 150}) == [(1.0, "r")]
    walked = await post(client, "win", "explore", {"origins": ["A"], "since": 150})
    assert walked == {
        "total": 2,
        "matches": [
            {"distance": 1, "path": ["A"], "association": ARB_S2},
            {"distance": 2, "path": ["A", "B"], "association": BQC},
        ],
    }
    assert (await post(client, "win", "explore", {"origins": ["A"], "until": 150}))["total"] == 1


async def test_example_two_paging(client: Client) -> None:
    await win(client)
    first = await post(client, "win", "query", {"label": ["r", "q"], "since": 0, "limit": 1})
    assert first["total"] == 2 and first["matches"] == [BQC]
    cursor = {"weight": 1.0, "subject": "B", "label": "q", "object": "C"}
    second = await post(client, "win", "query", {"label": ["r", "q"], "since": 0, "limit": 1, "after": cursor})
    assert second["total"] == 2
    assert second["matches"] == [assoc("A", "r", "B", 0.75, 2, att("s1", 2.0), att("s2", -0.5))]
    # the cursor's own triple is excluded whatever weight it carries
    odd = {"weight": 0.75, "subject": "B", "label": "q", "object": "C"}
    third = await post(client, "win", "query", {"label": ["r", "q"], "since": 0, "after": odd})
    assert [m["label"] for m in third["matches"]] == []
    # explore pages over the windowed walk; total is the windowed reach on every page
    page = await post(client, "win", "explore", {"origins": ["A"], "since": 150, "limit": 1})
    assert page["total"] == 2 and page["matches"][0]["distance"] == 1
    after = {"distance": 1, "subject": "A", "label": "r", "object": "B"}
    rest = await post(client, "win", "explore", {"origins": ["A"], "since": 150, "limit": 1, "after": after})
    assert rest["total"] == 2 and [m["association"] for m in rest["matches"]] == [BQC]


async def test_dead_zero_sum_and_unsourced_edges(client: Client) -> None:
    await make_context(client, "z")
    rows = [
        {"subject": "a", "label": "r", "object": "b", "weight": 1.0, "source": "p"},
        {"subject": "a", "label": "r", "object": "b", "weight": -1.0, "source": "q"},
        {"subject": "a", "label": "s", "object": "c", "weight": 1.0, "source": "p"},
        {"subject": "a", "label": "u", "object": "d", "weight": 5.0},
    ]
    assert_ok(await client.call("POST", ctx_path("z", "associations"), rows))
    assert_ok(await client.call("POST", ctx_path("z", "sources"), {"passages": {"p": "p。", "q": "q。"}}))
    retract = {"subject": "a", "label": "s", "object": "c"}
    assert_ok(await client.call("POST", ctx_path("z", "associations/retract"), retract))
    plain = await post(client, "z", "recall", {"cue": "a"})
    assert plain["total"] == 3  # the dead edge stays in an unwindowed read
    windowed = await post(client, "z", "recall", {"cue": "a", "since": 0})
    zero = assoc("a", "r", "b", 0.0, 2, att("p", 1.0), att("q", -1.0))
    assert windowed == {"total": 1, "matches": [zero], "plan": {"contexts": ["z"]}}
    assert (await post(client, "z", "explore", {"origins": ["a"], "since": 0}))["matches"][0]["association"] == zero
    assert await post(client, "z", "activate", {"origins": ["a"], "since": 0}) == {"total": 0, "matches": []}


@pytest.mark.parametrize("route", ROUTES)
async def test_window_types(client: Client, route: str) -> None:
    await sake(client)
    path = ctx_path("sake", route)
    for field in ("since", "until"):
        for bad in (-1, 1500.5, 1500.0, "1500", True, 18446744073709551616):
            resp = await client.call("POST", path, {**VALID[route], field: bad})
            assert_error(resp, 422, "malformed_request", prefix=DESER_422)
    top = 18446744073709551615
    assert_ok(await client.call("POST", path, {**VALID[route], "since": top}))
    assert_error(await client.call("POST", path, {**VALID[route], "since": top, "until": top}), 400, "invalid_argument")
    unwindowed = await post(client, "sake", route, VALID[route])
    assert await post(client, "sake", route, {**VALID[route], "since": None, "until": None}) == unwindowed


@pytest.mark.parametrize("route", ROUTES)
async def test_check_order(client: Client, route: str) -> None:
    missing = ctx_path("nope", route)
    body = {**VALID[route], "since": 9, "until": 2}
    assert_error(await client.call("POST", missing, body), 400, "invalid_argument", refused(9, 2))
    assert_error(await client.call("POST", missing, {**VALID[route], "since": 2, "until": 9}), 404, "no_context")
    if route in ("activate", "explore"):
        many = {"origins": [f"o{i}" for i in range(1001)], "since": 9, "until": 2}
        assert_error(await client.call("POST", missing, many), 400, "over_limit")


async def test_query_check_order_and_type_filter(client: Client) -> None:
    await sake(client)
    missing = ctx_path("nope", "query")
    assert_error(
        await client.call("POST", missing, {"since": 9, "until": 2}),
        400,
        "invalid_argument",
        "'subject', 'label', or 'object' must pin at least one value",
    )
    many = [f"T{i}" for i in range(1001)]
    for key in ("subject_types", "object_types"):
        assert_error(
            await client.call("POST", missing, {"subject": "x", key: many, "since": 9, "until": 2}),
            400,
            "over_limit",
            f"{key} carries 1001 items, past the per-request limit of 1000; split the request",
        )
        # a non-empty type filter looks the context up before the window check
        typed = {"subject": "x", key: "T", "since": 9, "until": 2}
        assert_error(await client.call("POST", missing, typed), 404, "no_context", "context 'nope' not found")
    empty = {"subject": "x", "subject_types": [], "since": 9, "until": 2}
    assert_error(await client.call("POST", missing, empty), 400, "invalid_argument", refused(9, 2))
    # no context has a schema: a type filter keeps nothing, windowed or not
    for window in ({}, {"since": 0}):
        found = await post(client, "sake", "query", {"subject": "蔵", "subject_types": ["Brewery"], **window})
        assert found == {"total": 0, "matches": [], "plan": {"contexts": ["sake"]}}
        found = await post(client, "sake", "query", {"subject": "蔵", "object_types": "Person", **window})
        assert found["total"] == 0
    # an empty filter filters nothing
    assert (await post(client, "sake", "query", {"subject": "蔵", "subject_types": []}))["total"] == 4


async def test_mcp_tools_forward_windows(client: Client) -> None:
    await sake(client)
    _s, listed, _h = await client.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    tools = {t["name"]: t["inputSchema"]["properties"] for t in listed["result"]["tools"]}
    for name in ROUTES:
        for key in ("since", "until"):
            assert tools[name][key]["type"] == "integer" and tools[name][key]["minimum"] == 0
    assert tools["query"]["subject_types"]["type"] == ["string", "array"]
    assert "since" not in tools["paths"] and "since" not in tools["describe"]

    async def call(name: str, args: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
        _s, reply, _h = await client.call("POST", "/mcp", body)
        return reply["result"]

    def result(reply: Any) -> Any:
        return json.loads(reply["content"][0]["text"])["result"]

    found = result(await call("query", {"context": "sake", "subject": "蔵", "label": "杜氏", "until": 1500}))
    assert found["total"] == 1 and found["matches"][0]["object"] == "高瀬"
    found = result(
        await call("query", {"context": "sake", "subject": "蔵", "label": "杜氏", "since": 1500, "until": 2500})
    )
    assert found["total"] == 1 and found["matches"][0]["object"] == "青山"
    found = result(await call("query", {"context": "sake", "subject": "蔵", "label": "杜氏", "since": None}))
    assert found["total"] == 2
    assert result(await call("recall", {"context": "sake", "cue": "蔵", "since": 1500}))["total"] == 2
    assert result(await call("activate", {"context": "sake", "origins": ["蔵"], "until": 1500}))["total"] == 2
    assert result(await call("explore", {"context": "sake", "origins": ["蔵"], "until": 1500}))["total"] == 2
    crossed = await call("query", {"contexts": ["sake"], "subject": "蔵", "until": 1500})
    assert crossed["isError"] is True and crossed["structuredContent"]["error"] == CROSS
    typed = result(await call("query", {"context": "sake", "subject": "蔵", "subject_types": ["T"]}))
    assert typed["total"] == 0


# ----- the reference's library-level cases (doc-old dated 100, doc-new 200; "until 150" = {doc-old})


async def library(client: Client, name: str, rows: list[tuple[str, str, str, float, str]]) -> None:
    await make_context(client, name)
    body = [{"subject": s, "label": lab, "object": o, "weight": w, "source": src} for s, lab, o, w, src in rows]
    assert_ok(await client.call("POST", ctx_path(name, "associations"), body))
    passages = {"passages": {"doc-old": "古。", "doc-new": "新。"}, "dates": {"doc-old": 100, "doc-new": 200}}
    assert_ok(await client.call("POST", ctx_path(name, "sources"), passages))


LIBRARY = [
    ("蔵", "杜氏", "高瀬", 1.0, "doc-old"),
    ("蔵", "杜氏", "青山", 1.0, "doc-new"),
    ("蔵", "銘柄", "青嶺", 2.0, "doc-old"),
    ("蔵", "銘柄", "青嶺", 4.0, "doc-new"),
]
OLD = {"until": 150}


async def test_library_hide_reweigh_recall_and_every_source(client: Client) -> None:
    await library(client, "lib", LIBRARY)
    hidden = await post(client, "lib", "query", {"subject": "蔵", "label": "杜氏", **OLD})
    assert [m["object"] for m in hidden["matches"]] == ["高瀬"]
    assert (await post(client, "lib", "query", {"subject": "蔵", "label": "杜氏"}))["total"] == 2
    brand = await post(client, "lib", "query", {"subject": "蔵", "label": "銘柄", **OLD})
    assert brand["matches"] == [assoc("蔵", "銘柄", "青嶺", 2.0, 1, att("doc-old", 2.0))]
    plain = await post(client, "lib", "query", {"subject": "蔵", "label": "銘柄"})
    assert plain["matches"] == [assoc("蔵", "銘柄", "青嶺", 3.0, 2, att("doc-old", 2.0), att("doc-new", 4.0))]
    recalled = await post(client, "lib", "recall", {"cue": "蔵", **OLD})
    assert recalled["total"] == 2
    assert {a["source"] for m in recalled["matches"] for a in m["attributions"]} == {"doc-old"}
    every = await post(client, "lib", "query", {"subject": "蔵", "since": 0})
    assert every == await post(client, "lib", "query", {"subject": "蔵"})
    for route in ROUTES:  # every source eligible: every read as unwindowed
        assert await post(client, "lib", route, {**VALID[route], "since": 100}) == await post(
            client, "lib", route, VALID[route]
        )
    # a passage the graph never attested adds nothing to the window
    stray = {"passages": {"存在しないソース": "無。"}, "dates": {"存在しないソース": 100}}
    assert_ok(await client.call("POST", ctx_path("lib", "sources"), stray))
    again = await post(client, "lib", "query", {"subject": "蔵", "label": "杜氏", **OLD})
    assert [m["object"] for m in again["matches"]] == ["高瀬"]
    # an empty window answers empty everywhere
    for route in ROUTES:
        assert (await post(client, "lib", route, {**VALID[route], "until": 0}))["total"] == 0


async def test_library_walks_do_not_bridge(client: Client) -> None:
    await library(client, "bridge", [("a", "r", "b", 1.0, "doc-new"), ("b", "r", "c", 1.0, "doc-old")])
    assert (await post(client, "bridge", "explore", {"origins": ["a"], **OLD}))["total"] == 0
    assert (await post(client, "bridge", "activate", {"origins": ["a"], "decay": 1.0, **OLD}))["total"] == 0
    from_b = await post(client, "bridge", "activate", {"origins": ["b"], "decay": 1.0, **OLD})
    assert from_b["total"] == 1 and from_b["matches"][0]["association"]["object"] == "c"
    rows = [
        ("蔵", "銘柄", "青嶺", 3.0, "doc-old"),
        ("蔵", "杜氏", "高瀬", 1.0, "doc-old"),
        ("蔵", "杜氏", "高瀬", 9.0, "doc-new"),
    ]
    await library(client, "rank", rows)
    windowed = await post(client, "rank", "activate", {"origins": ["蔵"], **OLD})
    assert windowed["matches"][0]["association"]["label"] == "銘柄"
    plain = await post(client, "rank", "activate", {"origins": ["蔵"]})
    assert plain["matches"][0]["association"]["label"] == "杜氏"


async def test_library_retracted_edge_and_registry_join(client: Client) -> None:
    await library(client, "gone", LIBRARY)
    assert_ok(
        await client.call(
            "POST", ctx_path("gone", "associations/retract"), {"subject": "蔵", "label": "杜氏", "object": "高瀬"}
        )
    )
    assert (await post(client, "gone", "query", {"subject": "蔵", "label": "杜氏", **OLD}))["total"] == 0
    await make_context(client, "join")
    rows = [
        {"subject": "蔵", "label": "杜氏", "object": "高瀬", "weight": 1.0, "source": "doc-old"},
        {"subject": "蔵", "label": "杜氏", "object": "青山", "weight": 1.0, "source": "doc-new"},
        {"subject": "蔵", "label": "幽霊", "object": "無日付", "weight": 1.0, "source": "doc-undated"},
    ]
    assert_ok(await client.call("POST", ctx_path("join", "associations"), rows))
    passages = {"passages": {"doc-old": "古。", "doc-new": "新。"}, "dates": {"doc-old": 100, "doc-new": 200}}
    assert_ok(await client.call("POST", ctx_path("join", "sources"), passages))
    joined = await post(client, "join", "query", {"subject": "蔵", "since": 150})
    assert joined["total"] == 1 and joined["matches"][0]["object"] == "青山"


# ----- store level ------------------------------------------------------------------------------


def random_context(seed: int) -> Context:
    """A random graph over 30 concepts: sources with dates, one without a passage, unsourced weight."""
    rng = random.Random(seed)
    ctx = Context(1, "w", Meta())
    concepts = [f"c{i}" for i in range(30)]
    for k in range(12):
        rows = []
        for _ in range(25):
            s, o = rng.choice(concepts), rng.choice(concepts)
            rows.append((s, rng.choice(["r", "q", "p"]), o, rng.choice([1.0, 2.0, 0.5, -1.0, 3.0]), None))
        source = f"s{k}"
        ctx.assert_many(rows, source)
        if k < 11:
            ctx.store_passage(source, f"text {k}.", [], [], [], [], stored_at=5000, date=None if k == 3 else 100 * k)
    ctx.assert_many([("c0", "r", "c1", 4.0, None)], None)  # type: ignore[arg-type]
    return ctx


def stripped(ctx: Context, view: WindowView) -> Context:
    """The context with every edge reduced to its eligible records (others dead): the windowed graph as a graph."""
    other = copy.deepcopy(ctx)
    other.read_cache.clear()
    counts, sums = view.arrays()
    for e in range(len(other.edges.subject)):
        other.edges.attributions[e] = view.records(e)
        other.edges.count[e] = int(counts[e])
        other.edges.weight[e] = float(sums[e]) if counts[e] else 0.0
    return other


@pytest.mark.parametrize("seed", range(6))
def test_windowed_walks_equal_the_stripped_graph(seed: int) -> None:
    ctx = random_context(seed)
    for window in (Window(None, 500), Window(300, None), Window(200, 800), Window(0, None)):
        view = window_view(ctx, window)
        other = stripped(ctx, view)
        for e in range(len(ctx.edges.subject)):
            assert view.totals(e) == (other.edges.count[e], other.edges.weight[e])
        for origins in (["c0"], ["c5", "c7"], ["c29"]):
            for decay in (0.5, 0.9, 1.0):
                got = windowed_activation(ctx, view, origins, decay, 10)
                assert got == activation(other, origins, decay, 10), (window, origins, decay)
            counts, sums = view.arrays()
            plain = activation_plain(ctx, origins, 0.5, 10, counts.tolist(), sums.tolist())
            assert windowed_activation(ctx, view, origins, 0.5, 10) == plain  # banded and heap walk agree
            want = explored(other, origins, 10, 1000, None)
            assert explored(ctx, origins, 10, 1000, None, view.walk_graph()) == want
            if len(want.matches) > 4:
                m = want.matches[4]
                s, lab, o = ctx.edges.triple(m.edge)
                after = {"distance": m.distance, "subject": ctx.concepts[s], "label": ctx.labels[lab]}
                after["object"] = ctx.concepts[o]
                paged = explored(ctx, origins, 10, 3, after, view.walk_graph())
                assert paged == explored(other, origins, 10, 3, after)


def test_windowed_sum_saturates() -> None:
    ctx = Context(1, "sat", Meta())
    ctx.assert_many([("a", "r", "b", 1.0, None)], "x")
    ctx.assert_many([("a", "r", "b", 1.0, None)], "y")
    ctx.assert_many([("a", "r", "b", 1.0, None)], "z")
    for sid, source in ((0, "x"), (1, "y"), (2, "z")):
        ctx.store_passage(source, "t.", [], [], [], [], stored_at=10, date=None)
        assert ctx.sources[sid] == source
    records = ctx.edges.attributions[0]
    records[0][1], records[1][1], records[2][1] = F64_MAX, F64_MAX, -F64_MAX
    view = WindowView(ctx, Window(0, None))
    assert view.totals(0) == (3, 0.0)  # MAX, then MAX again (clamped), then MAX − MAX
    assert float(view.arrays()[1][0]) == 0.0
    assert WindowView(ctx, Window(0, None)).arrays()[1][0] == 0.0
