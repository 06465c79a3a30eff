"""Context schemas over HTTP: the document (GET/PUT, normalization, install refusals, the alias guard), the
write-time check on `POST …/associations` in off/warn/strict, the reserved label on `POST …/aliases`, the
directory's `schema_mode`, the revision bump and the change-feed event; the schema audit and validate."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Client

pytestmark = pytest.mark.anyio

V: dict[str, Any] = {
    "schema": 1,
    "mode": "strict",
    "closed_labels": False,
    "types": {"Brewery": {"is_a": ["Organization"]}, "Organization": {"is_a": []}, "Person": {"is_a": []}},
    "relations": {"杜氏": {"domain": ["Brewery"], "range": ["Person"]}},
}
OFF0: dict[str, Any] = {"schema": 1, "mode": "off", "closed_labels": False, "types": {}, "relations": {}}


def doc(mode: str, **changes: Any) -> dict[str, Any]:
    return {**V, "mode": mode, **changes}


def assoc(s: str, label: str, o: str, weight: float = 1.0, source: str | None = "a.md") -> dict[str, Any]:
    item: dict[str, Any] = {"subject": s, "label": label, "object": o, "weight": weight}
    if source is not None:
        item["source"] = source
    return item


DOMAIN_BATCH = [assoc("高瀬", "schema:type", "Person"), assoc("高瀬", "杜氏", "個人A")]
DOMAIN_ISSUE = {
    "path": "associations[1].subject",
    "kind": "domain",
    "expected": "'高瀬' typed as one of [Brewery] (or a subtype), for relation '杜氏'",
    "actual": "typed as [Person]",
}


async def sake(client: Client, schema: dict[str, Any] | None = None) -> None:
    await client.ok("PUT", "/contexts/sake", {"description": "d"})
    if schema is not None:
        await client.ok("PUT", "/contexts/sake/schema", schema)


async def associations(client: Client, name: str = "sake") -> int:
    body = await client.ok("GET", f"/contexts/{name}")
    return int(body["result"]["stats"]["associations"])


# ----- the document ------------------------------------------------------------------------


async def test_schema_round_trips_and_tells_no_schema_from_no_context(client: Client) -> None:
    await sake(client)
    status, body, _ = await client.call("GET", "/contexts/sake/schema")
    assert (status, body["code"], body["error"]) == (404, "no_schema", "context 'sake' has no schema document")
    status, body, _ = await client.call("GET", "/contexts/nope/schema")
    assert (status, body["code"], body["error"]) == (404, "no_context", "context 'nope' not found")
    status, body, _ = await client.call("PUT", "/contexts/nope/schema", V)
    assert (status, body["code"]) == (404, "no_context")
    assert (await client.ok("PUT", "/contexts/sake/schema", V))["result"] == V
    assert (await client.ok("GET", "/contexts/sake/schema"))["result"] == V


async def test_put_normalizes_the_document(client: Client) -> None:
    await sake(client)
    sent = {
        "schema": 1,
        "mode": "strict",
        "closed_labels": False,
        "types": {"Person": {}, "Brewery": {"is_a": ["Organization", "Organization"]}, "Organization": {}},
        "relations": {"杜氏": {"domain": ["Brewery"], "range": ["Person"]}, "所属": {}},
    }
    status, body, _ = await client.call("PUT", "/contexts/sake/schema", sent)
    assert status == 200
    raw = await client.session.get(client.base + "/contexts/sake/schema")
    text = (await raw.read()).decode("utf-8")
    assert text.startswith(
        '{"result":{"schema":1,"mode":"strict","closed_labels":false,'
        '"types":{"Brewery":{"is_a":["Organization"]},"Organization":{"is_a":[]},"Person":{"is_a":[]}},'
        '"relations":{"所属":{"domain":[],"range":[]},"杜氏":{"domain":["Brewery"],"range":["Person"]}}},'
        '"status":"ok","time":'
    ), text
    assert body["result"] == (await client.ok("GET", "/contexts/sake/schema"))["result"]


@pytest.mark.parametrize(
    ("change", "status", "text"),
    [
        ({"schema": 2}, 400, "schema version 2 is not 1, the only version this binary reads"),
        (
            {"types": {"A": {"is_a": ["B"]}, "B": {"is_a": ["A"]}}},
            400,
            "type 'A' is_a reaches itself through a cycle",
        ),
        ({"types": {"Loop": {"is_a": ["Loop"]}}}, 400, "type 'Loop' is_a reaches itself through a cycle"),
        (
            {"relations": {"schema:type": {}}},
            400,
            "relation 'schema:type' is reserved for type assertions — rename it",
        ),
        ({"types": {f"T{i}": {} for i in range(501)}}, 400, "501 types is over the 500-type cap"),
        ({"relations": {f"r{i}": {} for i in range(501)}}, 400, "501 relations is over the 500-relation cap"),
        ({"types": {"x" * 1025: {}}}, 400, f"'{'x' * 1025}' is over the 1024-byte name cap"),
        (
            {"relations": {"r": {"range": [f"T{i}" for i in range(65)]}}},
            400,
            "relation 'r' names 65 range types, over the 64-type cap",
        ),
        (
            {"types": {f"T{i}": {"is_a": [f"T{i - 1}"]} if i else {} for i in range(9)}},
            400,
            "the is_a chain under type 'T8' stacks more than 8 types",
        ),
        ({"extra": True}, 422, None),
        ({"mode": "loud"}, 422, None),
        ({"closed_labels": None}, 422, None),
        ({"types": {"A": {"is_a": ["B"], "x": 1}}}, 422, None),
        ({"relations": {"r": None}}, 422, None),
        ({"schema": True}, 422, None),
        ({"schema": 1.0}, 422, None),
    ],
)
async def test_install_refusals(client: Client, change: dict[str, Any], status: int, text: str | None) -> None:
    await sake(client)
    got, body, _ = await client.call("PUT", "/contexts/sake/schema", {**V, **change})
    assert got == status, body
    assert body["code"] == ("invalid_argument" if status == 400 else "malformed_request")
    if text is not None:
        assert body["error"] == text
    assert (await client.call("GET", "/contexts/sake/schema"))[0] == 404
    if status == 400:  # the document is checked before the context is looked up
        assert (await client.call("PUT", "/contexts/nope/schema", {**V, **change}))[0] == 400


async def test_a_missing_field_and_a_deep_chain_with_a_junction(client: Client) -> None:
    await sake(client)
    partial = {k: v for k, v in V.items() if k != "relations"}
    assert (await client.call("PUT", "/contexts/sake/schema", partial))[0] == 422
    chain = {f"a{i}": {"is_a": [f"a{i - 1}"]} if i else {} for i in range(8)}
    ok = {**V, "types": chain}
    assert (await client.call("PUT", "/contexts/sake/schema", ok))[0] == 200
    deep = {**chain, "q_mid": {"is_a": ["a7"]}, "p_top": {"is_a": ["q_mid"]}}
    status, body, _ = await client.call("PUT", "/contexts/sake/schema", {**V, "types": deep})
    assert (status, body["error"]) == (400, "the is_a chain under type 'p_top' stacks more than 8 types")


async def test_delete_schema_is_405(client: Client) -> None:
    await sake(client, V)
    status, body, _ = await client.call("DELETE", "/contexts/sake/schema")
    assert (status, body["code"]) == (405, "method_not_allowed")


async def test_a_label_alias_to_the_reserved_label_refuses_the_put(client: Client) -> None:
    await sake(client)
    await client.ok("POST", "/contexts/sake/associations", [assoc("蔵", "schema:type", "Brewery")])
    await client.ok("POST", "/contexts/sake/aliases", {"labels": {"種別": "schema:type"}})
    status, body, _ = await client.call("PUT", "/contexts/sake/schema", V)
    assert (status, body["error"]) == (
        400,
        "label alias '種別' resolves to 'schema:type', the relation label reserved for type assertions "
        "(ADR 0009 §6.3) — rename the alias before installing this schema",
    )
    assert (await client.call("GET", "/contexts/sake/schema"))[0] == 404


async def test_mode_revision_and_feed(client: Client) -> None:
    await sake(client)
    before = (await client.ok("GET", "/contexts/sake"))["result"]
    assert before["schema_mode"] is None
    tail = (await client.ok("GET", "/contexts/sake/changes"))["result"]["next"]
    await client.ok("PUT", "/contexts/sake/schema", doc("warn"))
    after = (await client.ok("GET", "/contexts/sake"))["result"]
    assert after["schema_mode"] == "warn"
    assert after["revision"] == {**before["revision"], "config": before["revision"]["config"] + 1}
    rows = (await client.ok("GET", "/contexts"))["result"]["contexts"]
    assert [r["schema_mode"] for r in rows if r["name"] == "sake"] == ["warn"]
    await client.ok("PUT", "/contexts/sake/schema", doc("warn"))  # identical: nothing changes
    again = (await client.ok("GET", "/contexts/sake"))["result"]
    assert again["revision"] == after["revision"]
    events = (await client.ok("GET", f"/contexts/sake/changes?since={tail}"))["result"]["events"]
    assert [{k: v for k, v in e.items() if k != "seq"} for e in events] == [{"kind": "schema_updated", "mode": "warn"}]
    await client.ok("PUT", "/contexts/sake/schema", doc("off"))
    assert (await client.ok("GET", "/contexts/sake"))["result"]["schema_mode"] == "off"
    version = await client.ok("GET", "/version")
    assert version["schema_formats"] == [1]


async def test_switching_to_strict_succeeds_over_an_existing_violation(client: Client) -> None:
    await sake(client, doc("off"))
    await client.ok("POST", "/contexts/sake/associations", [assoc("高瀬", "杜氏", "青嶺酒造")])
    await client.ok("PUT", "/contexts/sake/schema", doc("strict"))
    assert (await client.ok("GET", "/contexts/sake/schema"))["result"]["mode"] == "strict"


# ----- the associations path -------------------------------------------------------------


async def test_strict_refuses_a_domain_violation_before_any_write(client: Client) -> None:
    await sake(client, V)
    status, body, _ = await client.call("POST", "/contexts/sake/associations", DOMAIN_BATCH)
    assert status == 400
    assert body == {
        "status": "error",
        "code": "invalid_argument",
        "error": "the associations batch refused 1 issue(s):\n- associations[1].subject: expected '高瀬' typed as "
        "one of [Brewery] (or a subtype), for relation '杜氏', got typed as [Person]; nothing was applied",
        "time": body["time"],
        "issues": [DOMAIN_ISSUE],
        "issues_total": 1,
        "integrity": "nothing_written",
        "retryable_after_correction": True,
    }
    assert await associations(client) == 0


async def test_strict_range_violation_names_the_object(client: Client) -> None:
    await sake(client, V)
    batch = [assoc("青嶺酒造", "schema:type", "Brewery"), assoc("高瀬", "schema:type", "Brewery")]
    status, body, _ = await client.call(
        "POST", "/contexts/sake/associations", [*batch, assoc("青嶺酒造", "杜氏", "高瀬")]
    )
    assert status == 400
    assert body["issues"] == [
        {
            "path": "associations[2].object",
            "kind": "range",
            "expected": "'高瀬' typed as one of [Person] (or a subtype), for relation '杜氏'",
            "actual": "typed as [Brewery]",
        }
    ]


async def test_warn_writes_and_reports_and_off_stays_silent(client: Client) -> None:
    await sake(client, doc("warn"))
    raw = await client.session.post(
        client.base + "/contexts/sake/associations",
        data=__import__("json").dumps(DOMAIN_BATCH, ensure_ascii=False).encode(),
        headers={"Content-Type": "application/json"},
    )
    text = (await raw.read()).decode("utf-8")
    assert text.startswith('{"result":2,"status":"ok","time":'), text
    assert text.endswith(
        ',"issues":[{"path":"associations[1].subject","kind":"domain","expected":"\'高瀬\' typed as one of '
        '[Brewery] (or a subtype), for relation \'杜氏\'","actual":"typed as [Person]"}],"schema_violations":1}'
    ), text
    assert await associations(client) == 2
    await client.ok("PUT", "/contexts/sake/schema", doc("off"))
    body = await client.ok("POST", "/contexts/sake/associations", DOMAIN_BATCH)
    assert body.keys() == {"result", "status", "time"} and body["result"] == 2


async def test_warn_counts_past_the_listed_cap(client: Client) -> None:
    await sake(client, doc("warn"))
    batch = []
    for i in range(21):
        batch += [assoc(f"人{i}", "schema:type", "Person"), assoc(f"人{i}", "杜氏", "個人A")]
    body = await client.ok("POST", "/contexts/sake/associations", batch)
    assert (body["result"], body["schema_violations"], len(body["issues"])) == (42, 21, 20)


async def test_a_write_typing_its_subject_after_the_fact_still_validates(client: Client) -> None:
    await sake(client, V)
    batch = [
        assoc("青嶺酒造", "杜氏", "高瀬"),
        assoc("青嶺酒造", "schema:type", "Brewery"),
        assoc("高瀬", "schema:type", "Person"),
    ]
    body = await client.ok("POST", "/contexts/sake/associations", batch)
    assert body.keys() == {"result", "status", "time"} and body["result"] == 3


async def test_closed_labels_refuses_an_undeclared_label(client: Client) -> None:
    await sake(client, {**OFF0, "mode": "strict", "closed_labels": True, "relations": {"杜氏": {}}})
    status, body, _ = await client.call("POST", "/contexts/sake/associations", [assoc("高瀬", "未知の関係", "個人A")])
    assert status == 400
    assert body["issues"] == [
        {
            "path": "associations[0].label",
            "kind": "unknown_reference",
            "expected": "a label declared in this context's schema (closed_labels)",
            "actual": "not declared in this context's schema",
        }
    ]


async def test_ten_asserted_types_are_capped_in_the_text(client: Client) -> None:
    await sake(client, V)
    batch = [assoc("X", "schema:type", f"T{i}") for i in range(10)] + [assoc("X", "杜氏", "Y")]
    status, body, _ = await client.call("POST", "/contexts/sake/associations", batch)
    assert status == 400
    assert body["issues"][0]["actual"] == "typed as [T0, T1, T2, T3, T4, T5, T6, T7, … (+2 more)]"


async def test_types_resolve_through_aliases_and_negative_weights_are_judged(client: Client) -> None:
    await sake(client)
    await client.ok(
        "POST", "/contexts/sake/associations", [assoc("高瀬", "schema:type", "Person"), assoc("a", "l", "b")]
    )
    await client.ok("POST", "/contexts/sake/aliases", {"concepts": {"タカセ": "高瀬"}, "labels": {"とうじ": "l"}})
    await client.ok("PUT", "/contexts/sake/schema", doc("strict", relations={"l": {"domain": ["Brewery"]}}))
    status, body, _ = await client.call("POST", "/contexts/sake/associations", [assoc("タカセ", "とうじ", "x", -1.0)])
    assert status == 400
    assert body["issues"][0]["expected"] == "'タカセ' typed as one of [Brewery] (or a subtype), for relation 'l'"


async def test_the_reserved_label_alias_is_refused_once_a_schema_exists(client: Client) -> None:
    for name, mode in (("a", "off"), ("b", "warn"), ("c", "strict")):
        await client.ok("PUT", f"/contexts/{name}", {"description": "d"})
        await client.ok("POST", f"/contexts/{name}/associations", [assoc("蔵", "schema:type", "Brewery")])
        await client.ok("PUT", f"/contexts/{name}/schema", {**OFF0, "mode": mode})
        status, body, _ = await client.call("POST", f"/contexts/{name}/aliases", {"labels": {"種類": "schema:type"}})
        assert (status, body["error"]) == (
            400,
            "label alias '種類' would resolve to 'schema:type', the relation label reserved for type assertions "
            "(ADR 0009 §6.3) — rename the alias",
        )
        # concept aliases are not affected
        await client.ok("POST", f"/contexts/{name}/aliases", {"concepts": {"くら": "蔵"}})


# ----- type filters on the cross-context query ------------------------------------------------

SEED = [
    assoc("青嶺酒造", "schema:type", "Brewery"),
    assoc("青嶺酒造", "杜氏", "高瀬"),
    assoc("高瀬", "schema:type", "Person"),
    assoc("霧沢町", "所在", "雲居県"),
]
RETRIEVAL = {
    "schema": 1,
    "mode": "warn",
    "closed_labels": False,
    "types": {"Organization": {"is_a": []}, "Brewery": {"is_a": ["Organization"]}, "Person": {"is_a": []}},
    "relations": {},
}


async def test_cross_query_type_filter_is_evaluated_per_target_schema(client: Client) -> None:
    for name in ("typed", "untyped"):
        await client.ok("PUT", f"/contexts/{name}", {"description": "d"})
        await client.ok("POST", f"/contexts/{name}/associations", SEED)
    await client.ok("PUT", "/contexts/typed/schema", RETRIEVAL)
    body = {"contexts": ["typed", "untyped"], "label": ["杜氏", "所在"]}
    got = (await client.ok("POST", "/query", {**body, "subject_types": "Brewery"}))["result"]
    assert got["total"] == 1
    assert [(m["context"], m["subject"]) for m in got["matches"]] == [("typed", "青嶺酒造")]
    got = (await client.ok("POST", "/query", {**body, "subject_types": ["Organization"]}))["result"]
    assert got["total"] == 1
    got = (await client.ok("POST", "/query", {**body, "object_types": "Organization"}))["result"]
    assert got["total"] == 0
    assert (await client.ok("POST", "/query", body))["result"]["total"] == 4


async def test_a_refused_strict_write_changes_nothing_across_a_restart(settings_factory) -> None:
    from conftest import start_client

    settings = settings_factory()
    server, client, session = await start_client(settings)
    try:
        await sake(client, V)
        await client.ok("POST", "/contexts/sake/associations", [assoc("蔵", "schema:type", "Brewery")])
        before = (await client.ok("GET", "/contexts/sake"))["result"]
        assert (await client.call("POST", "/contexts/sake/associations", DOMAIN_BATCH))[0] == 400
        assert (await client.ok("GET", "/contexts/sake"))["result"]["revision"] == before["revision"]
    finally:
        await session.close()
        await server.close()
    server, client, session = await start_client(settings)
    try:
        after = (await client.ok("GET", "/contexts/sake"))["result"]
        assert (after["stats"]["associations"], after["revision"]) == (1, before["revision"])
        assert after["schema_mode"] == "strict"
        assert (await client.ok("GET", "/contexts/sake/schema"))["result"] == V
        matches = (await client.ok("POST", "/contexts/sake/query", {"subject": "高瀬"}))["result"]
        assert matches["total"] == 0
    finally:
        await session.close()
        await server.close()


@pytest.mark.parametrize(
    ("body", "total", "subjects"),
    [
        ({"label": ["杜氏", "所在"]}, 2, None),
        ({"label": ["杜氏", "所在"], "subject_types": "Brewery"}, 1, ["青嶺酒造"]),
        ({"label": ["杜氏", "所在"], "subject_types": "Organization"}, 1, ["青嶺酒造"]),
        ({"label": ["杜氏", "所在"], "object_types": "Person"}, 1, ["青嶺酒造"]),
        ({"label": ["杜氏", "所在"], "object_types": "Organization"}, 0, []),
        ({"label": ["杜氏", "所在"], "subject_types": "存在しない型"}, 0, []),
        ({"subject": "青嶺酒造", "subject_types": "Brewery"}, 2, ["青嶺酒造", "青嶺酒造"]),
        ({"label": ["杜氏", "所在"], "subject_types": ["Person", "Brewery"]}, 1, ["青嶺酒造"]),
    ],
)
async def test_query_filters_by_type_and_expands_through_is_a(
    client: Client, body: dict[str, Any], total: int, subjects: list[str] | None
) -> None:
    await sake(client)
    await client.ok("POST", "/contexts/sake/associations", SEED)
    await client.ok("PUT", "/contexts/sake/schema", RETRIEVAL)
    got = (await client.ok("POST", "/contexts/sake/query", body))["result"]
    assert got["total"] == total
    if subjects is not None:
        assert [m["subject"] for m in got["matches"]] == subjects


async def test_query_type_filters_need_a_schema_and_a_pinned_position(client: Client) -> None:
    await sake(client)
    await client.ok("POST", "/contexts/sake/associations", SEED)
    body = {"subject": "青嶺酒造", "subject_types": "Brewery"}
    assert (await client.ok("POST", "/contexts/sake/query", body))["result"]["total"] == 0
    assert (await client.ok("POST", "/contexts/sake/query", {"subject": "青嶺酒造"}))["result"]["total"] == 2
    status, got, _h = await client.call("POST", "/contexts/sake/query", {"subject_types": "Brewery"})
    assert (status, got["error"]) == (400, "'subject', 'label', or 'object' must pin at least one value")
    status, got, _h = await client.call(
        "POST", "/contexts/sake/query", {"label": "x", "object_types": [f"T{i}" for i in range(1001)]}
    )
    assert (status, got["code"], got["error"]) == (
        400,
        "over_limit",
        "object_types carries 1001 items, past the per-request limit of 1000; split the request",
    )
    await client.ok("PUT", "/contexts/sake/schema", {**RETRIEVAL, "mode": "off"})  # installed in any mode
    assert (await client.ok("POST", "/contexts/sake/query", body))["result"]["total"] == 2
    windowed = {**body, "until": 1}  # the window hides the facts, not the types
    assert (await client.ok("POST", "/contexts/sake/query", windowed))["result"]["total"] == 0


async def test_windowed_walks_also_leave_type_assertions_out(client: Client) -> None:
    await sake(client)
    await client.ok(
        "POST",
        "/contexts/sake/associations",
        [assoc("蔵", "schema:type", "Brewery", source="d"), assoc("蔵", "所在地", "町", source="d")],
    )
    await client.ok("POST", "/contexts/sake/sources", {"passages": {"d": "蔵は町にある。"}, "dates": {"d": 100}})
    windowed = {"origins": ["蔵"], "since": 0}
    assert (await client.ok("POST", "/contexts/sake/activate", windowed))["result"]["total"] == 2
    assert (await client.ok("POST", "/contexts/sake/explore", windowed))["result"]["total"] == 2
    await client.ok("PUT", "/contexts/sake/schema", OFF0)
    got = (await client.ok("POST", "/contexts/sake/activate", windowed))["result"]
    assert got["total"] == 1 and got["matches"][0]["association"]["label"] == "所在地"
    assert (await client.ok("POST", "/contexts/sake/explore", windowed))["result"]["total"] == 1
    for decay in (0.5, 1.0):  # the banded walk and the plain one
        body = {**windowed, "decay": decay}
        assert (await client.ok("POST", "/contexts/sake/activate", body))["result"]["total"] == 1


async def test_the_mcp_query_tool_forwards_type_filters(client: Client) -> None:
    await sake(client)
    await client.ok("POST", "/contexts/sake/associations", SEED)
    await client.ok("PUT", "/contexts/sake/schema", RETRIEVAL)
    arguments = {"context": "sake", "label": ["杜氏", "所在"], "subject_types": "Brewery"}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "query", "arguments": arguments}}
    status, reply, _h = await client.call("POST", "/mcp", message)
    assert status == 200 and not reply["result"].get("isError"), reply
    assert json.loads(reply["result"]["content"][0]["text"])["result"]["total"] == 1


async def _tool(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    status, reply, _h = await client.call("POST", "/mcp", message)
    assert status == 200, reply
    result: dict[str, Any] = reply["result"]
    return result


async def test_schemas_over_mcp(client: Client) -> None:
    await sake(client)
    put = await _tool(client, "put_schema", {"context": "sake", **V})
    assert not put.get("isError") and json.loads(put["content"][0]["text"])["result"] == V
    got = await _tool(client, "get_schema", {"context": "sake"})
    assert json.loads(got["content"][0]["text"])["result"] == V
    refused = await _tool(client, "add_associations", {"context": "sake", "associations": DOMAIN_BATCH})
    assert refused["isError"] is True and refused["content"][0]["text"].startswith("HTTP 400: ")
    assert "associations[1].subject" in refused["content"][0]["text"]
    structured = refused["structuredContent"]
    assert (structured["code"], structured["integrity"]) == ("invalid_argument", "nothing_written")
    assert structured["issues"][0]["kind"] == "domain"
    validated = await _tool(client, "validate_schema", {"context": "sake", "document": V})
    assert json.loads(validated["content"][0]["text"])["result"]["total"] == 0
    await client.ok("POST", "/contexts/sake/associations", [assoc("高瀬", "杜氏", "個人A")])
    await client.ok("PUT", "/contexts/sake/schema", doc("off"))
    await client.ok("POST", "/contexts/sake/associations", [assoc("高瀬", "schema:type", "Person")])
    audited = await _tool(client, "audit_schema", {"context": "sake"})
    assert json.loads(audited["content"][0]["text"])["result"]["total"] == 1
    missing = await _tool(client, "put_schema", {"context": "sake", "schema": 1, "mode": "off"})
    assert missing["isError"] is True and missing["content"][0]["text"] == "missing required argument 'closed_labels'"
