"""Context groups (`/groups*`): the spec's walk-through, check orders and texts, scoped keys, persistence."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Client, start_client
from substrate_support import assert_error, make_context

from taguru_server.store.persist.groups import GroupRecord, NestingError, closure, fingerprint, validate_nesting

pytestmark = pytest.mark.anyio

EMPTY_FP = "cbf29ce484222325"


def _ok(resp: tuple[int, Any, dict[str, str]]) -> Any:
    status, body, _h = resp
    assert status == 200, body
    return body["result"]


async def put_group(client: Client, name: str, body: Any = None, token: str | None = None) -> Any:
    if body is None:
        return await client.call("PUT", f"/groups/{name}", content_type=None, token=token)
    return await client.call("PUT", f"/groups/{name}", body, token=token)


# ----- the pure rules ----------------------------------------------------------------------


def _map(edges: dict[str, list[str]]) -> dict[str, GroupRecord]:
    names = set(edges) | {c for cs in edges.values() for c in cs}
    return {n: GroupRecord.of("", [], edges.get(n, [])) for n in names}


@pytest.mark.parametrize(
    ("edges", "error"),
    [
        ({"a": ["b"], "b": ["c"]}, None),
        ({"a": ["b"], "b": ["c"], "c": ["d"]}, ("too_deep", "a")),
        ({"a": ["b"], "b": ["a"]}, ("cycle", "a")),
        ({"a": ["a"]}, ("cycle", "a")),
        ({"aaa": ["bbb"], "bbb": ["ccc"], "p_top": ["q_mid"], "q_mid": ["aaa"]}, ("too_deep", "p_top")),
        ({"a": ["b"], "b": ["c"], "c": ["d"], "d": ["a"]}, ("too_deep", "a")),
    ],
)
def test_nesting_walk_names_the_spec_group(edges: dict[str, list[str]], error: tuple[str, str] | None) -> None:
    if error is None:
        validate_nesting(_map(edges))
        return
    with pytest.raises(NestingError) as got:
        validate_nesting(_map(edges))
    assert (got.value.kind, got.value.group) == error


def test_fingerprints_of_the_spec() -> None:
    zero = (0, 0, 0)
    groups = {
        "fruit": GroupRecord.of("", ["banana", "apple"], []),
        "later": GroupRecord.of("", ["banana", "cherry"], []),
        "leaf": GroupRecord.of("", ["a"], []),
        "mid": GroupRecord.of("", ["b"], ["leaf"]),
        "top": GroupRecord.of("", [], ["mid"]),
        "empty": GroupRecord(),
    }

    def fp(name: str, allows: Any = lambda c: True) -> str:
        return fingerprint(groups, name, allows, lambda c: zero)

    assert fp("fruit") == "b19a25b33fe30913"
    assert fp("later") == "eaf55eb4dee8fdf1"
    assert fp("leaf") == "f2ac446314d1695f"
    assert fp("top") == "169b082237cc7134"
    assert fp("empty") == EMPTY_FP
    assert fp("fruit", lambda c: False) == EMPTY_FP
    assert closure(groups, ["top", "nope"]) == {"a", "b"}


# ----- the walk-through (§2.15) ----------------------------------------------------------------


async def test_walk_through(client: Client) -> None:
    for name in ("apple", "banana", "cherry", "a", "b"):
        await make_context(client, name)
    assert _ok(await put_group(client, "fruit", {"description": "果物の文脈", "contexts": ["banana", "apple"]})) is True
    assert_error(await put_group(client, "fruit"), 409, "already_exists", "group 'fruit' already exists")
    assert _ok(await put_group(client, "empty")) is True
    listed = _ok(await client.call("GET", "/groups"))
    assert listed == {
        "total": 2,
        "groups": [
            {"name": "empty", "description": "", "contexts": [], "groups": [], "fingerprint": EMPTY_FP},
            {
                "name": "fruit",
                "description": "果物の文脈",
                "contexts": ["apple", "banana"],
                "groups": [],
                "fingerprint": "b19a25b33fe30913",
            },
        ],
    }
    page = _ok(await client.call("GET", "/groups?limit=1&after=empty"))
    assert page["total"] == 2 and [g["name"] for g in page["groups"]] == ["fruit"]
    assert _ok(await client.call("GET", "/groups?after=fruit")) == {"total": 2, "groups": []}
    patched = _ok(
        await client.call(
            "PATCH",
            "/groups/fruit",
            {"description": "更新後", "add_contexts": ["cherry"], "remove_contexts": ["apple", "never-was-a-member"]},
        )
    )
    assert patched == {
        "name": "fruit",
        "description": "更新後",
        "contexts": ["banana", "cherry"],
        "groups": [],
        "fingerprint": "eaf55eb4dee8fdf1",
    }
    assert_error(
        await client.call("PATCH", "/groups/fruit", {"add_contexts": ["ghost"], "remove_contexts": ["banana"]}),
        404,
        "no_context",
        "context 'ghost' not found; nothing was applied",
    )
    assert _ok(await client.call("GET", "/groups/fruit"))["contexts"] == ["banana", "cherry"]
    assert_error(await client.call("GET", "/groups/nope"), 404, "no_group", "group 'nope' not found")

    assert _ok(await put_group(client, "leaf", {"contexts": ["a"]}))
    assert _ok(await put_group(client, "mid", {"contexts": ["b"], "groups": ["leaf"]}))
    assert _ok(await put_group(client, "top", {"groups": ["mid"]}))
    assert _ok(await client.call("GET", "/groups/top")) == {
        "name": "top",
        "description": "",
        "contexts": [],
        "groups": ["mid"],
        "fingerprint": "169b082237cc7134",
    }
    assert_error(
        await put_group(client, "over", {"groups": ["top"]}),
        400,
        "over_limit",
        "the nesting would stack more than 3 groups (through group 'over'); nothing was applied",
    )
    assert_error(await client.call("GET", "/groups/over"), 404, "no_group")
    assert_error(
        await client.call("PATCH", "/groups/leaf", {"add_groups": ["top"]}),
        400,
        "invalid_argument",
        "the nesting would loop back into group 'leaf'; nothing was applied",
    )
    assert_error(
        await client.call("PATCH", "/groups/top", {"add_groups": ["ghost"], "remove_groups": ["mid"]}),
        404,
        "no_group",
        "group 'ghost' not found; nothing was applied",
    )
    assert _ok(await client.call("DELETE", "/groups/leaf")) is True
    mid = _ok(await client.call("GET", "/groups/mid"))
    assert mid["groups"] == [] and mid["contexts"] == ["b"]
    assert _ok(await client.call("DELETE", "/contexts/b")) is True
    assert _ok(await client.call("GET", "/groups/mid"))["contexts"] == []
    assert _ok(await client.call("DELETE", "/groups/fruit")) is True
    assert_error(await client.call("DELETE", "/groups/fruit"), 404, "no_group", "group 'fruit' not found")


async def test_rename_moves_the_record_and_rewrites_parents(client: Client) -> None:
    await make_context(client, "a")
    assert _ok(await put_group(client, "kid", {"contexts": ["a"], "description": "d"}))
    assert _ok(await put_group(client, "mom", {"groups": ["kid"]}))
    before = _ok(await client.call("GET", "/groups/kid"))["fingerprint"]
    assert_error(
        await client.call("POST", "/groups/kid/rename", {"to": "x" * 65}),
        400,
        "invalid_argument",
        "the destination name is 65 bytes, over the 64-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("POST", "/groups/kid/rename", {"to": ""}),
        400,
        "invalid_argument",
        "the destination name must not be empty",
    )
    assert_error(await client.call("POST", "/groups/ghost/rename", {"to": "y"}), 404, "no_group")
    assert_error(
        await client.call("POST", "/groups/kid/rename", {"to": "mom"}),
        409,
        "already_exists",
        "group 'mom' already exists",
    )
    assert _ok(await client.call("POST", "/groups/kid/rename", {"to": "kid"})) is True
    assert _ok(await client.call("POST", "/groups/kid/rename", {"to": "child"})) is True
    child = _ok(await client.call("GET", "/groups/child"))
    assert child["contexts"] == ["a"] and child["description"] == "d" and child["fingerprint"] == before
    assert _ok(await client.call("GET", "/groups/mom"))["groups"] == ["child"]
    assert_error(await client.call("GET", "/groups/kid"), 404, "no_group")
    status, _b, _h = await client.call("POST", "/groups/child/rename", {})
    assert status == 422


async def test_create_check_order_and_body_discipline(client: Client) -> None:
    await make_context(client, "c1")
    resp = await client.call("PUT", "/groups/g", raw=b"{nope", content_type="text/plain")
    body = assert_error(resp, 400, "malformed_request")
    assert body["error"].startswith("the request body is not valid JSON: ")
    body = assert_error(await put_group(client, "g", {"contexts": "c1"}), 400, "malformed_request")
    assert body["error"].startswith("the request body is not valid JSON: ")
    assert_error(await put_group(client, "g", {"description": None}), 400, "malformed_request")
    # an unknown top-level key is ignored; any content type is read
    assert _ok(await client.call("PUT", "/groups/g", raw=b'{"zzz":1}', content_type="text/plain")) is True
    assert_error(
        await put_group(client, "n" * 65, {"description": "x" * 5000}),
        400,
        "invalid_argument",
        "the group name is 65 bytes, over the 64-byte cap; nothing was applied",
    )
    assert_error(
        await put_group(client, "h", {"description": "x" * 4097}),
        400,
        "invalid_argument",
        "the description is 4097 bytes, over the 4096-byte cap; nothing was applied",
    )
    assert_error(
        await put_group(client, "h", {"contexts": ["z"] * 1001, "groups": ["z"] * 1001}),
        400,
        "over_limit",
        "contexts carries 1001 items, past the per-request limit of 1000; split the request",
    )
    assert_error(
        await put_group(client, "h", {"groups": ["z"] * 1001}),
        400,
        "over_limit",
        "groups carries 1001 items, past the per-request limit of 1000; split the request",
    )
    assert_error(
        await put_group(client, "g", {"contexts": ["ghost"]}), 409, "already_exists", "group 'g' already exists"
    )
    assert_error(
        await put_group(client, "h", {"contexts": ["zz", "c1", "yy"], "groups": ["nog"]}),
        404,
        "no_context",
        "context 'yy' not found; nothing was applied",
    )
    assert_error(
        await put_group(client, "h", {"contexts": ["c1"], "groups": ["q2", "q1"]}),
        404,
        "no_group",
        "group 'q1' not found; nothing was applied",
    )
    assert_error(await client.call("GET", "/groups/h"), 404, "no_group")
    # PATCH is a typed body: the framework's statuses
    status, _b, _h = await client.call("PATCH", "/groups/g", raw=b"{}", content_type="text/plain")
    assert status == 415
    status, _b, _h = await client.call("PATCH", "/groups/g", {"add_contexts": None})
    assert status == 422
    # the result cap runs before existence; removals make room first
    assert_error(
        await client.call("PATCH", "/groups/g", {"add_contexts": [f"n{i}" for i in range(1000)] + ["c1"]}),
        400,
        "over_limit",
        "add_contexts carries 1001 items, past the per-request limit of 1000; split the request",
    )
    assert_error(await client.call("PATCH", "/groups/nope", {}), 404, "no_group", "group 'nope' not found")
    # a patched description with nothing else keeps the members
    assert _ok(await client.call("PATCH", "/groups/g", {"add_contexts": ["c1", "c1"]}))["contexts"] == ["c1"]
    assert _ok(await client.call("PATCH", "/groups/g", {"description": "new"}))["contexts"] == ["c1"]
    assert _ok(await client.call("PATCH", "/groups/g", {"add_contexts": ["c1"], "remove_contexts": ["c1"]}))[
        "contexts"
    ] == ["c1"]
    assert_error(
        await client.call("GET", "/groups?prefix=" + "p" * 1033 + "&after=" + "a" * 2000),
        400,
        "invalid_argument",
        "prefix is 1033 bytes, over the 1032-byte cap; nothing was applied",
    )
    status, _b, _h = await client.call("GET", "/groups?limit=x")
    assert status == 400


async def test_export_line_and_import_round_trip(client: Client) -> None:
    await make_context(client, "t-sake")
    await make_context(client, "t-tea")
    assert _ok(await put_group(client, "kid", {}))
    assert _ok(await put_group(client, "kura", {"description": "蔵元一式", "contexts": ["t-tea", "t-sake"]}))
    status, text, headers = await client.call("GET", "/groups/kura/export")
    assert status == 200 and headers["Content-Type"] == "application/x-ndjson; charset=utf-8"
    line = '{"taguru_group":1,"name":"kura","description":"蔵元一式","contexts":["t-sake","t-tea"]}\n'
    assert text == json.loads(line)
    assert_error(await client.call("GET", "/groups/none/export"), 404, "no_group", "group 'none' not found")
    async with client.session.get(client.base + "/groups/kid/export") as resp:
        assert await resp.read() == b'{"taguru_group":1,"name":"kid"}\n'
    async with client.session.get(client.base + "/groups/kura/export") as resp:
        exported = await resp.read()
    assert exported == line.encode()
    assert _ok(await client.call("DELETE", "/groups/kura")) is True
    got = _ok(await client.call("POST", "/import", raw=exported, content_type="application/x-ndjson"))
    assert got == {"batches": [], "groups": [{"name": "kura", "outcome": "created", "contexts": 2, "groups": 0}]}
    again = _ok(await client.call("POST", "/import", raw=exported, content_type="application/x-ndjson"))
    assert again["groups"][0]["outcome"] == "unchanged"
    row = _ok(await client.call("GET", "/groups/kura"))
    assert row["description"] == "蔵元一式" and row["contexts"] == ["t-sake", "t-tea"]


# ----- scoped keys (§2.14) --------------------------------------------------------------------

TOKENS = {"boss": "atok", "reader": "rtok", "potter": "stok", "porter": "ptok"}
SCOPES = {
    "reader": "read",
    "potter": {"role": "write", "contexts": ["sake"]},
    "porter": {"role": "admin", "contexts": ["sake"]},
}


@pytest.fixture
async def scoped(settings_factory: Any) -> AsyncIterator[Client]:
    settings = settings_factory(
        TAGURU_API_TOKENS=",".join(f"{k}:{v}" for k, v in TOKENS.items()),
        TAGURU_KEY_SCOPES=json.dumps(SCOPES),
    )
    server, client, session = await start_client(settings)
    try:
        for name in ("sake", "bunko"):
            await make_context(client, name, token="atok")
        assert _ok(await put_group(client, "mixed", {"contexts": ["sake", "bunko"]}, token="atok"))
        assert _ok(await put_group(client, "ours", {"contexts": ["sake"]}, token="atok"))
        assert _ok(await put_group(client, "nest", {"groups": ["mixed"]}, token="atok"))
        yield client
    finally:
        await session.close()
        await server.close()


async def test_a_scoped_key_sees_its_slice_and_touches_only_its_grant(scoped: Client) -> None:
    listed = _ok(await scoped.call("GET", "/groups", token="stok"))
    assert listed["total"] == 3
    rows = {g["name"]: g for g in listed["groups"]}
    assert rows["mixed"]["contexts"] == ["sake"] and rows["nest"]["groups"] == ["mixed"]
    full = _ok(await scoped.call("GET", "/groups/mixed", token="atok"))
    assert full["contexts"] == ["bunko", "sake"] and full["fingerprint"] != rows["mixed"]["fingerprint"]
    assert rows["mixed"]["fingerprint"] == _ok(await scoped.call("GET", "/groups/ours", token="atok"))["fingerprint"]
    status, text, _h = await scoped.call("GET", "/groups/mixed/export", token="stok")
    assert status == 200 and text == {"taguru_group": 1, "name": "mixed", "contexts": ["sake"]}
    refusal = "key 'potter' has no grant on context 'bunko'; nothing was applied"
    assert_error(
        await scoped.call("PATCH", "/groups/mixed", {"description": "mine now"}, token="stok"),
        403,
        "forbidden",
        refusal,
    )
    assert_error(
        await scoped.call("PATCH", "/groups/nest", {"description": "x"}, token="stok"), 403, "forbidden", refusal
    )
    assert_error(
        await scoped.call("PATCH", "/groups/ours", {"add_contexts": ["ghost"]}, token="stok"),
        403,
        "forbidden",
        "key 'potter' has no grant on context 'ghost'; nothing was applied",
    )
    # scope before existence: the same refusal for a name that does not exist
    assert_error(
        await scoped.call("PATCH", "/groups/nope", {"add_contexts": ["ghost"]}, token="stok"),
        403,
        "forbidden",
        "key 'potter' has no grant on context 'ghost'; nothing was applied",
    )
    assert_error(await put_group(scoped, "mine", {"groups": ["mixed"]}, token="stok"), 403, "forbidden", refusal)
    assert_error(
        await scoped.call("DELETE", "/groups/ours", token="stok"),
        403,
        "forbidden",
        "key 'potter' has role 'write', but DELETE /groups/{name} needs 'admin'",
    )
    assert_error(
        await put_group(scoped, "new", token="rtok"),
        403,
        "forbidden",
        "key 'reader' has role 'read', but PUT /groups/{name} needs 'write'",
    )
    # inside the grant a scoped writer may create, fill and edit groups
    assert _ok(await put_group(scoped, "mine", {"contexts": ["sake"], "groups": ["ours"]}, token="stok")) is True
    assert _ok(await scoped.call("PATCH", "/groups/mine", {"remove_groups": ["ours"]}, token="stok"))["groups"] == []
    assert _ok(await put_group(scoped, "blank", token="stok")) is True
    # a group named like a context the key cannot reach is still addressable (no path grant on groups)
    assert _ok(await put_group(scoped, "bunko", token="stok")) is True
    untouched = _ok(await scoped.call("GET", "/groups/mixed", token="atok"))
    assert untouched == full


# ----- persistence -----------------------------------------------------------------------------


async def test_groups_survive_a_restart(settings_factory: Any) -> None:
    settings = settings_factory()
    server, client, session = await start_client(settings)
    try:
        await make_context(client, "one")
        await make_context(client, "two")
        assert _ok(await put_group(client, "kid", {"contexts": ["two"]}))
        assert _ok(await put_group(client, "g", {"description": "d", "contexts": ["one", "two"], "groups": ["kid"]}))
        assert _ok(await client.call("DELETE", "/contexts/two")) is True
        before = _ok(await client.call("GET", "/groups"))
    finally:
        await session.close()
        await server.close()
    server, client, session = await start_client(settings_factory())
    try:
        after = _ok(await client.call("GET", "/groups"))
        assert after == before
        assert after["groups"][0]["contexts"] == ["one"] and after["groups"][1]["contexts"] == []
    finally:
        await session.close()
        await server.close()


# ----- taguru_group import records (§2.12) ----------------------------------------------------


def _stream(*lines: Any) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)) + "\n" for x in lines).encode()


async def _import(client: Client, *lines: Any, query: str = "", token: str | None = None) -> Any:
    return await client.call(
        "POST", "/import" + query, raw=_stream(*lines), content_type="application/x-ndjson", token=token
    )


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ({"taguru_group": 2, "name": "g"}, "line 1: taguru_group 2 is not a version this taguru reads (it reads 1)"),
        ({"taguru_group": 1, "name": "n" * 65}, "line 1: name of 65 bytes exceeds the 64-byte cap"),
        ({"taguru_group": 1, "name": ""}, "line 1: name must not be empty"),
        (
            {"taguru_group": 1, "name": "g", "description": "d" * 4097},
            "line 1: description of 4097 bytes exceeds the 4096-byte cap",
        ),
        ({"taguru_group": 1, "name": "g", "contexts": ["ok", ""]}, "line 1: contexts must not be empty"),
        ({"taguru_group": 1, "name": "g", "groups": ["x" * 65]}, "line 1: groups of 65 bytes exceeds the 64-byte cap"),
        (
            {"taguru_group": 1, "name": "g", "contexts": [f"c{i}" for i in range(1001)]},
            "line 1: 1001 contexts where a group holds at most 1000 — split into nested child groups",
        ),
    ],
)
async def test_group_record_parse_errors(client: Client, line: dict[str, Any], error: str) -> None:
    body = assert_error(await _import(client, line), 400, "malformed_request", error)
    assert body["integrity"] == "nothing_written" and body["retryable_after_correction"] is True


async def test_group_records_apply_after_every_batch_as_one_set(client: Client) -> None:
    body = assert_error(await _import(client, {"taguru_group": 1, "name": "g", "extra": 1}), 400, "malformed_request")
    assert body["error"].startswith("line 1: not a group record: ")
    twice = assert_error(
        await _import(client, {"taguru_group": 1, "name": "g"}, {"taguru_group": 1, "name": "g"}),
        400,
        "malformed_request",
    )
    assert twice["error"] == (
        "line 2: group 'g' is already stated by an earlier record of this stream — one record owns one group's truth"
    )
    # a group record closes the batch: an op line after it needs a fresh header
    orphan = assert_error(
        await _import(
            client,
            {"taguru_batch": 1, "context": "c", "source": "s", "create": {}},
            {"taguru_group": 1, "name": "g"},
            {"subject": "a", "label": "b", "object": "c", "weight": 1.0},
        ),
        400,
        "malformed_request",
    )
    assert orphan["error"] == "line 3: an op line before any batch header"
    # the group sits before the batch that creates its member: groups apply after every batch
    got = _ok(
        await _import(
            client,
            {"taguru_group": 1, "name": "kid", "contexts": ["c"]},
            {"taguru_batch": 1, "context": "c", "source": "s", "create": {}},
            {"subject": "a", "label": "b", "object": "c", "weight": 1.0},
            {"taguru_group": 1, "name": "mom", "groups": ["kid"], "description": "d"},
        )
    )
    assert [b["context"] for b in got["batches"]] == ["c"]
    assert got["groups"] == [
        {"name": "kid", "outcome": "created", "contexts": 1, "groups": 0},
        {"name": "mom", "outcome": "created", "contexts": 0, "groups": 1},
    ]
    again = _ok(await _import(client, {"taguru_group": 1, "name": "mom", "groups": ["kid"], "description": "d"}))
    assert again == {"batches": [], "groups": [{"name": "mom", "outcome": "unchanged", "contexts": 0, "groups": 1}]}
    replaced = _ok(await _import(client, {"taguru_group": 1, "name": "kid"}))
    assert replaced["groups"][0]["outcome"] == "replaced"
    assert _ok(await client.call("GET", "/groups/kid"))["contexts"] == []
    # a dry run parses and previews, and leaves groups alone
    dry = _ok(await _import(client, {"taguru_group": 1, "name": "new"}, query="?dry_run=true"))
    assert dry == {"batches": []}
    assert_error(await client.call("GET", "/groups/new"), 404, "no_group")
    # group-phase refusals carry the landed prefix
    missing = assert_error(
        await _import(
            client,
            {"taguru_batch": 1, "context": "c", "source": "s2", "create": {}},
            {"subject": "a", "label": "b", "object": "d", "weight": 1.0},
            {"taguru_group": 1, "name": "z", "contexts": ["nope"]},
        ),
        404,
        "no_context",
    )
    assert missing["error"] == (
        "group records refused with every batch landed (1 durable); fixing the stream and re-POSTing it whole is "
        "exact: group 'z' names member context 'nope', which does not exist; no group was applied (batches of the "
        "same stream apply first — import the contexts, then the groups)"
    )
    assert missing["integrity"] == "durable_prefix" and missing["durable_batches"] == 1
    assert missing["retryable_after_correction"] is True
    child = assert_error(await _import(client, {"taguru_group": 1, "name": "z", "groups": ["ghost"]}), 404, "no_group")
    assert child["integrity"] == "nothing_written"
    assert child["error"].endswith(
        "group 'z' names child group 'ghost', which neither exists nor rides this stream; no group was applied"
    )
    loop = assert_error(
        await _import(client, {"taguru_group": 1, "name": "kid", "groups": ["mom"]}), 400, "invalid_argument"
    )
    assert loop["error"].endswith("the restored nesting would close a cycle through group 'kid'; no group was applied")
    tall = assert_error(
        await _import(
            client,
            {"taguru_group": 1, "name": "g1", "groups": ["g2"]},
            {"taguru_group": 1, "name": "g2", "groups": ["g3"]},
            {"taguru_group": 1, "name": "g3", "groups": ["g4"]},
            {"taguru_group": 1, "name": "g4"},
        ),
        400,
        "over_limit",
    )
    assert tall["error"].endswith(
        "the restored nesting would stack more than 3 groups under group 'g1'; no group was applied"
    )
    assert_error(await client.call("GET", "/groups/g4"), 404, "no_group")


async def test_a_scoped_import_of_group_records(scoped: Client) -> None:
    # the standing members count too: restoring `mixed` to `{sake}` still involves `bunko`
    refused = assert_error(
        await _import(scoped, {"taguru_group": 1, "name": "mixed", "contexts": ["sake"]}, token="ptok"),
        403,
        "forbidden",
        "key 'porter' has no grant on context 'bunko'; nothing was applied",
    )
    assert "integrity" not in refused
    assert _ok(await scoped.call("GET", "/groups/mixed", token="atok"))["contexts"] == ["bunko", "sake"]
    # and the prospective ones: a new group naming an outside child
    assert_error(
        await _import(scoped, {"taguru_group": 1, "name": "fresh", "groups": ["nest"]}, token="ptok"),
        403,
        "forbidden",
        "key 'porter' has no grant on context 'bunko'; nothing was applied",
    )
    got = _ok(await _import(scoped, {"taguru_group": 1, "name": "ours", "description": "x"}, token="ptok"))
    assert got["groups"][0]["outcome"] == "replaced"
    # a scoped admin may rename and delete what lies inside its grant, and nothing else
    assert _ok(await scoped.call("POST", "/groups/ours/rename", {"to": "theirs"}, token="ptok")) is True
    assert_error(
        await scoped.call("POST", "/groups/mixed/rename", {"to": "m2"}, token="ptok"),
        403,
        "forbidden",
        "key 'porter' has no grant on context 'bunko'; nothing was applied",
    )
    assert_error(
        await scoped.call("DELETE", "/groups/nest", token="ptok"),
        403,
        "forbidden",
        "key 'porter' has no grant on context 'bunko'; nothing was applied",
    )
    assert _ok(await scoped.call("DELETE", "/groups/theirs", token="ptok")) is True


async def test_a_group_written_by_one_worker_is_read_by_another(settings_factory: Any) -> None:
    """Two server processes' worth of apps over one store: reads catch up with the change log first."""
    first = await start_client(settings_factory(TAGURU_WORKERS="2"))
    second = await start_client(settings_factory(TAGURU_WORKERS="2"))
    a, b = first[1], second[1]
    try:
        await make_context(a, "one")
        assert _ok(await put_group(a, "g", {"contexts": ["one"]})) is True
        assert _ok(await b.call("GET", "/groups/g"))["contexts"] == ["one"]
        assert _ok(await b.call("PATCH", "/groups/g", {"description": "from b"}))["description"] == "from b"
        assert _ok(await a.call("GET", "/groups"))["groups"][0]["description"] == "from b"
        assert _ok(await b.call("DELETE", "/contexts/one")) is True
        assert _ok(await a.call("GET", "/groups/g"))["contexts"] == []
        assert_error(await a.call("PUT", "/groups/g"), 409, "already_exists")
        assert _ok(await a.call("POST", "/groups/g/rename", {"to": "h"})) is True
        assert_error(await b.call("GET", "/groups/g"), 404, "no_group")
    finally:
        for server, _client, session in (first, second):
            await session.close()
            await server.close()


async def test_a_renamed_context_is_renamed_in_every_group_durably(settings_factory: Any) -> None:
    settings = settings_factory()
    server, client, session = await start_client(settings)
    try:
        await make_context(client, "old")
        await make_context(client, "other")
        assert _ok(await put_group(client, "g", {"contexts": ["old", "other"]}))
        assert _ok(await put_group(client, "h", {"contexts": ["old"], "groups": ["g"]}))
        assert _ok(await client.call("POST", "/contexts/old/rename", {"to": "zz-new"})) is True
        g = _ok(await client.call("GET", "/groups/g"))
        h = _ok(await client.call("GET", "/groups/h"))
        assert g["contexts"] == ["other", "zz-new"] and h["contexts"] == ["zz-new"]
        before = _ok(await client.call("GET", "/groups"))
    finally:
        await session.close()
        await server.close()
    server, client, session = await start_client(settings_factory())
    try:
        assert _ok(await client.call("GET", "/groups")) == before
    finally:
        await session.close()
        await server.close()
