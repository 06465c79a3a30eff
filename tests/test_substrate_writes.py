"""Write endpoints: every refusal has the spec's status, code and text, and writes nothing (§1-§6)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Client, start_client
from substrate_support import (
    assert_collected,
    assert_error,
    assert_ok,
    collected_text,
    ctx_path,
    entry,
    make_context,
    state,
)

pytestmark = pytest.mark.anyio

WEIGHT_EXPECTED = "a finite number with |weight| <= 1000000"
NON_EMPTY = "a non-empty string"
PARAGRAPH_EXPECTED = "a non-negative integer paragraph index"
UNKNOWN_REF = "a source id present in this request's own `passages`"
TYPE_415 = "Expected request with `Content-Type: application/json`"
PARSE_400 = "Failed to parse the request body as JSON:"
DESER_422 = "Failed to deserialize the JSON body into the target type: "


def assoc(s: str = "alpha", label: str = "connects_to", o: str = "beta", w: Any = 1.0, **kw: Any) -> dict[str, Any]:
    return {"subject": s, "label": label, "object": o, "weight": w, **kw}


async def seeded(client: Client, name: str = "w") -> dict[str, Any]:
    """A context with an edge, a passage, an alias and a label; returns its state."""
    await make_context(client, name, {"description": "seed"})
    assert_ok(
        await client.call(
            "POST",
            ctx_path(name, "associations"),
            [assoc(source="doc.md", paragraph=0), assoc("beta", "near", "gamma", -2.0)],
        )
    )
    assert_ok(
        await client.call(
            "POST",
            ctx_path(name, "sources"),
            {
                "passages": {"doc.md": "first para\n\nsecond para"},
                "sections": {"doc.md": [{"paragraph": 1, "section": "Two"}]},
                "tags": {"doc.md": ["t1"]},
                "dates": {"doc.md": 1000},
            },
        )
    )
    assert_ok(await client.call("POST", ctx_path(name, "aliases"), {"concepts": {"Alpha": "alpha"}}))
    return await state(client, name)


async def assert_unchanged(client: Client, name: str, before: dict[str, Any]) -> None:
    assert await state(client, name) == before


async def context_names(client: Client) -> list[str]:
    result = assert_ok(await client.call("GET", "/contexts"))
    return [c["name"] for c in result["contexts"]]


# ----- PUT / PATCH / DELETE /contexts/{name} --------------------------------------------------------


async def test_put_context_name_over_64_bytes(client: Client) -> None:
    for name, size in (("x" * 65, 65), ("あ" * 22, 66), ("é" * 33, 66)):
        assert_error(
            await client.call("PUT", ctx_path(name), content_type=None),
            400,
            "invalid_argument",
            f"the context name is {size} bytes, over the 64-byte cap; nothing was applied",
        )
        assert_error(await client.call("GET", ctx_path(name)), 404, "no_context", f"context '{name}' not found")
    await make_context(client, "x" * 64)
    await make_context(client, "あ" * 21 + "x")  # 64 bytes
    assert sorted(await context_names(client)) == sorted(["x" * 64, "あ" * 21 + "x"])


async def test_put_context_description_over_4096_bytes(client: Client) -> None:
    assert_error(
        await client.call("PUT", ctx_path("d"), {"description": "a" * 4097}),
        400,
        "invalid_argument",
        "the description is 4097 bytes, over the 4096-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("PUT", ctx_path("d"), {"description": "é" * 2049}),
        400,
        "invalid_argument",
        "the description is 4098 bytes, over the 4096-byte cap; nothing was applied",
    )
    assert await context_names(client) == []
    await make_context(client, "d", {"description": "a" * 4096})
    assert (await entry(client, "d"))["description"] == "a" * 4096


async def test_put_context_check_order(client: Client) -> None:
    # name length is checked before the description, the description before existence
    assert_error(
        await client.call("PUT", ctx_path("n" * 65), {"description": "a" * 5000}),
        400,
        "invalid_argument",
        "the context name is 65 bytes, over the 64-byte cap; nothing was applied",
    )
    before = await seeded(client, "taken")
    assert_error(
        await client.call("PUT", ctx_path("taken"), {"description": "a" * 5000}),
        400,
        "invalid_argument",
        "the description is 5000 bytes, over the 4096-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("PUT", ctx_path("taken"), {"description": "replaced", "pinned": True}),
        409,
        "already_exists",
        "context 'taken' already exists",
    )
    assert_error(
        await client.call("PUT", ctx_path("taken"), content_type=None),
        409,
        "already_exists",
        "context 'taken' already exists",
    )
    await assert_unchanged(client, "taken", before)
    assert_error(
        await client.call("PUT", "/contexts/", content_type=None),
        400,
        "invalid_argument",
        "the context name must not be empty",
    )
    assert await context_names(client) == ["taken"]


async def test_put_context_body_rules(client: Client) -> None:
    # broken JSON is a 400 whatever the content type
    for ct in ("application/json", "text/plain", None):
        body = assert_error(
            await client.call("PUT", ctx_path("b"), raw=b'{"description":', content_type=ct),
            400,
            "malformed_request",
            prefix="the request body is not valid JSON: ",
        )
        assert "integrity" not in body
    assert_error(
        await client.call("PUT", ctx_path("b"), raw=b"\xff\xfe", content_type=None),
        400,
        "malformed_request",
        prefix="the request body is not valid JSON: ",
    )
    # wrong shapes are the framework's 422
    for raw in (b'{"pinned":"yes"}', b'{"description":5}', b'{"dice_floor":"high"}', b"[1]", b'"text"'):
        assert_error(
            await client.call("PUT", ctx_path("b"), raw=raw, content_type=None),
            422,
            "malformed_request",
            prefix=DESER_422,
        )
    assert await context_names(client) == []
    # a JSON body is read whatever the content type; whitespace alone means defaults
    await make_context(client, "plain")
    assert_ok(
        await client.call("PUT", ctx_path("typed"), raw=b'{"description":"d","pinned":true}', content_type="text/plain")
    )
    assert_ok(await client.call("PUT", ctx_path("blank"), raw=b"  \n", content_type=None))
    typed = await entry(client, "typed")
    assert (typed["description"], typed["pinned"]) == ("d", True)
    blank = await entry(client, "blank")
    assert (blank["description"], blank["pinned"], blank["dice_floor"], blank["semantic_floor"]) == (
        "",
        False,
        None,
        None,
    )
    assert blank["revision"] == {"graph": 0, "passages": 0, "config": 0}


async def test_put_context_floors_clamped_and_unknown_fields_ignored(client: Client) -> None:
    assert_ok(await client.call("PUT", ctx_path("f"), {"dice_floor": 2.5, "semantic_floor": -1, "extra": [1]}))
    e = await entry(client, "f")
    assert (e["dice_floor"], e["semantic_floor"]) == (1.0, 0.0)


async def test_context_names_with_slashes_and_spaces(client: Client) -> None:
    for name in ("corpus-d::communities", "a/b", "with space", "日本語"):
        await make_context(client, name)
        assert (await entry(client, name))["name"] == name
    assert_error(await client.call("GET", ctx_path("a/c")), 404, "no_context", "context 'a/c' not found")
    assert_ok(await client.call("POST", ctx_path("a/b", "associations"), [assoc()]))
    assert (await entry(client, "a/b"))["stats"]["associations"] == 1


async def test_patch_context(client: Client) -> None:
    before = await seeded(client, "p")
    assert_error(
        await client.call("PATCH", ctx_path("nope"), {"pinned": True}), 404, "no_context", "context 'nope' not found"
    )
    assert_error(
        await client.call("PATCH", ctx_path("p"), {"description": "x" * 4097}),
        400,
        "invalid_argument",
        "the description is 4097 bytes, over the 4096-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("PATCH", ctx_path("p"), {"pinned": True}, content_type=None),
        415,
        "malformed_request",
        TYPE_415,
    )
    assert_error(
        await client.call("PATCH", ctx_path("p"), {"pinned": True}, content_type="text/plain"),
        415,
        "malformed_request",
        TYPE_415,
    )
    assert_error(await client.call("PATCH", ctx_path("p"), raw=b"{"), 400, "malformed_request", prefix=PARSE_400)
    assert_error(
        await client.call("PATCH", ctx_path("p"), {"pinned": "yes"}), 422, "malformed_request", prefix=DESER_422
    )
    await assert_unchanged(client, "p", before)
    result = assert_ok(await client.call("PATCH", ctx_path("p"), {"pinned": True, "dice_floor": 0.5}))
    assert result == {"description": "seed", "pinned": True, "dice_floor": 0.5, "semantic_floor": None}
    after = await entry(client, "p")
    assert after["revision"] == dict(before["revision"], config=before["revision"]["config"] + 1)
    assert after["stats"] == before["stats"]
    result = assert_ok(await client.call("PATCH", ctx_path("p"), {"semantic_floor": 3.0, "description": "new"}))
    assert result == {"description": "new", "pinned": True, "dice_floor": 0.5, "semantic_floor": 1.0}


async def test_delete_context(client: Client) -> None:
    assert_error(await client.call("DELETE", ctx_path("nope")), 404, "no_context", "context 'nope' not found")
    await seeded(client, "gone")
    await make_context(client, "gone::communities")
    assert assert_ok(await client.call("DELETE", ctx_path("gone"))) is True
    assert_error(await client.call("GET", ctx_path("gone")), 404, "no_context", "context 'gone' not found")
    assert_error(await client.call("DELETE", ctx_path("gone")), 404, "no_context", "context 'gone' not found")
    assert await context_names(client) == ["gone::communities"]
    # the name is free again and starts empty
    await make_context(client, "gone")
    e = await entry(client, "gone")
    assert e["stats"]["associations"] == 0 and e["revision"] == {"graph": 0, "passages": 0, "config": 0}


async def test_body_cap_is_413_before_everything_else(settings_factory) -> None:
    server, client, session = await start_client(settings_factory(TAGURU_MAX_BODY_BYTES="256"))
    try:
        await make_context(client, "cap")
        before = await state(client, "cap")
        big = [assoc(s=f"s{i}") for i in range(20)]
        for method, path, body in (
            ("POST", ctx_path("cap", "associations"), big),
            ("POST", ctx_path("missing", "associations"), big),  # 413 before 404
            ("POST", ctx_path("cap", "sources"), {"passages": {"d": "x" * 400}}),
            ("PUT", ctx_path("new"), {"description": "x" * 400}),
            ("POST", ctx_path("cap", "query"), {"subject": ["x" * 10] * 40}),
        ):
            assert_error(await client.call(method, path, body), 413, "payload_too_large")
        assert_error(await client.call("POST", "/import", raw=b"x" * 300, content_type=None), 413, "payload_too_large")
        # over the cap but broken, or without a content type: still 413 first
        assert_error(
            await client.call("POST", ctx_path("cap", "associations"), raw=b"[" * 300), 413, "payload_too_large"
        )
        assert_error(
            await client.call("POST", ctx_path("cap", "associations"), raw=b"[" * 300, content_type=None),
            413,
            "payload_too_large",
        )
        await assert_unchanged(client, "cap", before)
        assert await context_names(client) == ["cap"]
        # exactly at the cap is accepted
        body = json.dumps([assoc()], separators=(",", ":")).encode()
        body = body[:-1] + b" " * (256 - len(body)) + b"]"
        assert len(body) == 256
        assert assert_ok(await client.call("POST", ctx_path("cap", "associations"), raw=body)) == 1
    finally:
        await session.close()
        await server.close()


# ----- POST /contexts/{name}/associations ------------------------------------------------------------


async def test_associations_typed_body_rejections(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "associations")
    assert_error(await client.call("POST", path, [assoc()], content_type=None), 415, "malformed_request", TYPE_415)
    assert_error(
        await client.call("POST", path, [assoc()], content_type="text/plain"), 415, "malformed_request", TYPE_415
    )
    assert_error(await client.call("POST", path, raw=b'[{"subject":'), 400, "malformed_request", prefix=PARSE_400)
    assert_error(await client.call("POST", path, raw=b""), 400, "malformed_request", prefix=PARSE_400)
    assert_error(await client.call("POST", path, raw=b'[{"weight":NaN}]'), 400, "malformed_request", prefix=PARSE_400)
    # serde refuses numbers out of the f64 range at parse time
    assert_error(
        await client.call("POST", path, raw=b'[{"subject":"a","label":"b","object":"c","weight":1e400}]'),
        400,
        "malformed_request",
        prefix=PARSE_400,
    )
    assert_error(await client.call("POST", path, raw=b"\xff"), 400, "malformed_request", prefix=PARSE_400)
    await assert_unchanged(client, "w", before)


async def test_associations_wrong_shapes_are_400_issues_not_422(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "associations")
    what = "the associations batch"
    assert_collected(
        await client.call("POST", path, {"subject": "a"}), what, [("associations", "type", "an array", "object")]
    )
    assert_collected(await client.call("POST", path, "text"), what, [("associations", "type", "an array", "string")])
    assert_collected(await client.call("POST", path, raw=b"null"), what, [("associations", "type", "an array", "null")])
    assert_collected(
        await client.call("POST", path, [1, "x", None, [], True, assoc()]),
        what,
        [
            ("associations[0]", "type", "an object", "number"),
            ("associations[1]", "type", "an object", "string"),
            ("associations[2]", "type", "an object", "null"),
            ("associations[3]", "type", "an object", "array"),
            ("associations[4]", "type", "an object", "boolean"),
        ],
    )
    await assert_unchanged(client, "w", before)


async def test_associations_field_issues(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "associations")
    what = "the associations batch"
    long_name = "a" * 1025
    items = [
        {"label": "l", "object": "o", "weight": 1},  # 0 subject missing
        {"subject": None, "label": 5, "object": "", "weight": 1},  # 1 missing, type, empty
        {"subject": long_name, "label": "l", "object": "o", "weight": 1},  # 2 too long
        {"subject": "あ" * 342, "label": "l", "object": "o", "weight": 1},  # 3 1026 bytes
        {"subject": "s", "label": "l", "object": "o"},  # 4 weight missing
        {"subject": "s", "label": "l", "object": "o", "weight": "1"},  # 5 weight type
        {"subject": "s", "label": "l", "object": "o", "weight": True},  # 6 weight bool
        {"subject": "s", "label": "l", "object": "o", "weight": 10000000},  # 7 int range
        {"subject": "s", "label": "l", "object": "o", "weight": 2000000.5},  # 8 float range
        {"subject": "s", "label": "l", "object": "o", "weight": -1e7},  # 9 float range, integral
        {"subject": "s", "label": "l", "object": "o", "weight": 1, "source": 5},  # 10 source type
        {"subject": "s", "label": "l", "object": "o", "weight": 1, "source": ""},  # 11 source empty
        {"subject": "s", "label": "l", "object": "o", "weight": 1, "source": long_name},  # 12 source long
        {"subject": "s", "label": "l", "object": "o", "weight": 1, "paragraph": -1},  # 13
        {"subject": "s", "label": "l", "object": "o", "weight": 1, "paragraph": 1.5},  # 14
        {"subject": "s", "label": "l", "object": "o", "weight": 1, "paragraph": "0"},  # 15
        {"subject": "s", "label": "l", "object": "o", "weight": 1, "paragraph": 4294967296},  # 16
        {"subject": "s", "label": "l", "object": "o", "weight": 1, "paragraph": 1.0},  # 17
        assoc(),  # 18: fine, but nothing is applied
    ]
    assert_collected(
        await client.call("POST", path, items),
        what,
        [
            ("associations[0].subject", "missing", NON_EMPTY, "absent"),
            ("associations[1].subject", "missing", NON_EMPTY, "absent"),
            ("associations[1].label", "type", NON_EMPTY, "number"),
            ("associations[1].object", "empty", NON_EMPTY, "an empty string"),
            ("associations[2].subject", "too_long", "at most 1024 bytes", "1025 bytes"),
            ("associations[3].subject", "too_long", "at most 1024 bytes", "1026 bytes"),
            ("associations[4].weight", "missing", WEIGHT_EXPECTED, "absent"),
            ("associations[5].weight", "type", WEIGHT_EXPECTED, "string"),
            ("associations[6].weight", "type", WEIGHT_EXPECTED, "boolean"),
            ("associations[7].weight", "range", WEIGHT_EXPECTED, "number 10000000"),
            ("associations[8].weight", "range", WEIGHT_EXPECTED, "number 2000000.5"),
            ("associations[9].weight", "range", WEIGHT_EXPECTED, "number -10000000.0"),
            ("associations[10].source", "type", "a string", "number"),
            ("associations[11].source", "empty", NON_EMPTY, "an empty string"),
            ("associations[12].source", "too_long", "at most 1024 bytes", "1025 bytes"),
            ("associations[13].paragraph", "type", PARAGRAPH_EXPECTED, "number"),
            ("associations[14].paragraph", "type", PARAGRAPH_EXPECTED, "number"),
            ("associations[15].paragraph", "type", PARAGRAPH_EXPECTED, "string"),
            ("associations[16].paragraph", "type", PARAGRAPH_EXPECTED, "number"),
            ("associations[17].paragraph", "type", PARAGRAPH_EXPECTED, "number"),
        ],
    )
    await assert_unchanged(client, "w", before)


async def test_associations_issue_list_caps_at_20(client: Client) -> None:
    before = await seeded(client)
    items = [{"subject": "", "label": "l", "object": "o", "weight": 1}] * 25
    resp = await client.call("POST", ctx_path("w", "associations"), items)
    issues = [(f"associations[{i}].subject", NON_EMPTY, "an empty string") for i in range(25)]
    body = assert_error(resp, 400, "invalid_argument", collected_text("the associations batch", issues))
    assert body["error"].endswith("\n… and 5 more issue(s); nothing was applied")
    assert len(body["issues"]) == 20 and body["issues_total"] == 25
    assert body["issues"][19]["path"] == "associations[19].subject"
    assert body["integrity"] == "nothing_written" and body["retryable_after_correction"] is True
    await assert_unchanged(client, "w", before)


async def test_associations_over_limit_checked_first(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "associations")
    body = assert_error(
        await client.call("POST", path, [{}] * 10001),
        400,
        "over_limit",
        "batch of 10001 associations exceeds the per-request limit of 10000; split the ingest",
    )
    assert "issues" not in body
    # over the limit on a missing context is still the 400
    assert_error(await client.call("POST", ctx_path("nope", "associations"), [{}] * 10001), 400, "over_limit")
    await assert_unchanged(client, "w", before)
    # exactly 10000 lands
    many = [assoc(s=f"s{i}") for i in range(10000)]
    assert assert_ok(await client.call("POST", path, many)) == 10000
    after = await entry(client, "w")
    assert after["revision"]["graph"] == before["revision"]["graph"] + 10000


async def test_associations_unknown_context_after_validation(client: Client) -> None:
    assert_error(
        await client.call("POST", ctx_path("nope", "associations"), [assoc()]),
        404,
        "no_context",
        "context 'nope' not found",
    )
    assert_collected(
        await client.call("POST", ctx_path("nope", "associations"), [assoc(w="x")]),
        "the associations batch",
        [("associations[0].weight", "type", WEIGHT_EXPECTED, "string")],
    )
    assert await context_names(client) == []


async def test_associations_apply(client: Client) -> None:
    await make_context(client, "a")
    path = ctx_path("a", "associations")
    assert assert_ok(await client.call("POST", path, [])) == 0
    assert (await entry(client, "a"))["revision"] == {"graph": 0, "passages": 0, "config": 0}
    n = assert_ok(
        await client.call(
            "POST",
            path,
            [
                assoc(w=1, source="d1", paragraph=3),
                assoc(w=3.0, source="d1", paragraph=9),  # same record: paragraph is first-write-wins
                assoc(w=2, source="d2"),
                assoc(w=4, paragraph=5),  # unsourced: paragraph ignored
                assoc(w=1e6, extra="ignored"),
            ],
        )
    )
    assert n == 5
    result = assert_ok(await client.call("POST", ctx_path("a", "query"), {"subject": "alpha"}))
    (m,) = result["matches"]
    assert (m["weight"], m["count"]) == ((1 + 3 + 2 + 4 + 1e6) / 5, 5)
    assert [(a["source"], a["weight"], a["count"], a["paragraph"]) for a in m["attributions"]] == [
        ("d1", 4.0, 2, 3),
        ("d2", 2.0, 1, None),
    ]
    e = await entry(client, "a")
    assert e["revision"] == {"graph": 5, "passages": 0, "config": 0}
    assert e["stats"]["unsourced_edges"] == 1
    assert e["stats"]["unsourced_weight"] == 1000004.0


# ----- POST …/associations/retract -------------------------------------------------------------------


async def test_retract_association_refusals(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "associations/retract")
    triple = {"subject": "alpha", "label": "connects_to", "object": "beta"}
    assert_error(
        await client.call("POST", path, dict(triple, subject="")),
        400,
        "invalid_argument",
        "subject must not be empty; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, dict(triple, label="l" * 1025)),
        400,
        "invalid_argument",
        "label is 1025 bytes, over the 1024-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, dict(triple, subject="", object="")),
        400,
        "invalid_argument",
        "subject must not be empty; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, dict(triple, subject="s" * 2000, label="")),
        400,
        "invalid_argument",
        "subject is 2000 bytes, over the 1024-byte cap; nothing was applied",
    )
    # shape problems are 422, and they win over the handler's 400s
    assert_error(
        await client.call("POST", path, {"subject": "alpha", "label": "connects_to"}),
        422,
        "malformed_request",
        prefix=DESER_422,
    )
    assert_error(
        await client.call("POST", path, {"subject": "", "label": 5, "object": "beta"}),
        422,
        "malformed_request",
        prefix=DESER_422,
    )
    assert_error(await client.call("POST", path, [triple]), 422, "malformed_request", prefix=DESER_422)
    assert_error(await client.call("POST", path, triple, content_type=None), 415, "malformed_request", TYPE_415)
    assert_error(await client.call("POST", path, raw=b"{"), 400, "malformed_request", prefix=PARSE_400)
    assert_error(
        await client.call("POST", ctx_path("nope", "associations/retract"), triple),
        404,
        "no_context",
        "context 'nope' not found",
    )
    # unknown triples are a no-op success
    for t in (
        dict(triple, object="nowhere"),
        dict(triple, label="unknown"),
        {"subject": "x", "label": "y", "object": "z"},
    ):
        assert assert_ok(await client.call("POST", path, t)) == {"retracted": False, "attributions_removed": 0}
    await assert_unchanged(client, "w", before)


async def test_retract_association_effect(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "associations/retract")
    triple = {"subject": "Alpha", "label": "connects_to", "object": "beta"}  # alias-folded lookup
    assert assert_ok(await client.call("POST", path, triple)) == {"retracted": True, "attributions_removed": 1}
    after = await entry(client, "w")
    assert after["revision"] == dict(before["revision"], graph=before["revision"]["graph"] + 1)
    assert after["stats"]["dead_edges"] == 1 and after["stats"]["dead_attributions"] == 1
    assert after["stats"]["associations"] == before["stats"]["associations"]
    # a dead triple retracts as false and bumps nothing
    assert assert_ok(await client.call("POST", path, triple)) == {"retracted": False, "attributions_removed": 0}
    assert (await entry(client, "w"))["revision"] == after["revision"]


# ----- POST /contexts/{name}/sources -----------------------------------------------------------------


async def test_sources_typed_body_rejections(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "sources")
    body = {"passages": {"n.md": "x"}}
    assert_error(await client.call("POST", path, body, content_type=None), 415, "malformed_request", TYPE_415)
    assert_error(await client.call("POST", path, raw=b'{"passages":{'), 400, "malformed_request", prefix=PARSE_400)
    assert_collected(await client.call("POST", path, [body]), "the passage store", [("", "type", "an object", "array")])
    assert_collected(await client.call("POST", path, "x"), "the passage store", [("", "type", "an object", "string")])
    assert_collected(
        await client.call("POST", path, {}), "the passage store", [("passages", "missing", "an object", "absent")]
    )
    assert_collected(
        await client.call("POST", path, {"passages": ["a"]}),
        "the passage store",
        [("passages", "type", "an object", "array")],
    )
    await assert_unchanged(client, "w", before)


async def test_sources_over_limit_checked_first(client: Client) -> None:
    before = await seeded(client)
    passages = {f"s{i}": 5 for i in range(1001)}  # every text is also wrong
    body = assert_error(
        await client.call("POST", ctx_path("w", "sources"), {"passages": passages}),
        400,
        "over_limit",
        "batch of 1001 passages exceeds the per-request limit of 1000; split the store",
    )
    assert "issues" not in body
    assert_error(await client.call("POST", ctx_path("nope", "sources"), {"passages": passages}), 400, "over_limit")
    await assert_unchanged(client, "w", before)
    ok = {f"s{i}": f"text {i}" for i in range(1000)}
    assert assert_ok(await client.call("POST", ctx_path("w", "sources"), {"passages": ok}))["stored"] == 1000


async def test_sources_collected_issues(client: Client) -> None:
    before = await seeded(client)
    long_key = "k" * 1025
    body = {
        "passages": {"": "x", long_key: "x", "num.md": 5, "ok.md": "p0\n\np1", "empty.md": ""},
        "questions": {
            "ok.md": [
                {"paragraph": 0, "question": ""},
                {"paragraph": 0, "question": "q" * 513},
                {"question": "where"},
                {"paragraph": -1, "question": "q"},
                "bad",
                {"paragraph": 0, "question": 7},
            ],
            "ghost.md": [{"paragraph": 0, "question": "q"}],
        },
        "sections": {
            "ok.md": [{"paragraph": 1, "section": "s" * 513}, {"paragraph": 1.5, "section": "x"}],
            "ghost2.md": [],
        },
        "locators": {
            "ok.md": [
                {"paragraph": 0, "locator": {"kind": "k" * 65, "value": "v"}},
                {"paragraph": 0, "locator": {"kind": "page", "value": "v" * 513}},
                {"paragraph": 0},
            ]
        },
        "tags": {"ok.md": ["", "t" * 129, 3], "empty.md": [f"t{i}" for i in range(33)], "ghost3.md": ["a"]},
        "dates": {"ok.md": -1, "empty.md": 1.5, "ghost4.md": 1},
    }
    resp = await client.call("POST", ctx_path("w", "sources"), body)
    got = assert_error(resp, 400, "invalid_argument", prefix="the passage store refused ")
    assert got["integrity"] == "nothing_written" and got["retryable_after_correction"] is True
    paths_kinds = [(i["path"], i["kind"]) for i in got["issues"]]
    # the client sends keys sorted, so each map is walked in key order
    expected = [
        ("passages['']", "empty"),
        (f"passages['{long_key}']", "too_long"),
        ("passages['num.md']", "type"),
        ("questions['ghost.md']", "unknown_reference"),
        ("questions['ok.md'][0].question", "empty"),
        ("questions['ok.md'][1].question", "too_long"),
        ("questions['ok.md'][2].paragraph", "missing"),
        ("questions['ok.md'][3].paragraph", "type"),
        ("questions['ok.md'][4]", "type"),
        ("questions['ok.md'][5].question", "type"),
        ("sections['ghost2.md']", "unknown_reference"),
        ("sections['ok.md'][0].section", "too_long"),
        ("sections['ok.md'][1].paragraph", "type"),
        ("locators['ok.md'][0].locator.kind", "too_long"),
        ("locators['ok.md'][1].locator.value", "too_long"),
        ("locators['ok.md'][2].locator", "missing"),
        ("tags['empty.md']", "over_limit"),
        ("tags['ghost3.md']", "unknown_reference"),
        ("tags['ok.md'][0]", "empty"),
        ("tags['ok.md'][1]", "too_long"),
        ("tags['ok.md'][2]", "type"),
        ("dates['empty.md']", "type"),
        ("dates['ghost4.md']", "unknown_reference"),
        ("dates['ok.md']", "type"),
    ]
    assert got["issues_total"] == len(expected)
    assert paths_kinds == expected[:20]
    by_path = {i["path"]: i for i in got["issues"]}
    assert by_path["passages['']"] == {
        "path": "passages['']",
        "kind": "empty",
        "expected": NON_EMPTY,
        "actual": "an empty string",
    }
    assert by_path[f"passages['{long_key}']"]["expected"] == "at most 1024 bytes"
    assert by_path[f"passages['{long_key}']"]["actual"] == "1025 bytes"
    assert by_path["passages['num.md']"]["actual"] == "number"
    assert by_path["questions['ok.md'][1].question"]["actual"] == "513 bytes"
    assert by_path["questions['ok.md'][1].question"]["expected"] == "at most 512 bytes"
    assert by_path["questions['ghost.md']"] == {
        "path": "questions['ghost.md']",
        "kind": "unknown_reference",
        "expected": UNKNOWN_REF,
        "actual": "not present in this request",
    }
    assert by_path["locators['ok.md'][0].locator.kind"]["expected"] == "at most 64 bytes"
    assert by_path["locators['ok.md'][1].locator.value"]["expected"] == "at most 512 bytes"
    assert got["error"].endswith("\n… and 4 more issue(s); nothing was applied")
    await assert_unchanged(client, "w", before)


async def test_sources_ninth_question_and_unknown_context(client: Client) -> None:
    before = await seeded(client)
    qs = [{"paragraph": 0, "question": f"q{i}"} for i in range(9)]
    resp = await client.call("POST", ctx_path("w", "sources"), {"passages": {"d": "x"}, "questions": {"d": qs}})
    body = assert_error(resp, 400, "invalid_argument", prefix="the passage store refused 1 issue(s):")
    assert [(i["path"], i["kind"]) for i in body["issues"]] == [("questions['d'][8].paragraph", "over_limit")]
    # eight per paragraph, and another paragraph's questions count apart
    ok = qs[:8] + [{"paragraph": 1, "question": "other"}]
    await assert_unchanged(client, "w", before)
    assert_error(
        await client.call("POST", ctx_path("nope", "sources"), {"passages": {"d": "x"}}),
        404,
        "no_context",
        "context 'nope' not found",
    )
    result = assert_ok(
        await client.call("POST", ctx_path("w", "sources"), {"passages": {"d": "x\n\ny"}, "questions": {"d": ok}})
    )
    assert result["questions_stored"] == 9 and result["questions_dropped"] == 0


async def test_sources_store_counts_and_wholesale_replacement(client: Client) -> None:
    await make_context(client, "s")
    path = ctx_path("s", "sources")
    first = {
        "passages": {"doc": "p0\n\np1\n\np2", "other": "keep me"},
        "questions": {"doc": [{"paragraph": 0, "question": "q0"}, {"paragraph": 7, "question": "q7"}]},
        "sections": {
            "doc": [
                {"paragraph": 1, "section": "S1"},
                {"paragraph": 1, "section": "S1b"},
                {"paragraph": 5, "section": "S5"},
                {"paragraph": 0, "section": ""},
            ]
        },
        "locators": {
            "doc": [
                {"paragraph": 2, "locator": {"kind": "page", "value": "3"}},
                {"paragraph": 2, "locator": {"kind": "page", "value": "4"}},
                {"paragraph": 3, "locator": {"kind": "page", "value": "9"}},
            ]
        },
        "tags": {"doc": ["b", "a", "b"]},
        "dates": {"doc": 1700000000},
    }
    assert assert_ok(await client.call("POST", path, first)) == {
        "stored": 2,
        "questions_stored": 1,
        "questions_dropped": 1,
        "sections_stored": 2,
        "sections_dropped": 2,
        "locators_stored": 1,
        "locators_dropped": 2,
    }
    cite = ctx_path("s", "citations")
    assert assert_ok(await client.call("POST", cite, {"source": "doc", "paragraph": 1})) == {
        "text": "p1",
        "source": "doc",
        "section": "S1b",
        "locator": None,
    }
    assert assert_ok(await client.call("POST", cite, {"source": "doc", "paragraph": 2})) == {
        "text": "p2",
        "source": "doc",
        "section": "S1b",
        "locator": {"kind": "page", "value": "4"},
    }
    listing = assert_ok(await client.call("GET", ctx_path("s", "sources")))
    doc_entry = listing["entries"][0]
    assert doc_entry["name"] == "doc" and doc_entry["tags"] == ["a", "b"] and doc_entry["date"] == 1700000000
    assert isinstance(doc_entry["stored_at"], int)
    e1 = await entry(client, "s")
    assert e1["revision"]["passages"] == 2
    # storing again replaces text, markers and metadata wholesale; 'other' is untouched
    assert assert_ok(await client.call("POST", path, {"passages": {"doc": "only one"}}))["stored"] == 1
    assert assert_ok(await client.call("POST", cite, {"source": "doc", "paragraph": 0})) == {
        "text": "only one",
        "source": "doc",
        "section": None,
        "locator": None,
    }
    assert_error(
        await client.call("POST", cite, {"source": "doc", "paragraph": 1}),
        404,
        "no_paragraph",
        "paragraph 1 out of range for source 'doc' in context 's'",
    )
    listing = assert_ok(await client.call("GET", ctx_path("s", "sources")))
    assert listing["sources"] == ["doc", "other"]
    assert "tags" not in listing["entries"][0] and "date" not in listing["entries"][0]
    assert assert_ok(await client.call("POST", ctx_path("s", "sources/lookup"), {"sources": ["other"]})) == {
        "passages": {"other": "keep me"},
        "missing": [],
    }
    assert (await entry(client, "s"))["revision"]["passages"] == 3
    # an empty text is a stored passage with zero paragraphs
    assert_ok(await client.call("POST", path, {"passages": {"doc": ""}}))
    assert_error(
        await client.call("POST", cite, {"source": "doc", "paragraph": 0}),
        404,
        "no_paragraph",
        "paragraph 0 out of range for source 'doc' in context 's'",
    )


# ----- POST …/sources/retract ------------------------------------------------------------------------


async def test_sources_retract_refusals(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "sources/retract")
    assert_error(
        await client.call("POST", path, {"source": ""}),
        400,
        "invalid_argument",
        "source must not be empty; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"source": "s" * 1025}),
        400,
        "invalid_argument",
        "source is 1025 bytes, over the 1024-byte cap; nothing was applied",
    )
    assert_error(await client.call("POST", path, {}), 422, "malformed_request", prefix=DESER_422)
    assert_error(await client.call("POST", path, {"source": 1}), 422, "malformed_request", prefix=DESER_422)
    assert_error(
        await client.call("POST", path, {"source": "doc.md"}, content_type=None), 415, "malformed_request", TYPE_415
    )
    assert_error(await client.call("POST", path, raw=b"{]"), 400, "malformed_request", prefix=PARSE_400)
    assert_error(
        await client.call("POST", ctx_path("nope", "sources/retract"), {"source": "doc.md"}),
        404,
        "no_context",
        "context 'nope' not found",
    )
    assert assert_ok(await client.call("POST", path, {"source": "unknown"})) == {
        "associations_touched": 0,
        "passage_removed": False,
    }
    # dry_run computes the same answer without writing
    assert assert_ok(await client.call("POST", path + "?dry_run=true", {"source": "doc.md"})) == {
        "associations_touched": 1,
        "passage_removed": True,
    }
    await assert_unchanged(client, "w", before)


async def test_sources_retract_effect(client: Client) -> None:
    await make_context(client, "r")
    assert_ok(
        await client.call(
            "POST",
            ctx_path("r", "associations"),
            [assoc(w=2.0, source="a"), assoc(w=4.0, source="b"), assoc("x", "r", "y", 1.0, source="a")],
        )
    )
    assert_ok(await client.call("POST", ctx_path("r", "sources"), {"passages": {"a": "text a", "b": "text b"}}))
    before = await entry(client, "r")
    result = assert_ok(await client.call("POST", ctx_path("r", "sources/retract"), {"source": "a"}))
    assert result == {"associations_touched": 2, "passage_removed": True}
    after = await entry(client, "r")
    assert after["revision"] == {
        "graph": before["revision"]["graph"] + 1,
        "passages": before["revision"]["passages"] + 1,
        "config": 0,
    }
    assert after["stats"]["dead_edges"] == 1 and after["stats"]["dead_attributions"] == 2
    q = assert_ok(await client.call("POST", ctx_path("r", "query"), {"label": ["connects_to", "r"]}))
    assert [
        (m["subject"], m["weight"], m["count"], [a["source"] for a in m["attributions"]]) for m in q["matches"]
    ] == [("alpha", 4.0, 1, ["b"]), ("x", 0.0, 0, [])]
    assert assert_ok(await client.call("POST", ctx_path("r", "sources/lookup"), {"sources": ["a", "b"]})) == {
        "passages": {"b": "text b"},
        "missing": ["a"],
    }
    # retracting again touches nothing and bumps nothing
    assert assert_ok(await client.call("POST", ctx_path("r", "sources/retract"), {"source": "a"})) == {
        "associations_touched": 0,
        "passage_removed": False,
    }
    assert (await entry(client, "r"))["revision"] == after["revision"]
    # a passage-only source: the passage goes, the graph revision stays
    assert_ok(await client.call("POST", ctx_path("r", "sources"), {"passages": {"lone": "t"}}))
    mid = await entry(client, "r")
    assert assert_ok(await client.call("POST", ctx_path("r", "sources/retract"), {"source": "lone"})) == {
        "associations_touched": 0,
        "passage_removed": True,
    }
    assert (await entry(client, "r"))["revision"] == dict(mid["revision"], passages=mid["revision"]["passages"] + 1)


# ----- aliases -----------------------------------------------------------------------------------------


async def test_aliases_post_refusals(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "aliases")
    over = {f"a{i}": "alpha" for i in range(6000)}
    over_l = {f"l{i}": "near" for i in range(4001)}
    assert_error(
        await client.call("POST", path, {"concepts": over, "labels": over_l}),
        400,
        "over_limit",
        "batch of 10001 aliases exceeds the per-request limit of 10000; split the ingest",
    )
    assert_error(
        await client.call("POST", path, {"concepts": {"a" * 1025: "alpha"}}),
        400,
        "invalid_argument",
        "a concepts alias is 1025 bytes, over the 1024-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"concepts": {"A2": "c" * 1025}}),
        400,
        "invalid_argument",
        "a concepts canonical is 1025 bytes, over the 1024-byte cap; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"concepts": {"": "alpha"}}),
        400,
        "invalid_argument",
        "a concepts alias must not be empty; nothing was applied",
    )
    assert_error(
        await client.call("POST", path, {"labels": {"near2": ""}}),
        400,
        "invalid_argument",
        "a labels canonical must not be empty; nothing was applied",
    )
    # size is checked before emptiness within a pair, alias before canonical
    assert_error(
        await client.call("POST", path, {"labels": {"": "n" * 2000}}),
        400,
        "invalid_argument",
        "a labels canonical is 2000 bytes, over the 1024-byte cap; nothing was applied",
    )
    assert_error(await client.call("POST", path, {"concepts": ["A"]}), 422, "malformed_request", prefix=DESER_422)
    assert_error(await client.call("POST", path, {"concepts": {"A": 1}}), 422, "malformed_request", prefix=DESER_422)
    assert_error(
        await client.call("POST", path, {"concepts": {"B": "alpha"}}, content_type=None),
        415,
        "malformed_request",
        TYPE_415,
    )
    assert_error(await client.call("POST", path, raw=b'{"concepts":'), 400, "malformed_request", prefix=PARSE_400)
    assert_error(
        await client.call("POST", ctx_path("nope", "aliases"), {"concepts": {"B": "alpha"}}),
        404,
        "no_context",
        "context 'nope' not found",
    )
    # refusals at the first pair apply nothing
    assert_error(
        await client.call("POST", path, {"concepts": {"B": "missing"}}),
        409,
        "conflict",
        "applied 0 aliases, then concept alias 'B' → 'missing': the canonical spelling is not interned",
    )
    assert_error(
        await client.call("POST", path, {"concepts": {"beta": "alpha"}}),
        409,
        "conflict",
        "applied 0 aliases, then concept alias 'beta' → 'alpha': the alias already resolves to a different record",
    )
    assert_error(
        await client.call("POST", path, {"concepts": {"Alpha": "beta"}}),
        409,
        "conflict",
        "applied 0 aliases, then concept alias 'Alpha' → 'beta': the alias already resolves to a different record",
    )
    assert_error(
        await client.call("POST", path, {"labels": {"rel": "nope"}}),
        409,
        "conflict",
        "applied 0 aliases, then label alias 'rel' → 'nope': the canonical spelling is not interned",
    )
    await assert_unchanged(client, "w", before)


async def test_aliases_post_apply_order_and_partial(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "aliases")
    # sorted order, concepts first: 'A1' lands, 'B1' fails, 'Z1' and the labels never run
    resp = await client.call(
        "POST", path, {"concepts": {"Z1": "alpha", "B1": "nope", "A1": "beta"}, "labels": {"CT": "connects_to"}}
    )
    assert_error(
        resp,
        409,
        "conflict",
        "applied 1 aliases, then concept alias 'B1' → 'nope': the canonical spelling is not interned",
    )
    listing = assert_ok(await client.call("GET", ctx_path("w", "aliases")))
    assert listing == {"total": 2, "concepts": {"A1": "beta", "Alpha": "alpha"}, "labels": {}}
    mid = await entry(client, "w")
    assert mid["revision"]["graph"] == before["revision"]["graph"] + 1
    # no-op pairs count as applied and bump the graph revision; chains point at the true record
    result = assert_ok(
        await client.call(
            "POST", path, {"concepts": {"Alpha": "alpha", "AA": "Alpha"}, "labels": {"CT": "connects_to"}}
        )
    )
    assert result == 3
    after = await entry(client, "w")
    assert after["revision"]["graph"] == mid["revision"]["graph"] + 3
    assert after["stats"]["concepts"] == before["stats"]["concepts"]
    listing = assert_ok(await client.call("GET", ctx_path("w", "aliases")))
    assert listing == {
        "total": 4,
        "concepts": {"A1": "beta", "AA": "alpha", "Alpha": "alpha"},
        "labels": {"CT": "connects_to"},
    }


async def test_aliases_delete(client: Client) -> None:
    before = await seeded(client)
    path = ctx_path("w", "aliases")
    assert_error(
        await client.call("DELETE", path, {}), 400, "invalid_argument", "the request names no aliases to remove"
    )
    assert_error(
        await client.call("DELETE", path, {"concepts": [], "labels": []}),
        400,
        "invalid_argument",
        "the request names no aliases to remove",
    )
    assert_error(
        await client.call("DELETE", path, {"concepts": ["x"] * 5000, "labels": ["y"] * 5001}),
        400,
        "over_limit",
        "batch of 10001 alias removals exceeds the per-request limit of 10000; split the request",
    )
    assert_error(await client.call("DELETE", path, {"concepts": "Alpha"}), 422, "malformed_request", prefix=DESER_422)
    assert_error(await client.call("DELETE", path, {"concepts": [1]}), 422, "malformed_request", prefix=DESER_422)
    assert_error(
        await client.call("DELETE", path, {"concepts": ["Alpha"]}, content_type=None),
        415,
        "malformed_request",
        TYPE_415,
    )
    assert_error(
        await client.call("DELETE", ctx_path("nope", "aliases"), {"concepts": ["Alpha"]}),
        404,
        "no_context",
        "context 'nope' not found",
    )
    assert_error(
        await client.call("DELETE", path, {"concepts": ["alpha"]}),
        409,
        "conflict",
        "removed 0 aliases, then 'alpha' is not a concept alias (canonical names cannot be removed this way)",
    )
    assert_error(
        await client.call("DELETE", path, {"labels": ["Alpha"]}),
        409,
        "conflict",
        "removed 0 aliases, then 'Alpha' is not a label alias (canonical names cannot be removed this way)",
    )
    await assert_unchanged(client, "w", before)
    # concepts go first, in the order given; the failure keeps what was removed
    assert_ok(await client.call("POST", path, {"concepts": {"B": "beta"}, "labels": {"CT": "connects_to"}}))
    mid = await entry(client, "w")
    assert_error(
        await client.call("DELETE", path, {"labels": ["CT"], "concepts": ["B", "beta"]}),
        409,
        "conflict",
        "removed 1 aliases, then 'beta' is not a concept alias (canonical names cannot be removed this way)",
    )
    listing = assert_ok(await client.call("GET", ctx_path("w", "aliases")))
    assert listing == {"total": 2, "concepts": {"Alpha": "alpha"}, "labels": {"CT": "connects_to"}}
    assert (await entry(client, "w"))["revision"]["graph"] == mid["revision"]["graph"] + 1
    assert assert_ok(await client.call("DELETE", path, {"concepts": ["Alpha"], "labels": ["CT"]})) == 2
    assert assert_ok(await client.call("GET", ctx_path("w", "aliases"))) == {"total": 0, "concepts": {}, "labels": {}}


# ----- POST /import -------------------------------------------------------------------------------------


def jsonl(*records: Any) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records)


def header(context: str = "imp", source: str = "doc", create: Any = None) -> dict[str, Any]:
    h: dict[str, Any] = {"taguru_batch": 1, "context": context, "source": source}
    if create is not None:
        h["create"] = create
    return h


async def post_import(
    client: Client, text: str | bytes, query: str = "", content_type: str | None = None
) -> tuple[int, Any, dict[str, str]]:
    return await client.call("POST", "/import" + query, raw=text, content_type=content_type)


PARSE_CASES = [
    ('{"taguru_batch":1,"context":"imp","source":"doc"\n', "line 1: not JSON: "),
    (
        jsonl(header(), assoc(w=10000000)),
        "line 2: weight 10000000 is outside the accepted range (finite, |weight| <= 1000000)",
    ),
    (
        jsonl(header(), assoc(w=2000000.5)),
        "line 2: weight 2000000.5 is outside the accepted range (finite, |weight| <= 1000000)",
    ),
    (jsonl(header(), assoc(s="")), "line 2: subject must not be empty"),
    (jsonl(header(), assoc(s="s" * 1025)), "line 2: subject of 1025 bytes exceeds the 1024-byte cap"),
    (jsonl(header(context="c" * 65)), "line 1: context of 65 bytes exceeds the 64-byte cap"),
    (
        jsonl(header(), "", header()),
        "line 3: source 'doc' in context 'imp' is already stated by an earlier batch of this stream — one batch "
        "owns one source's truth",
    ),
    ("", "empty file: expected a batch header, schema record, or group record line"),
    ("\n  \n\t\n", "empty file: expected a batch header, schema record, or group record line"),
]


@pytest.mark.parametrize("text,message", PARSE_CASES)
async def test_import_parse_errors(client: Client, text: str, message: str) -> None:
    before = await seeded(client)
    for ct in (None, "application/x-ndjson", "application/json"):
        body = assert_error(await post_import(client, text, content_type=ct), 400, "malformed_request")
        if message.endswith(": "):
            assert body["error"].startswith(message), body["error"]
        else:
            assert body["error"] == message
        assert body["integrity"] == "nothing_written" and body["retryable_after_correction"] is True
        assert "durable_batches" not in body
        # a refusal under dry_run reads the same
        assert_error(await post_import(client, text, "?dry_run=true"), 400, "malformed_request", body["error"])
    await assert_unchanged(client, "w", before)
    assert await context_names(client) == ["w"]


@pytest.mark.parametrize(
    "lines",
    [
        [{"subject": "a", "label": "b", "object": "c", "weight": 1}],  # op before header
        [header(create={}), assoc(source="x")],  # source on an op
        [header(create={}), dict(assoc(), extra=1)],  # closed record
        [dict(header(create={}), extra=1)],  # closed header
        [header(create={}), {"paragraph": 0, "section": "S"}],  # marker, no passage
        [header(create={}), assoc(paragraph=0)],  # paragraph, no passage
        [header(create={}), {"passage": "a"}, {"passage": "b"}],  # two passages
        [
            header(create={}),
            {"alias": "A", "canonical": "alpha", "kind": "concept"},
            {"alias": "A", "canonical": "beta", "kind": "concept"},
        ],  # alias twice
        [header(create={}), {"passage": "x"}] + [{"paragraph": 0, "question": f"q{i}"} for i in range(9)],
        [dict(header(create={}), taguru_batch=2)],  # unknown version
        [header(create={"description": "d" * 4097})],
        [header(create={}), {"passage": "x", "tags": [f"t{i}" for i in range(33)]}],
        [header(create={}), {"passage": "x", "tags": [""]}],
        ["[1,2]"],
        [header(create={}), {"unknown": 1}],
        [header(create={}), {"alias": "A", "canonical": "alpha", "kind": "other"}],
    ],
)
async def test_import_more_parse_errors(client: Client, lines: list[Any]) -> None:
    before = await seeded(client)
    body = assert_error(await post_import(client, jsonl(*lines)), 400, "malformed_request", prefix="line ")
    assert body["integrity"] == "nothing_written" and body["retryable_after_correction"] is True
    await assert_unchanged(client, "w", before)
    assert await context_names(client) == ["w"]


async def test_import_non_finite_weight_is_never_500(client: Client) -> None:
    before = await seeded(client)
    text = (
        '{"taguru_batch":1,"context":"imp","source":"doc","create":{}}\n'
        '{"subject":"a","label":"b","object":"c","weight":1e400}\n'
    )
    body = assert_error(await post_import(client, text), 400, "malformed_request")
    assert body["integrity"] == "nothing_written"
    await assert_unchanged(client, "w", before)
    assert await context_names(client) == ["w"]


async def test_import_non_finite_weight_reads_as_not_json(client: Client) -> None:
    text = (
        '{"taguru_batch":1,"context":"imp","source":"doc","create":{}}\n'
        '{"subject":"a","label":"b","object":"c","weight":1e400}\n'
    )
    assert_error(await post_import(client, text), 400, "malformed_request", prefix="line 2: not JSON: ")


async def test_import_large_weight_prints_in_rust_display_form(client: Client) -> None:
    text = jsonl(header(create={}), assoc(w=1e20))
    assert_error(
        await post_import(client, text),
        400,
        "malformed_request",
        "line 2: weight 100000000000000000000 is outside the accepted range (finite, |weight| <= 1000000)",
    )


async def test_import_bom_blank_lines_and_any_content_type(client: Client) -> None:
    text = "\ufeff\n" + jsonl(
        header(create={"description": "imported"}),
        {"passage": "p0\n\np1"},
        {"paragraph": 1, "locator": {"kind": "page", "value": "2"}},
        "   ",
        assoc(paragraph=1),
    )
    result = assert_ok(await post_import(client, text.encode("utf-8"), content_type="text/plain"))
    (outcome,) = result["batches"]
    assert outcome == {
        "context": "imp",
        "source": "doc",
        "created": True,
        "retracted": 0,
        "associations": 1,
        "aliases": 0,
        "passage_stored": True,
        "passage_dropped": False,
        "questions_stored": 0,
        "questions_dropped": 0,
        "sections_stored": 0,
        "sections_dropped": 0,
        "locators_stored": 1,
        "locators_dropped": 0,
        "association_paragraphs_dropped": 0,
        "schema_violations": 0,
    }
    assert set(result) == {"batches"}
    e = await entry(client, "imp")
    assert e["description"] == "imported"


async def test_import_single_batch_refusals(client: Client) -> None:
    before = await seeded(client)
    # no context and no create block
    for query in ("", "?dry_run=true"):
        body = assert_error(
            await post_import(client, jsonl(header(context="fresh"), assoc()), query),
            404,
            "no_context",
            "context 'fresh' does not exist and the batch brought no create block",
        )
        assert body["issues"] == [
            {
                "path": "batches[0].create",
                "kind": "missing",
                "expected": "a create block, since the named context does not exist yet",
                "actual": "absent",
            }
        ]
        assert body["issues_total"] == 1
        assert body["integrity"] == "nothing_written" and body["retryable_after_correction"] is True
        assert "durable_batches" not in body
    # alias refusals (the existing context 'w' holds alpha, beta, gamma and the alias Alpha)
    body = assert_error(
        await post_import(
            client,
            jsonl(
                header("w", "new.md"),
                assoc("x", "r", "y"),
                {"alias": "Gone", "canonical": "nowhere", "kind": "concept"},
            ),
        ),
        409,
        "conflict",
        "concept alias 'Gone' → 'nowhere': the canonical spelling is not interned; nothing was applied",
    )
    assert body["issues"] == [
        {
            "path": "batches[0].concepts['Gone']",
            "kind": "unknown_reference",
            "expected": "'nowhere' already interned as a concept or label this batch's associations use",
            "actual": "not present in this request",
        }
    ]
    assert body["integrity"] == "nothing_written" and body["retryable_after_correction"] is True
    body = assert_error(
        await post_import(
            client, jsonl(header("w", "new.md"), {"alias": "beta", "canonical": "alpha", "kind": "concept"})
        ),
        409,
        "conflict",
        "concept alias 'beta' → 'alpha': the alias already resolves to a different record; nothing was applied",
    )
    assert body["issues"] == [
        {
            "path": "batches[0].concepts['beta']",
            "kind": "conflict",
            "expected": "resolves to 'alpha'",
            "actual": "already resolves to a different record",
        }
    ]
    body = assert_error(
        await post_import(
            client, jsonl(header("w", "new.md"), {"alias": "L", "canonical": "nolabel", "kind": "label"})
        ),
        409,
        "conflict",
        "label alias 'L' → 'nolabel': the canonical spelling is not interned; nothing was applied",
    )
    assert body["issues"][0]["path"] == "batches[0].labels['L']"
    await assert_unchanged(client, "w", before)
    assert await context_names(client) == ["w"]


async def test_import_mid_stream_refusal_keeps_durable_prefix(client: Client) -> None:
    stream = jsonl(
        header("m", "doc-1", {"description": "m"}),
        {"passage": "one"},
        assoc("a1", "r", "b1"),
        header("m", "doc-2"),
        assoc("a2", "r", "b2"),
        header("absent", "doc-3"),
        assoc("a3", "r", "b3"),
        header("m", "doc-4"),
        assoc("a4", "r", "b4"),
    )
    # the preview refuses at the same batch and writes nothing
    body = assert_error(
        await post_import(client, stream, "?dry_run=true"),
        404,
        "no_context",
        "batch 3 of 4 (context 'absent', source 'doc-3') would be refused — the 2 batch(es) before "
        "it previewed clean (dry_run=true; nothing is written); fixing the stream and re-running the "
        "preview is exact: context 'absent' does not exist and the batch brought no create block",
    )
    assert body["integrity"] == "nothing_written" and "durable_batches" not in body
    assert body["issues"][0]["path"] == "batches[2].create"
    assert await context_names(client) == []
    body = assert_error(
        await post_import(client, stream),
        404,
        "no_context",
        "batch 3 of 4 (context 'absent', source 'doc-3') refused — the 2 batch(es) before it landed "
        "durably; fixing the stream and re-POSTing it whole is exact (each batch replaces its own "
        "source): context 'absent' does not exist and the batch brought no create block",
    )
    assert body["integrity"] == "durable_prefix" and body["durable_batches"] == 2
    assert body["retryable_after_correction"] is True
    assert await context_names(client) == ["m"]
    q = assert_ok(await client.call("POST", ctx_path("m", "query"), {"label": "r"}))
    assert sorted((m["subject"], [a["source"] for a in m["attributions"]]) for m in q["matches"]) == [
        ("a1", ["doc-1"]),
        ("a2", ["doc-2"]),
    ]
    listing = assert_ok(await client.call("GET", ctx_path("m", "sources")))
    assert listing["sources"] == ["doc-1"]
    # a refusal of the first batch of a longer stream has the prefix but writes nothing
    first_bad = jsonl(header("absent", "x"), assoc(), header("m", "doc-9"), assoc())
    body = assert_error(
        await post_import(client, first_bad),
        404,
        "no_context",
        prefix="batch 1 of 2 (context 'absent', source 'x') refused — the 0 batch(es) before it landed durably",
    )
    assert body["integrity"] == "nothing_written" and "durable_batches" not in body


async def test_import_alias_refusal_mid_stream_like_the_fixture(client: Client) -> None:
    stream = jsonl(
        header("corpus-h", "doc-1", {}),
        assoc("Alpha0", "r", "b"),
        header("corpus-h", "doc-2"),
        assoc("x", "r", "y"),
        {"alias": "Alpha", "canonical": "存在しない", "kind": "concept"},
    )
    body = assert_error(await post_import(client, stream), 409, "conflict")
    assert body["error"] == (
        "batch 2 of 2 (context 'corpus-h', source 'doc-2') refused — the 1 batch(es) before it landed durably; "
        "fixing the stream and re-POSTing it whole is exact (each batch replaces its own source): concept alias "
        "'Alpha' → '存在しない': the canonical spelling is not interned; nothing was applied"
    )
    assert body["integrity"] == "durable_prefix" and body["durable_batches"] == 1
    assert (await entry(client, "corpus-h"))["stats"]["associations"] == 1


async def test_import_dry_run_predicts_without_writing(client: Client) -> None:
    stream = jsonl(
        header("dry", "d1", {"description": "x"}),
        {"passage": "a\n\nb"},
        {"paragraph": 5, "section": "gone"},
        assoc(paragraph=1),
        assoc("b", "r", "c", paragraph=4),
        header("dry", "d2"),
        assoc("c", "r", "d"),
        {"alias": "C", "canonical": "c", "kind": "concept"},
    )
    preview = assert_ok(await post_import(client, stream, "?dry_run=true"))
    assert await context_names(client) == []
    real = assert_ok(await post_import(client, stream))
    assert preview == real
    b1, b2 = real["batches"]
    assert (b1["created"], b1["associations"], b1["sections_dropped"], b1["association_paragraphs_dropped"]) == (
        True,
        2,
        1,
        1,
    )
    assert (b2["created"], b2["aliases"]) == (False, 1)
    before = await state(client, "dry")
    # a re-import is idempotent: every batch replaces its own source
    again = assert_ok(await post_import(client, stream))
    assert [b["retracted"] for b in again["batches"]] == [2, 1]
    after = await state(client, "dry")
    assert after["stats"]["associations"] == before["stats"]["associations"]
    assert after["stats"]["dead_edges"] == 0
    q = assert_ok(await client.call("POST", ctx_path("dry", "query"), {"subject": ["alpha", "b", "c"]}))
    assert [(m["subject"], m["count"], m["attributions"][0]["paragraph"]) for m in q["matches"]] == [
        ("alpha", 1, 1),
        ("b", 1, None),
        ("c", 1, None),
    ]
    # a batch without a passage drops the old one
    drop = assert_ok(await post_import(client, jsonl(header("dry", "d1"), assoc())))
    assert drop["batches"][0]["passage_dropped"] is True and drop["batches"][0]["retracted"] == 2
