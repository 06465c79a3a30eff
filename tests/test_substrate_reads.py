"""Read endpoints: refusals (§1, §5, §7-§9), listings and paging, unknown paths, and never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Client
from substrate_support import (
    NO_ROUTE,
    NOT_SUPPORTED,
    assert_error,
    assert_ok,
    ctx_path,
    make_context,
    state,
)

pytestmark = pytest.mark.anyio

TYPE_415 = "Expected request with `Content-Type: application/json`"
PARSE_400 = "Failed to parse the request body as JSON:"
DESER_422 = "Failed to deserialize the JSON body into the target type: "

# every read lane with a valid body
READ_POSTS: list[tuple[str, Any]] = [
    ("resolve", {"cue": "alpha"}),
    ("resolve_label", {"cue": "connects_to"}),
    ("describe", {"concept": "alpha"}),
    ("query", {"subject": "alpha"}),
    ("recall", {"cue": "alpha"}),
    ("activate", {"origins": ["alpha"]}),
    ("sources/lookup", {"sources": ["doc.md"]}),
    ("sources/search", {"query": "alpha"}),
    ("citations", {"source": "doc.md", "paragraph": 0}),
]
READ_GETS = ["labels", "aliases", "sources"]


async def seeded(client: Client, name: str = "r") -> dict[str, Any]:
    await make_context(client, name)
    assert_ok(
        await client.call(
            "POST",
            ctx_path(name, "associations"),
            [
                {
                    "subject": "alpha",
                    "label": "connects_to",
                    "object": "beta",
                    "weight": 2.0,
                    "source": "doc.md",
                    "paragraph": 0,
                }
            ],
        )
    )
    assert_ok(
        await client.call(
            "POST",
            ctx_path(name, "sources"),
            {
                "passages": {"doc.md": "alpha connects to beta."},
                "locators": {"doc.md": [{"paragraph": 0, "locator": {"kind": "page", "value": "1"}}]},
            },
        )
    )
    return await state(client, name)


# ----- the shared refusals of every read lane --------------------------------------------------------


@pytest.mark.parametrize("tail,body", READ_POSTS)
async def test_read_lane_common_refusals(client: Client, tail: str, body: Any) -> None:
    before = await seeded(client)
    path = ctx_path("r", tail)
    assert_ok(await client.call("POST", path, body))
    assert_error(await client.call("POST", ctx_path("nope", tail), body), 404, "no_context", "context 'nope' not found")
    assert_error(await client.call("POST", path, body, content_type=None), 415, "malformed_request", TYPE_415)
    assert_error(await client.call("POST", path, body, content_type="text/plain"), 415, "malformed_request", TYPE_415)
    # a JSON suffix type is still JSON
    assert_ok(await client.call("POST", path, body, content_type="application/json; charset=utf-8"))
    assert_error(await client.call("POST", path, raw=b"{"), 400, "malformed_request", prefix=PARSE_400)
    assert_error(await client.call("POST", path, raw=b""), 400, "malformed_request", prefix=PARSE_400)
    assert_error(await client.call("POST", path, raw=b"{} trailing"), 400, "malformed_request", prefix=PARSE_400)
    assert_error(await client.call("POST", path, [body]), 422, "malformed_request", prefix=DESER_422)
    if tail != "query":  # every query field is optional
        assert_error(await client.call("POST", path, {}), 422, "malformed_request", prefix=DESER_422)
        # shape errors come before the 404
        assert_error(await client.call("POST", ctx_path("nope", tail), {}), 422, "malformed_request")
    # unknown request fields are ignored
    assert_ok(await client.call("POST", path, dict(body, unknown_field=[1, 2])))
    assert await state(client, "r") == before


@pytest.mark.parametrize("tail", READ_GETS)
async def test_listing_common_refusals(client: Client, tail: str) -> None:
    before = await seeded(client)
    assert_error(await client.call("GET", ctx_path("nope", tail)), 404, "no_context", "context 'nope' not found")
    for query in ("limit=abc", "limit=-1", "limit=1.5"):
        assert_error(await client.call("GET", ctx_path("r", tail) + "?" + query), 400, "malformed_request")
    assert_error(
        await client.call("GET", ctx_path("r", tail) + "?after=" + "a" * 1033),
        400,
        "invalid_argument",
        "after is 1033 bytes, over the 1032-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("GET", ctx_path("r", tail) + "?prefix=" + "a" * 1033),
        400,
        "invalid_argument",
        "prefix is 1033 bytes, over the 1032-byte cap; nothing was applied",
    )
    # the cursor check is a handler 400, so it comes before the 404
    assert_error(await client.call("GET", ctx_path("nope", tail) + "?prefix=" + "a" * 1033), 400, "invalid_argument")
    assert await state(client, "r") == before


# ----- specific refusals ---------------------------------------------------------------------------------


async def test_resolve_refusals(client: Client) -> None:
    await seeded(client)
    for tail in ("resolve", "resolve_label"):
        path = ctx_path("r", tail)
        for body in (
            {"cue": 5},
            {"cue": None},
            {"cue": "a", "limit": -1},
            {"cue": "a", "limit": 1.5},
            {"cue": "a", "limit": "5"},
            {"cue": "a", "dice_floor": "x"},
            {"cue": "a", "semantic_floor": [0.3]},
        ):
            assert_error(await client.call("POST", path, body), 422, "malformed_request", prefix=DESER_422)
        # limits past the ceiling clamp
        assert isinstance(assert_ok(await client.call("POST", path, {"cue": "alpha", "limit": 5000000000})), list)


async def test_query_and_recall_refusals(client: Client) -> None:
    await seeded(client)
    path = ctx_path("r", "query")
    for body in ({}, {"limit": 5}, {"after": None, "subject": None}):
        assert_error(
            await client.call("POST", path, body),
            400,
            "invalid_argument",
            "'subject', 'label', or 'object' must pin at least one value",
        )
    assert_error(await client.call("POST", ctx_path("nope", "query"), {}), 400, "invalid_argument")
    for key in ("subject", "label", "object"):
        assert_error(
            await client.call("POST", path, {key: ["x"] * 1001}),
            400,
            "over_limit",
            f"{key} carries 1001 items, past the per-request limit of 1000; split the request",
        )
    assert_ok(await client.call("POST", path, {"subject": ["x"] * 1000}))
    bad_shapes = [
        {"subject": 5},
        {"subject": [1]},
        {"subject": {"a": 1}},
        {"subject": "alpha", "limit": -1},
        {"subject": "alpha", "limit": 2.0},
        {"subject": "alpha", "after": "cursor"},
        {"subject": "alpha", "after": {"weight": 1.0, "subject": "a", "label": "b"}},
        {"subject": "alpha", "after": {"subject": "a", "label": "b", "object": "c"}},
        {"subject": "alpha", "after": {"weight": "1", "subject": "a", "label": "b", "object": "c"}},
        {"subject": "alpha", "after": {"weight": 1.0, "subject": "a", "label": "b", "object": "c", "x": 1}},
    ]
    for body in bad_shapes:
        assert_error(await client.call("POST", path, body), 422, "malformed_request", prefix=DESER_422)
    # a shape error wins over the over_limit and the unpinned 400
    assert_error(await client.call("POST", path, {"subject": ["x"] * 1001, "limit": -1}), 422, "malformed_request")
    assert_error(await client.call("POST", path, {"limit": -1}), 422, "malformed_request")
    recall = ctx_path("r", "recall")
    for body in (
        {"cue": 1},
        {"cue": ["alpha"]},
        {"cue": "alpha", "limit": -5},
        {"cue": "alpha", "after": {"weight": 1}},
    ):
        assert_error(await client.call("POST", recall, body), 422, "malformed_request", prefix=DESER_422)


async def test_activate_refusals(client: Client) -> None:
    await seeded(client)
    path = ctx_path("r", "activate")
    for body in (
        {"origins": "alpha"},
        {"origins": [1]},
        {"origins": ["alpha"], "decay": "x"},
        {"origins": ["alpha"], "limit": -1},
        {"origins": None},
    ):
        assert_error(await client.call("POST", path, body), 422, "malformed_request", prefix=DESER_422)
    assert_error(
        await client.call("POST", path, {"origins": ["x"] * 1001}),
        400,
        "over_limit",
        "origins carries 1001 items, past the per-request limit of 1000; split the request",
    )
    assert_error(await client.call("POST", ctx_path("nope", "activate"), {"origins": ["x"] * 1001}), 400, "over_limit")
    assert_error(await client.call("POST", path, {"origins": ["x"] * 1001, "limit": -1}), 422, "malformed_request")


async def test_lookup_refusals(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("r", "sources/lookup")
    assert_error(
        await client.call("POST", path, {"sources": ["x"] * 1001}),
        400,
        "over_limit",
        "sources carries 1001 items, past the per-request limit of 1000; split the request",
    )
    assert_error(
        await client.call("POST", path, {"sources": ["doc.md", ""]}),
        400,
        "invalid_argument",
        "source must not be empty; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"sources": ["s" * 1025]}),
        400,
        "invalid_argument",
        "source is 1025 bytes, over the 1024-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("POST", ctx_path("nope", "sources/lookup"), {"sources": [""]}), 400, "invalid_argument"
    )
    for body in ({"sources": "doc.md"}, {"sources": [1]}, {"source": ["doc.md"]}):
        assert_error(await client.call("POST", path, body), 422, "malformed_request", prefix=DESER_422)
    assert assert_ok(await client.call("POST", path, {"sources": ["zz", "doc.md", "aa"]})) == {
        "passages": {"doc.md": "alpha connects to beta."},
        "missing": ["zz", "aa"],
    }
    assert assert_ok(await client.call("POST", path, {"sources": []})) == {"passages": {}, "missing": []}
    assert await state(client, "r") == before


async def test_citations_refusals_and_results(client: Client) -> None:
    before = await seeded(client)
    assert_ok(
        await client.call(
            "POST",
            ctx_path("r", "sources"),
            {"passages": {"two.md": "first\n\nsecond"}, "sections": {"two.md": [{"paragraph": 0, "section": "Top"}]}},
        )
    )
    before = await state(client, "r")
    path = ctx_path("r", "citations")
    assert assert_ok(await client.call("POST", path, {"source": "doc.md", "paragraph": 0})) == {
        "text": "alpha connects to beta.",
        "source": "doc.md",
        "section": None,
        "locator": {"kind": "page", "value": "1"},
    }
    # `index` is the deprecated spelling of `paragraph`; section runs on to later paragraphs
    assert assert_ok(await client.call("POST", path, {"source": "two.md", "index": 1})) == {
        "text": "second",
        "source": "two.md",
        "section": "Top",
        "locator": None,
    }
    assert_error(
        await client.call("POST", path, {"source": "two.md", "index": 1, "paragraph": 1}),
        422,
        "malformed_request",
        prefix=DESER_422,
    )
    for body in (
        {"source": "two.md"},
        {"paragraph": 0},
        {"source": "two.md", "paragraph": -1},
        {"source": "two.md", "paragraph": 0.0},
        {"source": "two.md", "paragraph": "0"},
        {"source": 1, "paragraph": 0},
        {"source": "two.md", "paragraph": 4294967296},
    ):
        assert_error(await client.call("POST", path, body), 422, "malformed_request", prefix=DESER_422)
    assert_error(
        await client.call("POST", path, {"source": "", "paragraph": 0}),
        400,
        "invalid_argument",
        "source must not be empty; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"source": "s" * 1025, "paragraph": 0}),
        400,
        "invalid_argument",
        "source is 1025 bytes, over the 1024-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("POST", ctx_path("nope", "citations"), {"source": "two.md", "paragraph": 0}),
        404,
        "no_context",
        "context 'nope' not found",
    )
    assert_error(
        await client.call("POST", path, {"source": "zz.md", "paragraph": 0}),
        404,
        "no_source",
        "source 'zz.md' not found in context 'r'",
    )
    assert_error(
        await client.call("POST", path, {"source": "two.md", "paragraph": 2}),
        404,
        "no_paragraph",
        "paragraph 2 out of range for source 'two.md' in context 'r'",
    )
    assert_error(
        await client.call("POST", path, {"source": "two.md", "paragraph": 4294967295}),
        404,
        "no_paragraph",
        "paragraph 4294967295 out of range for source 'two.md' in context 'r'",
    )
    # a source the graph knows but without a passage has nothing to cite
    assert_ok(
        await client.call(
            "POST",
            ctx_path("r", "associations"),
            [{"subject": "x", "label": "y", "object": "z", "weight": 1, "source": "graph-only"}],
        )
    )
    assert_error(
        await client.call("POST", path, {"source": "graph-only", "paragraph": 0}),
        404,
        "no_source",
        "source 'graph-only' not found in context 'r'",
    )
    assert (await state(client, "r"))["stats"]["sources"] == before["stats"]["sources"] + 1


# ----- listings and paging -------------------------------------------------------------------------------


async def test_labels_paging(client: Client) -> None:
    await make_context(client, "l")
    assert_ok(
        await client.call(
            "POST",
            ctx_path("l", "associations"),
            [{"subject": "s", "label": lab, "object": "o", "weight": 1} for lab in ("b", "a", "c", "ab")],
        )
    )
    # a label without live edges is still listed; a label alias is not
    assert_ok(
        await client.call("POST", ctx_path("l", "associations/retract"), {"subject": "s", "label": "c", "object": "o"})
    )
    assert_ok(await client.call("POST", ctx_path("l", "aliases"), {"labels": {"AA": "a"}}))

    async def page(query: str) -> Any:
        return assert_ok(await client.call("GET", ctx_path("l", "labels") + query))

    assert await page("") == {"total": 4, "labels": ["a", "ab", "b", "c"]}
    assert await page("?limit=2") == {"total": 4, "labels": ["a", "ab"]}
    assert await page("?limit=2&after=ab") == {"total": 4, "labels": ["b", "c"]}
    assert await page("?after=c") == {"total": 4, "labels": []}
    assert await page("?after=aa") == {"total": 4, "labels": ["ab", "b", "c"]}
    assert await page("?prefix=a") == {"total": 2, "labels": ["a", "ab"]}
    assert await page("?prefix=a&after=a") == {"total": 2, "labels": ["ab"]}
    assert await page("?limit=0") == {"total": 4, "labels": ["a"]}
    assert await page("?limit=5000000000") == {"total": 4, "labels": ["a", "ab", "b", "c"]}
    assert await page("?prefix=zz") == {"total": 0, "labels": []}


async def test_aliases_paging(client: Client) -> None:
    await make_context(client, "al")
    assert_ok(
        await client.call(
            "POST", ctx_path("al", "associations"), [{"subject": "a", "label": "r", "object": "b", "weight": 1}]
        )
    )
    assert_ok(
        await client.call(
            "POST",
            ctx_path("al", "aliases"),
            {"concepts": {"B": "b", "A": "a", "AB": "a"}, "labels": {"R": "r", "A-rel": "r"}},
        )
    )

    async def page(query: str) -> Any:
        return assert_ok(await client.call("GET", ctx_path("al", "aliases") + query))

    assert await page("") == {
        "total": 5,
        "concepts": {"A": "a", "AB": "a", "B": "b"},
        "labels": {"A-rel": "r", "R": "r"},
    }
    assert await page("?limit=2") == {"total": 5, "concepts": {"A": "a", "AB": "a"}, "labels": {}}
    assert await page("?limit=2&after=concept:AB") == {"total": 5, "concepts": {"B": "b"}, "labels": {"A-rel": "r"}}
    assert await page("?after=concept:B") == {"total": 5, "concepts": {}, "labels": {"A-rel": "r", "R": "r"}}
    assert await page("?after=label:A-rel") == {"total": 5, "concepts": {}, "labels": {"R": "r"}}
    assert await page("?after=label:R") == {"total": 5, "concepts": {}, "labels": {}}
    assert await page("?prefix=A") == {"total": 3, "concepts": {"A": "a", "AB": "a"}, "labels": {"A-rel": "r"}}
    assert await page("?prefix=A&after=concept:A&limit=1") == {"total": 3, "concepts": {"AB": "a"}, "labels": {}}
    assert await page("?limit=0") == {"total": 5, "concepts": {"A": "a"}, "labels": {}}
    text = "after must be 'concept:<alias>' or 'label:<alias>' — the last entry of the previous page"
    for after in ("A", "alias:A", "concepts:A", ":A"):
        assert_error(
            await client.call("GET", ctx_path("al", "aliases") + "?after=" + after), 400, "invalid_argument", text
        )


async def test_sources_paging(client: Client) -> None:
    await make_context(client, "sp")
    assert_ok(
        await client.call(
            "POST",
            ctx_path("sp", "sources"),
            {
                "passages": {"b.md": "b", "a.md": "a", "c/d.md": "c", "ab.md": ""},
                "tags": {"a.md": ["z", "y"]},
                "dates": {"b.md": 5},
            },
        )
    )
    # a source only the graph knows is not listed
    assert_ok(
        await client.call(
            "POST",
            ctx_path("sp", "associations"),
            [{"subject": "x", "label": "r", "object": "y", "weight": 1, "source": "aa.md"}],
        )
    )

    async def page(query: str) -> Any:
        return assert_ok(await client.call("GET", ctx_path("sp", "sources") + query))

    full = await page("")
    assert full["total"] == 4 and full["sources"] == ["a.md", "ab.md", "b.md", "c/d.md"]
    by_name = {e["name"]: e for e in full["entries"]}
    assert by_name["a.md"]["tags"] == ["y", "z"] and "date" not in by_name["a.md"]
    assert by_name["b.md"]["date"] == 5 and "tags" not in by_name["b.md"]
    assert all(isinstance(e["stored_at"], int) for e in full["entries"])
    assert [e["name"] for e in full["entries"]] == full["sources"]
    assert (await page("?limit=1"))["sources"] == ["a.md"]
    assert (await page("?limit=2&after=ab.md"))["sources"] == ["b.md", "c/d.md"]
    p = await page("?prefix=a")
    assert (p["total"], p["sources"]) == (2, ["a.md", "ab.md"])
    p = await page("?prefix=a&after=a.md")
    assert (p["total"], p["sources"], len(p["entries"])) == (2, ["ab.md"], 1)
    p = await page("?limit=0&after=b.md")
    assert (p["total"], p["sources"]) == (4, ["c/d.md"])


async def test_contexts_listing(client: Client) -> None:
    for name in ("c3", "c1", "c2"):
        await make_context(client, name, {"pinned": name == "c2"})

    async def names(query: str) -> tuple[int, list[str]]:
        result = assert_ok(await client.call("GET", "/contexts" + query))
        return result["total"], [c["name"] for c in result["contexts"]]

    assert await names("") == (3, ["c1", "c2", "c3"])
    assert await names("?limit=1") == (3, ["c1"])
    assert await names("?limit=0") == (3, ["c1"])
    assert await names("?after=c1") == (3, ["c2", "c3"])
    assert await names("?pinned=true") == (1, ["c2"])
    assert await names("?pinned=false&after=c1") == (2, ["c3"])
    assert await names("?after=c3") == (3, [])
    assert_error(await client.call("GET", "/contexts?pinned=yes"), 400, "malformed_request")
    assert_error(await client.call("GET", "/contexts?limit=x"), 400, "malformed_request")
    entry = assert_ok(await client.call("GET", "/contexts?limit=1"))["contexts"][0]
    assert set(entry) == {
        "name",
        "description",
        "pinned",
        "loaded",
        "dice_floor",
        "semantic_floor",
        "stats",
        "usage",
        "revision",
        "schema_mode",
    }


# ----- search refusals --------------------------------------------------------------------------------


async def test_search_refusals_in_order(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("r", "sources/search")
    for body in (
        {"query": 1},
        {},
        {"query": "a", "tags": "x"},
        {"query": "a", "tags": [1]},
        {"query": "a", "since": -1},
        {"query": "a", "until": 1.5},
        {"query": "a", "limit": -1},
        {"query": "a", "semantic_floor": "x"},
        {"query": "a", "since": 18446744073709551616},
    ):
        assert_error(await client.call("POST", path, body), 422, "malformed_request", prefix=DESER_422)
    assert_error(
        await client.call("POST", path, {"query": "a", "tags": ["t"] * 1001}),
        400,
        "over_limit",
        "tags carries 1001 items, past the per-request limit of 1000; split the request",
    )
    assert_error(
        await client.call("POST", path, {"query": "a", "tags": ["", "t"]}),
        400,
        "invalid_argument",
        "a filter tag must not be empty; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"query": "a", "tags": ["t" * 129]}),
        400,
        "invalid_argument",
        "a filter tag is 129 bytes, over the 128-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"query": "a", "since": 5, "until": 5}),
        400,
        "invalid_argument",
        "since 5 is not before until 5 — the window is half-open [since, until) and this one selects nothing",
    )
    assert_error(
        await client.call("POST", path, {"query": "a", "since": 9, "until": 2}),
        400,
        "invalid_argument",
        "since 9 is not before until 2 — the window is half-open [since, until) and this one selects nothing",
    )
    distinct = [f"t{i}" for i in range(33)]
    assert_error(
        await client.call("POST", path, {"query": "a", "tags": distinct}),
        400,
        "over_limit",
        "33 distinct filter tags where at most 32 may be named",
    )
    # 40 tags naming 32 distinct ones are fine
    assert_ok(await client.call("POST", path, {"query": "a", "tags": distinct[:32] + distinct[:8]}))
    # order: over_limit on the raw list, then each tag, then the window, then the distinct count, then 404
    assert_error(await client.call("POST", path, {"query": "a", "tags": [""] * 1001}), 400, "over_limit")
    assert_error(
        await client.call("POST", path, {"query": "a", "tags": distinct + [""], "since": 3, "until": 1}),
        400,
        "invalid_argument",
        "a filter tag must not be empty; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"query": "a", "tags": distinct, "since": 3, "until": 1}),
        400,
        "invalid_argument",
        prefix="since 3 is not before until 1",
    )
    assert_error(
        await client.call("POST", ctx_path("nope", "sources/search"), {"query": "a", "tags": distinct}),
        400,
        "over_limit",
    )
    assert_error(
        await client.call("POST", ctx_path("nope", "sources/search"), {"query": "a", "tags": ["t"]}),
        404,
        "no_context",
        "context 'nope' not found",
    )
    assert await state(client, "r") == before


# ----- unknown paths and methods ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,uri",
    [
        ("GET", "/nope"),
        ("POST", "/nope/deeper?x=1"),
        ("GET", "/contexts/a/b/c/d"),
        ("GET", "/contexts/r/unknown"),
        ("POST", "/contexts/a%2Fb/nope"),
        ("GET", "/"),
        ("DELETE", "/contexts/r/labels/x"),
        ("GET", "/health/extra"),
    ],
)
async def test_unknown_path(client: Client, method: str, uri: str) -> None:
    await seeded(client)
    assert_error(await client.call(method, uri), 404, "unknown_path", NO_ROUTE.format(m=method, u=uri))


@pytest.mark.parametrize(
    "method,uri",
    [
        ("POST", "/contexts"),
        ("DELETE", "/contexts"),
        ("POST", "/contexts/r"),
        ("GET", "/contexts/r/associations"),
        ("PUT", "/contexts/r/associations"),
        ("GET", "/contexts/r/resolve"),
        ("PATCH", "/contexts/r/aliases"),
        ("GET", "/import"),
        ("PUT", "/import?dry_run=true"),
        ("POST", "/contexts/r/labels"),
        ("POST", "/health"),
        ("DELETE", "/version"),
        ("PUT", "/live"),
        ("POST", "/metrics"),
    ],
)
async def test_method_not_allowed(client: Client, method: str, uri: str) -> None:
    await seeded(client)
    assert_error(
        await client.call(method, uri, content_type=None),
        405,
        "method_not_allowed",
        NOT_SUPPORTED.format(m=method, u=uri),
    )


async def test_nesting_past_serde_limit_is_400(client: Client) -> None:
    await seeded(client)
    path = ctx_path("r", "activate")
    # 128 levels parse (the shape is then wrong: 422); 129 is serde_json's recursion limit (400)
    assert_error(
        await client.call("POST", path, raw=b'{"origins":' + b"[" * 127 + b"]" * 127 + b"}"), 422, "malformed_request"
    )
    assert_error(
        await client.call("POST", path, raw=b'{"origins":' + b"[" * 128 + b"]" * 128 + b"}"),
        400,
        "malformed_request",
        prefix=PARSE_400,
    )
    assert_error(
        await client.call("POST", ctx_path("r", "associations"), raw=b"[" * 129 + b"]" * 129),
        400,
        "malformed_request",
        prefix=PARSE_400,
    )
    assert assert_ok(await client.call("POST", ctx_path("r", "associations"), raw=b"[]")) == 0


async def test_refusals_never_echo_passage_or_query_text(client: Client) -> None:
    await seeded(client)
    secret = "SECRET-TEXT-7f3a"
    responses = [
        await client.call("POST", ctx_path("r", "sources"), {"passages": {"d": secret}, "dates": {"d": "x"}}),
        await client.call(
            "POST",
            ctx_path("r", "sources"),
            {"passages": {"d": secret}, "extra": 1, "questions": {"d": [{"paragraph": -1, "question": secret}]}},
        ),
        await client.call("POST", ctx_path("r", "sources/search"), {"query": secret, "since": 5, "until": 1}),
        await client.call("POST", ctx_path("r", "sources/search"), {"query": secret, "limit": -1}),
        await client.call("POST", ctx_path("r", "resolve"), {"cue": secret, "limit": 1.5}),
        await client.call("POST", ctx_path("r", "query"), {"subject": [secret] * 1001}),
        await client.call("POST", ctx_path("nope", "sources/search"), {"query": secret}),
        await client.call(
            "POST", ctx_path("r", "associations"), [{"subject": secret, "label": "", "object": "o", "weight": 1}]
        ),
        await client.call(
            "POST",
            "/import",
            raw='{"taguru_batch":1,"context":"r","source":"s"}\n'
            f'{{"passage":"{secret}"}}\n'
            '{"subject":"a","label":"b","object":"c","weight":1e9}\n',
            content_type=None,
        ),
    ]
    for status, body, _h in responses:
        assert status >= 400, body
        assert secret not in json.dumps(body, ensure_ascii=False), body


async def test_probes(client: Client) -> None:
    status, body, _h = await client.call("GET", "/health")
    assert status == 200 and body["status"] == "ok" and isinstance(body["version"], str)
    status, body, _h = await client.call("GET", "/live")
    assert (status, body) == (200, "ok")
    status, body, _h = await client.call("GET", "/version")
    assert status == 200 and body["http_contract"] == {"current": 1, "supported": [1]}
    assert body["batch_formats"] == [1] and body["communities_formats"] == [1]
    status, body, headers = await client.call("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")


# ----- never a 500 --------------------------------------------------------------------------------------

ODD_BODIES: list[bytes] = [
    b"null",
    b"[]",
    b"{}",
    b'"x"',
    b"1",
    b"-0",
    b"1e400",
    b"true",
    b"[null]",
    b'{"a":',
    b"\xff\xfe",
    b"\x00",
    b"[" * 5000 + b"]" * 5000,
    b'{"x":' * 120 + b"1" + b"}" * 120,
    b'{"x":' * 300 + b"1" + b"}" * 300,
    b'{"cue":' + b"[" * 700 + b"]" * 700 + b"}",
    b'{"cue":' + b"[" * 990 + b"]" * 990 + b"}",
    b'{"origins":' + b"[" * 127 + b"]" * 127 + b"}",
    b'{"subject":{"a":[1,{"b":null}]},"cue":[],"origins":{},"query":[],"source":[],"sources":{},'
    b'"concept":1,"paragraph":-1,"index":-1,"limit":1e300,"after":[],"decay":"x","tags":{},"since":-1,'
    b'"until":1e400,"passages":[],"concepts":[],"labels":{"a":1},"description":[],"pinned":1}',
    b'{"passages":{"d":"x"},"questions":{"d":{"a":1}},"sections":[],"locators":{"d":[{"paragraph":0,'
    b'"locator":[]}]},"tags":{"d":"x"},"dates":{"d":"x"}}',
    b'[{"subject":"a","label":"b","object":"c","weight":1e308},{"subject":"a","label":"b","object":"c",'
    b'"weight":-1e308},{"subject":"a","label":"b","object":"c","weight":1e308}]',
    b'{"subject":"a","after":{"weight":1e308,"subject":"a","label":"b","object":"c"}}',
    '{"cue":"\u0000\ud7ff\U0001f600ｱｲｳ","concept":"ΑΣ","query":"AppState HTTPServer","origins":["ΑΣ"]}'.encode(),
    b'{"cue":"\\ud800"}',
]


SUBSTRATE_ROUTES = [
    ("PUT", ""),
    ("PATCH", ""),
    ("GET", ""),
    ("POST", "associations"),
    ("POST", "associations/retract"),
    ("POST", "aliases"),
    ("DELETE", "aliases"),
    ("GET", "aliases"),
    ("GET", "labels"),
    ("POST", "sources"),
    ("GET", "sources"),
    ("POST", "sources/lookup"),
    ("POST", "sources/search"),
    ("POST", "sources/retract"),
    ("POST", "citations"),
    ("POST", "resolve"),
    ("POST", "resolve_label"),
    ("POST", "describe"),
    ("POST", "query"),
    ("POST", "recall"),
    ("POST", "activate"),
]


async def test_never_a_500(client: Client) -> None:
    await seeded(client)
    for name in ("r", "nope", "a/b"):
        for method, tail in SUBSTRATE_ROUTES:
            for raw in ODD_BODIES:
                for ct in ("application/json", None):
                    status, body, _h = await client.call(method, ctx_path(name, tail), raw=raw, content_type=ct)
                    assert status < 500, (method, name, tail, raw[:40], body)
                    if status != 200:
                        assert body["status"] == "error" and body["code"], body
    for raw in ODD_BODIES:
        status, body, _h = await client.call("POST", "/import", raw=raw, content_type=None)
        assert status == 400 and body["code"] == "malformed_request", (raw[:40], body)
    assert_ok(await client.call("DELETE", ctx_path("r"), raw=b"[", content_type=None))
