"""`POST …/schema/audit` and `POST …/schema/validate` over HTTP: every live association judged against a
document as if it were strict (mode ignored), the violations paged like recall, the four name sections
(untyped concepts, undeclared types, unknown labels, reserved label aliases) capped at 100 names with their
true totals; validate judges a proposed document and persists nothing."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Client

pytestmark = pytest.mark.anyio

S: dict[str, Any] = {
    "schema": 1,
    "mode": "strict",
    "closed_labels": False,
    "types": {"Brewery": {"is_a": ["Organization"]}, "Organization": {"is_a": []}, "Person": {"is_a": []}},
    "relations": {"杜氏": {"domain": ["Brewery"], "range": ["Person"]}},
}
OFF0: dict[str, Any] = {"schema": 1, "mode": "off", "closed_labels": False, "types": {}, "relations": {}}
EMPTY = {"total": 0, "names": []}
NO_ALIASES = {"total": 0, "aliases": {}}


def doc(**changes: Any) -> dict[str, Any]:
    return {**S, **changes}


def assoc(s: str, label: str, o: str, weight: float = 1.0) -> dict[str, Any]:
    return {"subject": s, "label": label, "object": o, "weight": weight, "source": "a.md"}


async def sake(client: Client, *facts: tuple[str, str, str] | tuple[str, str, str, float]) -> None:
    await client.ok("PUT", "/contexts/sake", {"description": "d"})
    if facts:
        await client.ok("POST", "/contexts/sake/associations", [assoc(*f) for f in facts])


async def audit(client: Client, body: Any = None) -> dict[str, Any]:
    result: dict[str, Any] = (await client.ok("POST", "/contexts/sake/schema/audit", body))["result"]
    return result


async def validate(client: Client, document: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {"document": document, **extra}
    result: dict[str, Any] = (await client.ok("POST", "/contexts/sake/schema/validate", body))["result"]
    return result


def objects(found: dict[str, Any]) -> list[str]:
    return [v["association"]["object"] for v in found["violations"]]


TAKASE = (("高瀬", "schema:type", "Person"), ("高瀬", "杜氏", "個人A"))
DOMAIN_VIOLATION = {
    "association": {
        "subject": "高瀬",
        "label": "杜氏",
        "object": "個人A",
        "weight": 1.0,
        "count": 1,
        "attributions": [
            {"source": "a.md", "weight": 1.0, "count": 1, "paragraph": None, "section": None, "locator": None}
        ],
    },
    "issues": [
        {
            "path": "subject",
            "kind": "domain",
            "expected": "'高瀬' typed as one of [Brewery] (or a subtype), for relation '杜氏'",
            "actual": "typed as [Person]",
        }
    ],
}


async def test_audit_refuses_with_no_schema_or_no_context(client: Client) -> None:
    await sake(client)
    status, body, _ = await client.call("POST", "/contexts/sake/schema/audit")
    assert (status, body["code"], body["error"]) == (404, "no_schema", "context 'sake' has no schema document")
    status, body, _ = await client.call("POST", "/contexts/nope/schema/audit")
    assert (status, body["code"]) == (404, "no_context")


async def test_audit_denies_unknown_fields(client: Client) -> None:
    status, body, _ = await client.call("POST", "/contexts/nope/schema/audit", {"limit": 5, "typo": True})
    assert (status, body["code"]) == (400, "malformed_request")
    assert body["error"].startswith("the request body is not valid JSON: ")


async def test_audit_reports_domain_violations_even_in_off_mode(client: Client) -> None:
    await sake(client, *TAKASE)
    await client.ok("PUT", "/contexts/sake/schema", doc(mode="off"))
    assert await audit(client) == {
        "total": 1,
        "violations": [DOMAIN_VIOLATION],
        "untyped_concepts": {"total": 1, "names": ["個人A"]},
        "undeclared_types": EMPTY,
        "unknown_labels": EMPTY,
        "reserved_alias_conflicts": NO_ALIASES,
    }


async def test_audit_answers_the_same_regardless_of_mode(client: Client) -> None:
    await sake(client, *TAKASE)
    found = []
    for mode in ("off", "warn", "strict"):
        await client.ok("PUT", "/contexts/sake/schema", doc(mode=mode))
        found.append(await audit(client))
    assert found[0] == found[1] == found[2] and found[0]["total"] == 1


async def test_audit_untyped_concepts_excludes_type_names_and_declared_types(client: Client) -> None:
    await sake(
        client, ("青嶺酒造", "schema:type", "Brewery"), ("青嶺酒造", "所在地", "個人A"), ("Organization", "l", "Person")
    )
    await client.ok("PUT", "/contexts/sake/schema", S)
    names = (await audit(client))["untyped_concepts"]["names"]
    assert names == ["個人A"]


async def test_audit_undeclared_types_reported_regardless_of_closed_labels(client: Client) -> None:
    await sake(client, ("青嶺酒造", "schema:type", "Distillery"))
    for closed in (False, True):
        await client.ok("PUT", "/contexts/sake/schema", doc(closed_labels=closed))
        assert (await audit(client))["undeclared_types"] == {"total": 1, "names": ["Distillery"]}


async def test_audit_unknown_labels_only_when_closed_labels_and_never_schema_type(client: Client) -> None:
    await sake(client, ("青嶺酒造", "schema:type", "Brewery"), ("青嶺酒造", "所在地", "広島"))
    await client.ok("PUT", "/contexts/sake/schema", S)
    opened = await audit(client)
    assert (opened["unknown_labels"], opened["total"]) == (EMPTY, 0)
    await client.ok("PUT", "/contexts/sake/schema", doc(closed_labels=True))
    closed = await audit(client)
    assert closed["unknown_labels"] == {"total": 1, "names": ["所在地"]}
    assert closed["total"] == 1
    (violation,) = closed["violations"]
    assert violation["association"]["label"] == "所在地"
    assert violation["issues"] == [
        {
            "path": "label",
            "kind": "unknown_reference",
            "expected": "a label declared in this context's schema (closed_labels)",
            "actual": "not declared in this context's schema",
        }
    ]


async def test_audit_violations_page_like_every_other_match_list(client: Client) -> None:
    await sake(
        client,
        ("高瀬", "schema:type", "Person"),
        ("高瀬", "杜氏", "弟子3", 1.0),
        ("高瀬", "杜氏", "弟子1", 3.0),
        ("高瀬", "杜氏", "弟子2", 2.0),
    )
    await client.ok("PUT", "/contexts/sake/schema", S)
    assert objects(await audit(client)) == ["弟子1", "弟子2", "弟子3"]
    first = await audit(client, {"limit": 2})
    assert (first["total"], objects(first)) == (3, ["弟子1", "弟子2"])
    after = {"weight": 2.0, "subject": "高瀬", "label": "杜氏", "object": "弟子2"}
    rest = await audit(client, {"limit": 2, "after": after})
    assert (rest["total"], objects(rest)) == (3, ["弟子3"])
    empty = await audit(client, {"limit": 0})
    assert (empty["total"], empty["violations"]) == (3, [])
    assert empty["untyped_concepts"]["total"] == 3


async def test_validate_surfaces_a_pre_existing_reserved_alias_conflict(client: Client) -> None:
    await sake(client, ("蔵", "schema:type", "Brewery"))
    await client.ok("POST", "/contexts/sake/aliases", {"labels": {"種類": "schema:type"}})
    assert await validate(client, S) == {
        "total": 0,
        "violations": [],
        "untyped_concepts": EMPTY,
        "undeclared_types": EMPTY,
        "unknown_labels": EMPTY,
        "reserved_alias_conflicts": {"total": 1, "aliases": {"種類": "schema:type"}},
    }
    status, body, _ = await client.call("PUT", "/contexts/sake/schema", S)
    assert (status, body["code"]) == (400, "invalid_argument") and "種類" in body["error"]
    assert (await client.call("GET", "/contexts/sake/schema"))[1]["code"] == "no_schema"


async def test_validate_dry_runs_without_persisting(client: Client) -> None:
    await sake(client, *TAKASE)
    found = await validate(client, S)
    assert found["total"] == 1 and found["violations"][0]["issues"][0]["kind"] == "domain"
    status, body, _ = await client.call("GET", "/contexts/sake/schema")
    assert (status, body["code"]) == (404, "no_schema")
    assert (await client.ok("GET", "/contexts/sake"))["result"]["schema_mode"] is None


async def test_validate_works_whether_or_not_a_schema_is_already_installed(client: Client) -> None:
    await sake(client, *TAKASE)
    before = await validate(client, S)
    await client.ok("PUT", "/contexts/sake/schema", OFF0)
    assert await validate(client, S) == before
    assert before["violations"] == [DOMAIN_VIOLATION]


async def test_validate_pages_and_refuses_an_unknown_context(client: Client) -> None:
    await sake(client, *TAKASE)
    paged = await validate(client, S, limit=0)
    assert (paged["total"], paged["violations"]) == (1, [])
    status, body, _ = await client.call("POST", "/contexts/nope/schema/validate", {"document": S})
    assert (status, body["code"]) == (404, "no_context")


async def test_validate_refuses_an_invalid_proposed_document(client: Client) -> None:
    await sake(client, *TAKASE)
    bad = doc(relations={"schema:type": {}})
    status, body, _ = await client.call("POST", "/contexts/sake/schema/validate", {"document": bad})
    assert (status, body["code"]) == (400, "invalid_argument") and "schema:type" in body["error"]
    status, body, _ = await client.call("POST", "/contexts/sake/schema/validate", {"document": {**S, "x": 1}})
    assert (status, body["code"]) == (422, "malformed_request")


async def test_audit_untyped_concepts_truncates_past_max_audit_names(client: Client) -> None:
    await sake(
        client, ("青嶺酒造", "schema:type", "Brewery"), *[("青嶺酒造", "所在地", f"個人{i:03d}") for i in range(101)]
    )
    await client.ok("PUT", "/contexts/sake/schema", S)
    untyped = (await audit(client))["untyped_concepts"]
    assert untyped == {"total": 101, "names": [f"個人{i:03d}" for i in range(100)]}


async def test_audit_undeclared_types_truncates_past_max_audit_names(client: Client) -> None:
    await sake(client, *[(f"組織{i:03d}", "schema:type", f"型{i:03d}") for i in range(101)])
    await client.ok("PUT", "/contexts/sake/schema", S)
    undeclared = (await audit(client))["undeclared_types"]
    assert undeclared == {"total": 101, "names": [f"型{i:03d}" for i in range(100)]}


async def test_audit_unknown_labels_truncates_past_max_audit_names(client: Client) -> None:
    await sake(client, *[(f"s{i:03d}", f"未知{i:03d}", f"o{i:03d}") for i in range(101)])
    await client.ok("PUT", "/contexts/sake/schema", doc(mode="warn", closed_labels=True))
    found = await audit(client)
    assert found["unknown_labels"] == {"total": 101, "names": [f"未知{i:03d}" for i in range(100)]}
    assert found["total"] == 101 and len(found["violations"]) == 100
