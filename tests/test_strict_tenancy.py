"""TAGURU_STRICT_TENANCY: what a key with a context list can learn about groups, with the setting on and off.

Every probe runs against two servers that differ only in the groups outside the scoped keys' grant
("full" holds them, "bare" does not): with strict tenancy the two answers are the same bytes (apart
from the envelope's `time`) and carry no out-of-scope context name and no hidden group name or
description the request did not itself carry. With the setting off the reference's answers stay,
and the probes marked as leaking do tell the two servers apart, so the strict assertions are not
vacuous.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client, check_against_openapi, start_client
from substrate_support import assert_error, ctx_path, make_context

from taguru_server.cli.envcheck import unknown
from taguru_server.server.config import ConfigError, load_settings
from taguru_server.store.persist.groups import GroupRecord, visible_groups

pytestmark = pytest.mark.anyio

TOKENS = {"boss": "atok", "reader": "rtok", "potter": "stok", "porter": "ptok"}
SCOPES = {
    "reader": "read",  # unscoped: sees everything in both modes
    "potter": {"role": "write", "contexts": ["sake"]},
    "porter": {"role": "admin", "contexts": ["sake"]},
}
OUTSIDE_CONTEXTS = ("bunko",)
# groups a key scoped to `sake` must not see: bundling `bunko`, mixed, empty, or only through a child
HIDDEN: dict[str, dict[str, Any]] = {
    "h-mixed": {"description": "secret-mixed", "contexts": ["sake", "bunko"]},
    "h-theirs": {"description": "secret-theirs", "contexts": ["bunko"]},
    "h-nest": {"description": "secret-nest", "groups": ["h-mixed"]},
    "h-blank": {"description": "secret-blank"},
    "h-wrapper": {"description": "secret-wrapper", "contexts": ["bunko"], "groups": ["ours"]},
}
SECRETS = (*HIDDEN, *(g["description"] for g in HIDDEN.values()))
VISIBLE: dict[str, dict[str, Any]] = {
    "ours": {"description": "ours-desc", "contexts": ["sake"]},
    "leaf": {"contexts": ["sake"]},
    "deep": {"contexts": ["sake"], "groups": ["leaf"]},
}
TIME = re.compile(rb'(\\?"time\\?":)-?[0-9][0-9.eE+-]*')


def _ok(resp: tuple[int, Any, dict[str, str]]) -> Any:
    status, body, _h = resp
    assert status == 200, body
    return body["result"]


@attrs.frozen
class World:
    client: Client
    server: TestServer
    session: ClientSession

    async def raw(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, bytes]:
        """The answer's status and body bytes, `time` blanked (the only field two equal answers may differ in)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = None
        if body is not None:
            if isinstance(body, bytes):
                data, headers["Content-Type"] = body, "application/x-ndjson"
            else:
                data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        async with self.client.session.request(method, self.client.base + path, data=data, headers=headers) as resp:
            text = await resp.read()
            if resp.content_type == "application/json":
                check_against_openapi(method, path, resp.status, json.loads(text))
            return resp.status, TIME.sub(rb"\g<1>0", text)


async def _world(settings_factory: Any, tmp_path: Path, label: str, strict: bool, hidden: bool) -> World:
    env = {
        "TAGURU_DATA_DIR": str(tmp_path / label),
        "TAGURU_API_TOKENS": ",".join(f"{k}:{v}" for k, v in TOKENS.items()),
        "TAGURU_KEY_SCOPES": json.dumps(SCOPES),
    }
    if strict:
        env["TAGURU_STRICT_TENANCY"] = "1"
    server, client, session = await start_client(settings_factory(**env))
    for name in ("sake", "bunko"):
        await make_context(client, name, token="atok")
        assoc = [{"subject": "蔵", "label": "在庫", "object": f"{name}-x", "weight": 1.0, "source": "s.md"}]
        _ok(await client.call("POST", ctx_path(name, "associations"), assoc, token="atok"))
        _ok(await client.call("POST", ctx_path(name, "sources"), {"passages": {"s.md": "蔵元"}}, token="atok"))
    for name, body in VISIBLE.items():
        _ok(await client.call("PUT", f"/groups/{name}", body, token="atok"))
    if hidden:
        for name, body in HIDDEN.items():
            _ok(await client.call("PUT", f"/groups/{name}", body, token="atok"))
    # a visible group whose one child is outside the view (a group without a member context)
    _ok(await client.call("PUT", "/groups/shelf", {"contexts": ["sake"]}, token="atok"))
    if hidden:
        _ok(await client.call("PATCH", "/groups/shelf", {"add_groups": ["h-blank"]}, token="atok"))
    return World(client, server, session)


@pytest.fixture
async def worlds(request: Any, settings_factory: Any, tmp_path: Path) -> AsyncIterator[tuple[World, World]]:
    strict = request.param
    full = await _world(settings_factory, tmp_path, "full", strict, hidden=True)
    bare = await _world(settings_factory, tmp_path, "bare", strict, hidden=False)
    try:
        yield full, bare
    finally:
        for w in (full, bare):
            await w.session.close()
            await w.server.close()


def _mcp(tool: str, args: dict[str, Any]) -> tuple[str, str, Any]:
    return (
        "POST",
        "/mcp",
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": args}},
    )


def _line(**record: Any) -> bytes:
    return json.dumps({"taguru_group": 1, **record}).encode() + b"\n"


RECALL = {"cue": "蔵"}
QUERY = {"subject": "蔵"}
SEARCH = {"query": "蔵元"}
# (id, token, (method, path, body), leaks with the reference's behaviour)
PROBES: list[tuple[str, str, tuple[str, str, Any], bool]] = [
    ("list", "stok", ("GET", "/groups", None), True),
    ("list-page", "stok", ("GET", "/groups?limit=2&after=deep", None), True),
    ("get-mixed", "stok", ("GET", "/groups/h-mixed", None), True),
    ("get-theirs", "stok", ("GET", "/groups/h-theirs", None), True),
    ("get-nest", "stok", ("GET", "/groups/h-nest", None), True),
    ("get-blank", "stok", ("GET", "/groups/h-blank", None), True),
    ("get-wrapper", "stok", ("GET", "/groups/h-wrapper", None), True),
    ("get-shelf", "stok", ("GET", "/groups/shelf", None), True),
    ("get-ours", "stok", ("GET", "/groups/ours", None), False),
    ("export-mixed", "stok", ("GET", "/groups/h-mixed/export", None), True),
    ("export-blank", "stok", ("GET", "/groups/h-blank/export", None), True),
    ("export-shelf", "stok", ("GET", "/groups/shelf/export", None), True),
    ("put-child-nest", "stok", ("PUT", "/groups/fresh", {"contexts": ["sake"], "groups": ["h-nest"]}), True),
    ("put-child-blank", "stok", ("PUT", "/groups/fresh", {"contexts": ["sake"], "groups": ["h-blank"]}), True),
    ("put-outside-context", "stok", ("PUT", "/groups/fresh", {"contexts": ["sake", "bunko"]}), True),
    ("put-visible", "stok", ("PUT", "/groups/fresh", {"groups": ["deep"]}), False),
    ("patch-mixed", "stok", ("PATCH", "/groups/h-mixed", {"description": "mine now"}), True),
    ("patch-blank", "stok", ("PATCH", "/groups/h-blank", {"add_contexts": ["sake"]}), True),
    ("patch-add-theirs", "stok", ("PATCH", "/groups/ours", {"add_groups": ["h-theirs"]}), True),
    ("patch-remove-theirs", "stok", ("PATCH", "/groups/ours", {"remove_groups": ["h-theirs"]}), True),
    ("patch-remove-blank", "stok", ("PATCH", "/groups/shelf", {"remove_groups": ["h-blank"]}), False),
    ("patch-shelf", "stok", ("PATCH", "/groups/shelf", {"description": "d"}), True),
    ("patch-outside-context", "stok", ("PATCH", "/groups/ours", {"add_contexts": ["bunko"]}), True),
    ("patch-missing-outside", "stok", ("PATCH", "/groups/nope", {"remove_contexts": ["bunko"]}), True),
    ("delete-mixed", "ptok", ("DELETE", "/groups/h-mixed", None), True),
    ("delete-blank", "ptok", ("DELETE", "/groups/h-blank", None), True),
    ("delete-ours", "ptok", ("DELETE", "/groups/ours", None), False),
    ("rename-theirs", "ptok", ("POST", "/groups/h-theirs/rename", {"to": "taken"}), True),
    ("rename-blank", "ptok", ("POST", "/groups/h-blank/rename", {"to": "taken"}), True),
    ("rename-ours", "ptok", ("POST", "/groups/ours/rename", {"to": "ours2"}), False),
    ("recall-mixed", "stok", ("POST", "/recall", {**RECALL, "groups": ["h-mixed"]}), True),
    ("query-theirs", "stok", ("POST", "/query", {**QUERY, "groups": ["h-theirs"]}), True),
    ("search-nest", "stok", ("POST", "/sources/search", {**SEARCH, "groups": ["h-nest"]}), True),
    (
        "search-wrapper",
        "stok",
        ("POST", "/sources/search", {**SEARCH, "contexts": ["sake"], "groups": ["h-wrapper"]}),
        True,
    ),
    ("recall-outside-context", "stok", ("POST", "/recall", {**RECALL, "contexts": ["sake", "bunko"]}), True),
    ("recall-shelf", "stok", ("POST", "/recall", {**RECALL, "groups": ["shelf", "deep"]}), False),
    (
        "import-child-theirs",
        "ptok",
        ("POST", "/import", _line(name="fresh", contexts=["sake"], groups=["h-theirs"])),
        True,
    ),
    ("import-shelf", "ptok", ("POST", "/import", _line(name="shelf", contexts=["sake"])), True),
    ("import-ours", "ptok", ("POST", "/import", _line(name="ours", description="x", contexts=["sake"])), False),
    ("import-dry-child", "ptok", ("POST", "/import?dry_run=true", _line(name="fresh", groups=["h-nest"])), True),
    ("mcp-list", "stok", _mcp("list_groups", {}), True),
    ("mcp-list-page", "stok", _mcp("list_groups", {"limit": 1, "after": "h"}), True),
    ("mcp-get-mixed", "stok", _mcp("get_group", {"name": "h-mixed"}), True),
    ("mcp-get-blank", "stok", _mcp("get_group", {"name": "h-blank"}), True),
    ("mcp-get-shelf", "stok", _mcp("get_group", {"name": "shelf"}), True),
    ("mcp-export-theirs", "stok", _mcp("export_group", {"name": "h-theirs"}), True),
    ("mcp-export-shelf", "stok", _mcp("export_group", {"name": "shelf"}), True),
    ("mcp-recall-mixed", "stok", _mcp("recall", {**RECALL, "groups": ["h-mixed"]}), True),
    ("mcp-query-nest", "stok", _mcp("query", {**QUERY, "groups": ["h-nest"]}), True),
    ("mcp-search-theirs", "stok", _mcp("search_passages", {**SEARCH, "groups": ["h-theirs"]}), True),
    ("mcp-recall-outside-context", "stok", _mcp("recall", {**RECALL, "contexts": ["bunko"]}), True),
    ("mcp-search-ours", "stok", _mcp("search_passages", {**SEARCH, "groups": ["ours"]}), False),
]


def _request_bytes(call: tuple[str, str, Any]) -> bytes:
    _method, path, body = call
    text = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
    return path.encode() + b" " + text


def _escaped(word: str) -> list[bytes]:
    """How `word` can appear in an answer: raw UTF-8, or `\\u`-escaped inside a JSON string."""
    return [word.encode(), json.dumps(word).strip('"').encode()]


def _leaked(answer: bytes, request: bytes) -> list[str]:
    """Out-of-scope context names anywhere, and hidden group names or descriptions the request did not carry."""
    found = [c for c in OUTSIDE_CONTEXTS if any(form in answer for form in _escaped(c))]
    found += [s for s in SECRETS if s.encode() not in request and any(form in answer for form in _escaped(s))]
    return found


@pytest.mark.parametrize("worlds", [True], indirect=True)
@pytest.mark.parametrize(("token", "call"), [p[1:3] for p in PROBES], ids=[p[0] for p in PROBES])
async def test_strict_answers_carry_nothing_from_outside_the_grant(
    worlds: tuple[World, World], token: str, call: tuple[str, str, Any]
) -> None:
    full, bare = worlds
    got, without = await full.raw(*call, token=token), await bare.raw(*call, token=token)
    assert got == without, (got, without)
    assert not _leaked(got[1], _request_bytes(call)), got


@pytest.mark.parametrize("worlds", [False], indirect=True)
@pytest.mark.parametrize(("token", "call", "leaks"), [p[1:] for p in PROBES], ids=[p[0] for p in PROBES])
async def test_by_default_the_reference_answers_stay(
    worlds: tuple[World, World], token: str, call: tuple[str, str, Any], leaks: bool
) -> None:
    full, bare = worlds
    got, without = await full.raw(*call, token=token), await bare.raw(*call, token=token)
    told_apart = got != without or bool(_leaked(got[1], _request_bytes(call)))
    assert told_apart == leaks, (got, without)


# ----- the texts of both modes -------------------------------------------------------------------


@pytest.fixture
async def strict_full(settings_factory: Any, tmp_path: Path) -> AsyncIterator[Client]:
    world = await _world(settings_factory, tmp_path, "strict", strict=True, hidden=True)
    try:
        yield world.client
    finally:
        await world.session.close()
        await world.server.close()


@pytest.fixture
async def reference_full(settings_factory: Any, tmp_path: Path) -> AsyncIterator[Client]:
    world = await _world(settings_factory, tmp_path, "reference", strict=False, hidden=True)
    try:
        yield world.client
    finally:
        await world.session.close()
        await world.server.close()


NAMELESS = "key 'potter' has no grant on a context this request involves; nothing was applied"


async def test_strict_refusals_and_what_a_scoped_key_sees(strict_full: Client) -> None:
    c = strict_full
    listed = _ok(await c.call("GET", "/groups", token="stok"))
    assert listed == {
        "total": 4,
        "groups": [
            _ok(await c.call("GET", f"/groups/{name}", token="stok")) for name in ("deep", "leaf", "ours", "shelf")
        ],
    }
    shelf = _ok(await c.call("GET", "/groups/shelf", token="stok"))
    assert (
        shelf["groups"] == []
        and shelf["fingerprint"] == _ok(await c.call("GET", "/groups/shelf", token="atok"))["fingerprint"]
    )
    assert_error(await c.call("GET", "/groups/h-mixed", token="stok"), 404, "no_group", "group 'h-mixed' not found")
    assert_error(
        await c.call("PATCH", "/groups/ours", {"add_contexts": ["bunko"]}, token="stok"), 403, "forbidden", NAMELESS
    )
    assert_error(
        await c.call("POST", "/query", {**QUERY, "contexts": ["ghost"]}, token="stok"), 403, "forbidden", NAMELESS
    )
    assert_error(
        await c.call("PUT", "/groups/fresh", {"contexts": ["sake"], "groups": ["h-nest"]}, token="stok"),
        404,
        "no_group",
        "group 'h-nest' not found; nothing was applied",
    )
    assert_error(
        await c.call("POST", "/recall", {**RECALL, "groups": ["h-theirs"]}, token="stok"),
        404,
        "no_group",
        "group 'h-theirs' not found",
    )
    # the PATCH answer and the store keep a child outside the view
    _ok(await c.call("PATCH", "/groups/shelf", {"remove_groups": ["h-blank"], "description": "d"}, token="stok"))
    assert _ok(await c.call("GET", "/groups/shelf", token="atok"))["groups"] == ["h-blank"]
    # a scoped key never makes a group it could not see afterwards
    memberless = (
        "the group would hold no member context, which puts it outside the view of every key with a context list "
        "(TAGURU_STRICT_TENANCY); nothing was applied"
    )
    assert_error(
        await c.call("PUT", "/groups/fresh", content_type=None, token="stok"), 400, "invalid_argument", memberless
    )
    assert_error(
        await c.call("PATCH", "/groups/leaf", {"remove_contexts": ["sake"]}, token="stok"),
        400,
        "invalid_argument",
        memberless,
    )
    assert _ok(await c.call("GET", "/groups/leaf", token="atok"))["contexts"] == ["sake"]
    # keys without a context list see every group and the reference's texts, strict or not
    for token in ("atok", "rtok"):
        every = _ok(await c.call("GET", "/groups", token=token))
        assert every["total"] == len(HIDDEN) + len(VISIBLE) + 1
        assert _ok(await c.call("GET", "/groups/h-mixed", token=token))["contexts"] == ["bunko", "sake"]
    assert _ok(await c.call("PUT", "/groups/fresh", content_type=None, token="atok")) is True


async def test_reference_texts_without_strict_tenancy(reference_full: Client) -> None:
    c = reference_full
    named = "key 'potter' has no grant on context 'bunko'; nothing was applied"
    listed = _ok(await c.call("GET", "/groups", token="stok"))
    assert listed["total"] == len(HIDDEN) + len(VISIBLE) + 1
    rows = {g["name"]: g for g in listed["groups"]}
    assert rows["h-mixed"]["contexts"] == ["sake"] and rows["h-theirs"]["description"] == "secret-theirs"
    assert_error(await c.call("PATCH", "/groups/h-mixed", {"description": "x"}, token="stok"), 403, "forbidden", named)
    assert_error(
        await c.call("POST", "/query", {**QUERY, "contexts": ["ghost"]}, token="stok"),
        403,
        "forbidden",
        "key 'potter' has no grant on context 'ghost'; nothing was applied",
    )
    assert _ok(await c.call("POST", "/recall", {**RECALL, "groups": ["h-mixed"]}, token="stok"))["plan"] == {
        "contexts": ["sake"]
    }
    assert _ok(await c.call("PUT", "/groups/fresh", content_type=None, token="stok")) is True


async def test_names_are_one_namespace_and_refusals_over_it_name_nothing_hidden(strict_full: Client) -> None:
    """What strict tenancy cannot hide: a taken name is taken. The refusal says so and carries nothing else."""
    c = strict_full
    before = _ok(await c.call("GET", "/groups", token="atok"))
    for status, code, call, token in (
        (409, "already_exists", ("PUT", "/groups/h-theirs", {"contexts": ["sake"]}), "stok"),
        (409, "already_exists", ("POST", "/groups/ours/rename", {"to": "h-theirs"}), "ptok"),
        (403, "forbidden", ("POST", "/import", _line(name="h-blank", contexts=["sake"])), "ptok"),
    ):
        method, path, body = call
        if isinstance(body, bytes):
            resp = await c.call(method, path, raw=body, content_type="application/x-ndjson", token=token)
        else:
            resp = await c.call(method, path, body, token=token)
        refused = assert_error(resp, status, code)
        assert not _leaked(json.dumps(refused).encode(), _request_bytes(call)), refused
    assert _ok(await c.call("GET", "/groups", token="atok")) == before
    # a nesting ceiling reached through a parent the key cannot see names no group
    assert_error(
        await c.call("PATCH", "/groups/ours", {"add_groups": ["deep"]}, token="stok"),
        400,
        "over_limit",
        "the nesting would stack more than 3 groups; nothing was applied",
    )
    assert_error(
        await c.call("PATCH", "/groups/ours", {"add_groups": ["deep"]}, token="atok"),
        400,
        "over_limit",
        "the nesting would stack more than 3 groups (through group 'h-wrapper'); nothing was applied",
    )
    refused = assert_error(
        await c.call(
            "POST",
            "/import",
            raw=_line(name="ours", contexts=["sake"], groups=["deep"]),
            content_type="application/x-ndjson",
            token="ptok",
        ),
        400,
        "over_limit",
    )
    assert refused["error"].endswith("the restored nesting would stack more than 3 groups; no group was applied")


# ----- the pure view and the setting --------------------------------------------------------------


def test_the_view_keeps_only_groups_wholly_inside_the_grant() -> None:
    groups = {
        "ours": GroupRecord.of("", ["sake"], []),
        "mixed": GroupRecord.of("", ["sake", "bunko"], []),
        "blank": GroupRecord.of("", [], []),
        "hollow": GroupRecord.of("", [], ["blank"]),
        "shelf": GroupRecord.of("", ["sake"], ["blank", "ours"]),
        "nest": GroupRecord.of("", [], ["mixed"]),
        "top": GroupRecord.of("", [], ["shelf"]),
    }
    seen = visible_groups(groups, lambda c: c == "sake")
    assert seen == {
        "ours": groups["ours"],
        "shelf": GroupRecord.of("", ["sake"], ["ours"]),
        "top": groups["top"],
    }
    assert visible_groups(groups, lambda c: True).keys() == groups.keys() - {"blank", "hollow"}


@pytest.mark.parametrize(
    ("raw", "on"), [("1", True), ("true", True), (" TRUE ", True), ("0", False), ("false", False), ("", False)]
)
def test_the_setting_parses_as_every_boolean(raw: str, on: bool) -> None:
    assert load_settings({"TAGURU_STRICT_TENANCY": raw}).strict_tenancy is on
    assert load_settings({}).strict_tenancy is False


@pytest.mark.parametrize("raw", ["yes", "on", "2", "strict"])
def test_a_misspelt_value_refuses_the_boot(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"TAGURU_STRICT_TENANCY": raw})
    assert str(info.value) == "TAGURU_STRICT_TENANCY must be 1, true, 0 or false"


def test_the_variable_is_a_known_setting() -> None:
    assert unknown(["TAGURU_STRICT_TENANCY"]) == []
