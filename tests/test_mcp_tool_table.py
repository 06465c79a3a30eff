"""The MCP tool table: `tools/list` is the reference's list byte for byte (names, order, descriptions, input
schemas, key order), and each tool's arguments become exactly one routed request, with the reference's
routing-time refusals in the reference's check order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Client, load_fixture

from taguru_server.server.mcp.tools import TOOL_BY_NAME, TOOLS, Request

FIXTURE_TOOLS: list[dict[str, Any]] = load_fixture("mcp", "tools_list")["response"]["tools"]


def route(name: str, args: dict[str, Any]) -> Request:
    """The request a tool builds, after asserting its arguments pass its checks."""
    tool = TOOL_BY_NAME[name]
    assert tool.problem(args) is None, (name, tool.problem(args))
    return tool.request(args)


def refusal(name: str, args: Any) -> str | None:
    return TOOL_BY_NAME[name].problem(args if isinstance(args, dict) else {})


def body(request: Request) -> Any:
    assert request.body is not None
    return json.loads(request.body)


def key_paths(value: Any, at: str = "") -> list[str]:
    """Every object key with its place, in document order: equal lists mean equal key order at every depth."""
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append(f"{at}/{k}")
            out.extend(key_paths(v, f"{at}/{k}"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(key_paths(v, f"{at}[{i}]"))
    return out


@pytest.mark.anyio
async def test_tools_list_is_the_reference_list_byte_for_byte(client: Client) -> None:
    status, reply, _h = await client.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert status == 200
    result = reply["result"]
    assert len(result["tools"]) == 55
    assert [t["name"] for t in result["tools"]] == [t["name"] for t in FIXTURE_TOOLS]
    assert result["tools"] == FIXTURE_TOOLS
    assert key_paths(result["tools"]) == key_paths(FIXTURE_TOOLS)
    fixture = load_fixture("mcp", "tools_list")["response"]
    assert list(result) == list(fixture)
    assert {k: v for k, v in result.items() if k not in ("tools", "_meta")} == {
        k: v for k, v in fixture.items() if k not in ("tools", "_meta")
    }
    raw = json.dumps(result["tools"], ensure_ascii=False, separators=(",", ":"))
    assert raw == json.dumps(FIXTURE_TOOLS, ensure_ascii=False, separators=(",", ":"))


def test_every_advertised_tool_but_retrieve_routes_to_a_request() -> None:
    for tool in TOOLS:
        if tool.name == "retrieve":
            assert tool.composed
            continue
        args = {k: "x" for k in tool.required}
        if tool.name == "cite_passage":
            args["paragraph"] = 0
        if tool.cross_path is not None:
            args["context"] = "x"
        request = route(tool.name, args)
        assert request.method in ("GET", "PUT", "PATCH", "POST", "DELETE") and request.path.startswith("/")


def test_every_limit_property_has_a_minimum_of_zero() -> None:
    for tool in FIXTURE_TOOLS:
        limit = tool["inputSchema"]["properties"].get("limit")
        if limit is not None:
            assert limit["minimum"] == 0, tool["name"]


def test_every_schema_required_list_matches_the_routing_gates() -> None:
    for definition in FIXTURE_TOOLS:
        name, schema = definition["name"], definition["inputSchema"]
        if name == "retrieve":
            continue
        gated = list(schema["required"]) + [branch["required"][0] for branch in schema.get("anyOf", [])[:1]]
        full = {k: "x" for k in gated}
        for group in schema.get("allOf", []):  # query: a position and a target; only the target is routing's
            full.update({k: "x" for k in group["anyOf"][0]["required"]})
        problem = refusal(name, full)
        assert problem is None or "missing required argument" not in problem, (name, problem)
        for key in gated:
            missing = refusal(name, {k: v for k, v in full.items() if k != key})
            assert missing is not None and "missing required argument" in missing, (name, key)


def test_search_tools_route_to_the_cross_context_paths_on_contexts() -> None:
    recall = route("recall", {"contexts": ["a", "b"], "cue": "x"})
    assert (recall.method, recall.path, body(recall)) == ("POST", "/recall", {"contexts": ["a", "b"], "cue": "x"})
    assert route("query", {"groups": ["g"], "subject": "s"}).path == "/query"
    assert body(route("search_passages", {"groups": ["g"], "query": "q"})) == {"groups": ["g"], "query": "q"}
    assert route("search_passages", {"contexts": ["a"], "query": "q"}).path == "/sources/search"
    single = route("recall", {"context": "a", "cue": "x"})
    assert (single.path, body(single)) == ("/contexts/a/recall", {"cue": "x"})


def test_search_tools_refuse_an_ambiguous_or_absent_target() -> None:
    for name in ("recall", "query", "search_passages"):
        assert refusal(name, {"context": "a", "contexts": ["b"], "cue": "x", "query": "q"}) == (
            "pass either 'context' or 'contexts'/'groups', not both"
        )
        assert refusal(name, {"context": None, "cue": "x", "query": "q"}) == (
            "missing required argument 'context' (or 'contexts'/'groups', to search several at once)"
        )
        assert refusal(name, {"context": 5, "cue": "x", "query": "q"}) == "argument 'context' must be a string"


def test_promote_routes_dry_run_in_the_query_and_the_rest_in_the_body() -> None:
    promoted = route(
        "promote", {"context": "scratch-claude", "into": "sake", "sources": ["a"], "audit": False, "dry_run": True}
    )
    assert (promoted.path, promoted.query) == ("/contexts/scratch-claude/promote", {"dry_run": "true"})
    assert body(promoted) == {"into": "sake", "sources": ["a"], "audit": False}
    assert refusal("promote", {"context": "s", "sources": ["a"]}) == "missing required argument 'into'"
    assert refusal("promote", {"context": "s", "into": "t", "sources": None}) == "missing required argument 'sources'"
    schema = next(t for t in FIXTURE_TOOLS if t["name"] == "promote")["inputSchema"]
    assert schema["properties"]["sources"]["minItems"] == 1
    assert refusal("promote", {"context": "s", "dry_run": [1]}) == (
        "argument 'dry_run' must be a string, number, or boolean"
    )


def test_unknown_tools_and_missing_arguments_are_refused() -> None:
    assert "no_such_tool" not in TOOL_BY_NAME
    assert refusal("describe", {"concept": "x"}) == "missing required argument 'context'"
    assert refusal("describe", {"context": 7, "concept": "x"}) == "argument 'context' must be a string"
    assert refusal("describe", []) == "missing required argument 'context'"


def test_add_associations_takes_the_array_as_the_whole_body() -> None:
    assert refusal("add_associations", {"context": "c"}) == "missing required argument 'associations'"
    assert refusal("add_associations", {"context": "c", "associations": None}) == (
        "missing required argument 'associations'"
    )
    empty = route("add_associations", {"context": "c", "associations": []})
    assert (empty.method, empty.path, empty.body, empty.content_type) == (
        "POST",
        "/contexts/c/associations",
        b"[]",
        "application/json",
    )
    assert refusal("add_associations", {}) == "missing required argument 'context'"
    assert refusal("audit_consolidation", {}) == "missing required argument 'context'"
    assert refusal("validate_schema", {}) == "missing required argument 'context'"


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("rename_context", "to"),
        ("rename_group", "to"),
        ("store_passages", "passages"),
        ("lookup_passages", "sources"),
        ("resolve", "cue"),
        ("resolve_label", "cue"),
        ("explain_resolve", "expected"),
        ("explain_resolve_label", "cue"),
        ("describe", "concept"),
        ("activate", "origins"),
        ("explore", "origins"),
        ("paths", "targets"),
        ("audit_coverage", "origins"),
        ("retract_source", "source"),
        ("retract_association", "subject"),
        ("retract_association", "label"),
        ("retract_association", "object"),
        ("search_communities", "query"),
        ("explain_search", "source"),
        ("assemble_evidence", "origins"),
        ("put_schema", "schema"),
        ("put_schema", "mode"),
        ("put_schema", "closed_labels"),
        ("put_schema", "types"),
        ("put_schema", "relations"),
        ("validate_schema", "document"),
        ("audit_consolidation", "checks"),
        ("import", "stream"),
    ],
)
def test_schema_required_body_arguments_are_refused_when_omitted(name: str, key: str) -> None:
    required = next(t for t in FIXTURE_TOOLS if t["name"] == name)["inputSchema"]["required"]
    args: dict[str, Any] = {k: "x" for k in required}
    args[key] = None
    assert refusal(name, args) == f"missing required argument '{key}'"


def test_the_five_put_schema_fields_are_checked_in_order_after_the_context() -> None:
    assert refusal("put_schema", {}) == "missing required argument 'context'"
    assert refusal("put_schema", {"context": "c", "relations": {}}) == "missing required argument 'schema'"
    assert refusal("put_schema", {"context": "c", "schema": 1, "types": {}}) == "missing required argument 'mode'"
    full = {"context": "c", "schema": 1, "mode": "strict", "closed_labels": False, "types": {}, "relations": {}}
    put = route("put_schema", {**full, "extra": 1})
    assert (put.method, put.path) == ("PUT", "/contexts/c/schema")
    assert body(put) == {k: v for k, v in full.items() if k != "context"}


def test_cite_passage_takes_paragraph_or_its_deprecated_alias_index() -> None:
    assert refusal("cite_passage", {"context": "sake", "source": "s"}) == (
        "missing required argument 'paragraph' (or its deprecated alias 'index')"
    )
    by_index = route("cite_passage", {"context": "sake", "source": "s", "index": 1})
    assert (by_index.path, body(by_index)) == ("/contexts/sake/citations", {"source": "s", "paragraph": 1})
    both = route("cite_passage", {"context": "sake", "source": "s", "paragraph": 2, "index": 1})
    assert body(both) == {"source": "s", "paragraph": 2}
    schema = next(t for t in FIXTURE_TOOLS if t["name"] == "cite_passage")["inputSchema"]
    assert schema["required"] == ["context", "source"]
    assert schema["anyOf"] == [{"required": ["paragraph"]}, {"required": ["index"]}]


def test_names_are_percent_encoded_into_one_segment() -> None:
    assert (
        route("get_context", {"context": "日本 語/酒"}).path == "/contexts/%E6%97%A5%E6%9C%AC%20%E8%AA%9E%2F%E9%85%92"
    )
    assert route("get_group", {"name": "a b"}).path == "/groups/a%20b"
    renamed = route("rename_context", {"name": "sake", "to": "nihonshu", "context": "ignored"})
    assert (renamed.method, renamed.path, body(renamed)) == ("POST", "/contexts/sake/rename", {"to": "nihonshu"})


def test_query_strings_carry_present_keys_only_and_refuse_arrays() -> None:
    listed = route("list_contexts", {"limit": 50, "after": "sake"})
    assert (listed.method, listed.path, listed.query, listed.body) == (
        "GET",
        "/contexts",
        {"limit": "50", "after": "sake"},
        None,
    )
    assert route("list_contexts", {}).query == {}
    assert route("list_contexts", {"pinned": False}).query == {"pinned": "false"}
    assert route("list_contexts", {"pinned": True, "limit": None}).query == {"pinned": "true"}
    assert refusal("list_contexts", {"limit": [5]}) == "argument 'limit' must be a string, number, or boolean"
    assert route("list_labels", {"context": "sake", "prefix": "産地"}).query == {"prefix": "産地"}
    for name in ("list_sources", "get_aliases"):
        assert route(name, {"context": "c", "prefix": "doc-"}).query == {"prefix": "doc-"}
    changes = route("changes", {"context": "c", "since": "abc", "limit": 5})
    assert (changes.path, changes.query) == ("/contexts/c/changes", {"since": "abc", "limit": "5"})


def test_body_tools_forward_exactly_what_they_advertise() -> None:
    coverage = route("audit_coverage", {"context": "sake", "origins": ["x"], "limit": 500, "junk": 1})
    assert (coverage.path, body(coverage)) == ("/contexts/sake/unreachable_from", {"origins": ["x"], "limit": 500})
    drift = {"unsourced_floor": 0.5, "limit": 3, "after": {"w": 1}, "include_twins": True}
    assert body(route("audit_drift", {"context": "c", **drift, "dice_floor": 0.7, "cosine_floor": 0.8})) == {
        **drift,
        "dice_floor": 0.7,
        "cosine_floor": 0.8,
    }
    after = {"weight": 1.0, "subject": "a", "label": "l", "object": "b", "context": "x"}
    for name, args in (
        ("recall", {"contexts": ["a"], "cue": "c"}),
        ("query", {"context": "c", "subject": "s"}),
        ("explore", {"context": "c", "origins": ["a"]}),
        ("audit_schema", {"context": "c"}),
        ("validate_schema", {"context": "c", "document": {}}),
    ):
        assert body(route(name, {**args, "after": after}))["after"] == after
    for name in ("recall", "query", "activate", "explore"):
        args = {"context": "c", "cue": "x", "origins": ["a"], "since": 1, "until": 2}
        assert {"since": 1, "until": 2}.items() <= body(route(name, args)).items()
    assert body(route("refresh_embeddings", {"context": "c", "junk": 1})) == {}
    for name, method, path in (
        ("delete_context", "DELETE", "/contexts/c"),
        ("delete_group", "DELETE", "/groups/c"),
        ("compact", "POST", "/contexts/c/compact"),
    ):
        request = route(name, {"name": "c", "context": "c"})
        assert (request.method, request.path, request.body) == (method, path, None)
    flush = route("flush", {})
    assert (flush.method, flush.path, flush.body, flush.content_type) == ("POST", "/flush", None, None)
    removed = route("remove_aliases", {"context": "c", "concepts": {"a": "b"}})
    assert (removed.method, body(removed)) == ("DELETE", {"concepts": {"a": "b"}})
    group = route("update_group", {"name": "g", "add_contexts": ["a"], "remove_groups": ["h"], "contexts": ["x"]})
    assert (group.method, body(group)) == ("PATCH", {"add_contexts": ["a"], "remove_groups": ["h"]})
    created = route("create_context", {"name": "n", "description": "d", "pinned": True})
    assert (created.method, created.path, body(created)) == ("PUT", "/contexts/n", {"description": "d", "pinned": True})


def test_explain_tools_route_beside_their_parents() -> None:
    args = {"context": "c", "cue": "q", "expected": "e", "dice_floor": 0.2, "semantic_floor": 0.3, "limit": 4}
    for name, path in (("explain_resolve", "resolve"), ("explain_resolve_label", "resolve_label")):
        request = route(name, args)
        assert request.path == f"/contexts/c/{path}/explain"
        assert body(request) == {k: v for k, v in args.items() if k != "context"}
    search = route("explain_search", {"context": "c", "query": "q", "source": "s", "paragraph": 1, "tags": ["t"]})
    assert (search.path, body(search)) == (
        "/contexts/c/sources/search/explain",
        {"query": "q", "source": "s", "paragraph": 1, "tags": ["t"]},
    )


def test_query_schema_requires_a_position_alongside_a_target() -> None:
    schema = next(t for t in FIXTURE_TOOLS if t["name"] == "query")["inputSchema"]
    assert "anyOf" not in schema and len(schema["allOf"]) == 2
    assert refusal("query", {"context": "c"}) is None  # the route refuses a query with no position


def test_import_routes_the_stream_as_a_raw_body_with_dry_run_in_the_query() -> None:
    schema = next(t for t in FIXTURE_TOOLS if t["name"] == "import")["inputSchema"]
    assert schema["required"] == ["stream"] and set(schema["properties"]) == {"stream", "dry_run"}
    imported = route("import", {"stream": '{"a":1}\n'})
    assert (imported.method, imported.path, imported.query, imported.body, imported.content_type) == (
        "POST",
        "/import",
        {},
        b'{"a":1}\n',
        "application/x-ndjson; charset=utf-8",
    )
    assert route("import", {"stream": "x", "dry_run": True}).query == {"dry_run": "true"}
    assert refusal("import", {"stream": 5}) == "argument 'stream' must be a string"
    assert refusal("import", {"stream": "x" * (32 * 1024 * 1024 + 1)}) == (
        "stream argument is 33554433 bytes, over the 33554432-byte tool limit; split the import or POST the stream "
        "to /import directly"
    )
    assert refusal("import", {"dry_run": [1]}) == "missing required argument 'stream'"


def test_retrieve_is_advertised_with_context_and_origins_required() -> None:
    schema = next(t for t in FIXTURE_TOOLS if t["name"] == "retrieve")["inputSchema"]
    assert schema["required"] == ["context", "origins"]
    assert TOOL_BY_NAME["retrieve"].composed


def test_every_advertised_property_is_routed_and_nothing_else_is() -> None:
    for tool in TOOLS:
        if tool.composed:
            continue
        routed = set(tool.body or ()) | set(tool.query) | {c.split(":")[1] for c in tool.checks if ":" in c}
        routed |= {slot for slot in ("context", "name") if "{" + slot + "}" in tool.path}
        if tool.whole_body is not None:
            routed.add(tool.whole_body)
        if tool.cross_path is not None:
            routed.add("context")
        if tool.name == "cite_passage":
            routed.add("index")  # the deprecated spelling of `paragraph`
        assert routed == set(tool.properties), (tool.name, routed ^ set(tool.properties))
