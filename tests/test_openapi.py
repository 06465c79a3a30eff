"""GET /openapi.json: OpenAPI 3.1 over every route, from the definitions the server uses."""

from __future__ import annotations

import pytest
from conftest import Client

from taguru_server.server.routing import ROUTES
from taguru_server.server.wire.specs import EVIDENCE


@pytest.mark.anyio
async def test_document_covers_every_route(client: Client) -> None:
    status, doc, _h = await client.call("GET", "/openapi.json")
    assert status == 200 and doc["openapi"] == "3.1.0"
    for route in ROUTES:
        assert route.method.lower() in doc["paths"][route.template], (route.method, route.template)
    assert all(route.response for route in ROUTES)
    evidence = doc["paths"]["/contexts/{name}/evidence"]["post"]
    assert evidence["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/EvidenceRequest"
    }
    assert doc["components"]["schemas"]["EvidenceRequest"]["required"] == ["origins"]


def test_openapi_document_is_valid() -> None:
    from jsonschema import Draft202012Validator

    from taguru_server.server.openapi import openapi_document

    doc = openapi_document(ROUTES, "0")
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)
    assert len(doc["paths"]) >= 20


def test_request_spec_is_the_decoder() -> None:
    from taguru_server.store.errors import ApiError

    # `read` is what the evidence handler (and `Call.decode`, for every other typed body) runs
    decoded = EVIDENCE.read("application/json", b'{"origins":"x","budget":{"max_items":3}}')
    assert decoded["origins"] == ["x"] and decoded["budget"]["max_items"] == 3
    with pytest.raises(ApiError) as err:
        EVIDENCE.read("application/json", b'{"budget":"no"}')
    assert err.value.status == 422
    # the evidence handler builds its request from exactly this decode
    from types import SimpleNamespace

    from taguru_server.server.evidence import parse_request

    call = SimpleNamespace(
        headers={"Content-Type": "application/json"}, body=b'{"origins":"x","budget":{"max_items":3}}'
    )
    request, _explain = parse_request(call)  # type: ignore[arg-type]
    assert request.origins == ("x",) and request.max_items == 3
    with pytest.raises(ApiError) as again:
        parse_request(SimpleNamespace(headers=call.headers, body=b'{"budget":"no"}'))  # type: ignore[arg-type]
    assert again.value.message == err.value.message


@pytest.mark.anyio
async def test_optional_bodies_and_query_parameters_are_published(client: Client) -> None:
    _s, doc, _h = await client.call("GET", "/openapi.json")
    optional = {
        ("put", "/contexts/{name}"),
        ("put", "/groups/{name}"),
        ("post", "/contexts/{name}/vocabulary/audit"),
        ("post", "/contexts/{name}/drift/audit"),
        ("post", "/contexts/{name}/schema/audit"),
    }
    published = {
        (method, template)
        for template, ops in doc["paths"].items()
        for method, op in ops.items()
        if "requestBody" in op and not op["requestBody"]["required"]
    }
    assert published == optional
    # what is published is what the server does: no body is every default, never a body refusal
    for method, template in sorted(optional):
        status, body, _h = await client.call(method.upper(), template.replace("{name}", "opt"), raw=b"")
        assert status in (200, 404), (method, template, status, body)
        assert status == 200 or body["code"] == "no_context", body
    promote = doc["paths"]["/contexts/{name}/promote"]["post"]
    assert promote["requestBody"]["required"] is True
    (dry_run,) = [p for p in promote["parameters"] if p["in"] == "query"]
    assert dry_run["name"] == "dry_run" and dry_run["required"] is False
    assert dry_run["schema"]["type"] == "boolean"
