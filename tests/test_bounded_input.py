"""Bounded input on every route: one nesting limit for every JSON request, and 405 answers that say what
the path does support (`Allow`)."""

from __future__ import annotations

import pytest
from conftest import Client
from substrate_support import assert_error, make_context

from taguru_server.server.routing import ROUTES
from taguru_server.store.json_depth import MAX_JSON_DEPTH, TOO_DEEP

pytestmark = pytest.mark.anyio

BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")
# the routes whose contract has no body (the reference never reads one), so a body is not parsed
BODYLESS = {
    ("DELETE", "/contexts/{name}"),
    ("DELETE", "/groups/{name}"),
    ("POST", "/contexts/{name}/embeddings/refresh"),
    ("POST", "/flush"),
    ("POST", "/maintenance/compact"),
    ("POST", "/contexts/{name}/compact"),
}
SECRET = "deep-secret-7f3a"  # the key every nested object is keyed by: it must never come back


def nested(depth: int, kind: str) -> bytes:
    """`depth` nested arrays, or `depth` nested objects (each keyed by SECRET)."""
    if kind == "array":
        return b"[" * depth + b"]" * depth
    return f'{{"{SECRET}":'.encode() * depth + b"1" + b"}" * depth


def body_routes() -> list[tuple[str, str]]:
    return [
        (r.method, r.template) for r in ROUTES if r.method in BODY_METHODS and (r.method, r.template) not in BODYLESS
    ]


def test_every_body_route_is_covered() -> None:
    """A route whose document publishes no request body is one of the body-less ones named here, and back."""
    for route in ROUTES:
        method, template = route.method, route.template
        if method in BODY_METHODS:
            published = route.request is not None
            assert published == ((method, template) not in BODYLESS), (method, template)
    assert ("POST", "/mcp") in body_routes() and ("POST", "/import") in body_routes()
    assert len(body_routes()) >= 35


async def _deep(client: Client, method: str, template: str, raw: bytes) -> tuple[int, object, dict[str, str]]:
    content_type = "application/x-ndjson" if template == "/import" else "application/json"
    return await client.call(method, template.replace("{name}", "demo"), raw=raw, content_type=content_type)


@pytest.mark.parametrize("kind", ["array", "object"])
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1_000, 100_000])
async def test_deep_json_is_a_400_envelope_on_every_body_route(client: Client, depth: int, kind: str) -> None:
    await make_context(client, "demo")
    assert (await client.call("PUT", "/groups/demo", {"contexts": ["demo"]}))[0] == 200
    raw = nested(depth, kind)
    for method, template in body_routes():
        resp = await _deep(client, method, template, raw)
        status, body, _headers = resp
        assert SECRET not in str(body), (method, template)
        if template == "/mcp":  # the JSON-RPC parse error, as for any body that is not JSON
            assert status == 400 and isinstance(body, dict), (template, status, body)
            assert body["error"] == {"code": -32700, "message": "body is not JSON"}, body
            assert body["id"] is None
            continue
        found = assert_error(resp, 400, "malformed_request", contains=TOO_DEEP)
        if template == "/import":
            assert found["error"] == f"line 1: not JSON: {TOO_DEEP}", found
            assert found["integrity"] == "nothing_written"


async def test_nesting_up_to_the_limit_still_parses(client: Client) -> None:
    """128 levels are JSON (the shape is then wrong: 422), on a typed body and on POST /mcp."""
    await make_context(client, "demo")
    status, body, _h = await _deep(client, "POST", "/contexts/{name}/query", nested(MAX_JSON_DEPTH, "array"))
    assert status == 422, body
    message = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + nested(MAX_JSON_DEPTH - 2, "array") + b"}}"
    status, body, _h = await _deep(client, "POST", "/mcp", message)
    assert status == 200 and body == {"jsonrpc": "2.0", "id": 1, "result": {}}, body


async def test_a_body_less_route_never_reads_a_body(client: Client) -> None:
    """The routes without a body answer a deep body exactly as they answer none (nothing parses it)."""
    await make_context(client, "demo")
    for method, template in sorted(BODYLESS):
        if method == "DELETE":
            continue  # compared below, on throw-away names
        bare = await client.call(method, template.replace("{name}", "demo"), content_type=None)
        deep = await _deep(client, method, template, nested(100_000, "array"))
        assert (deep[0], _code(deep[1])) == (bare[0], _code(bare[1])), (method, template, deep[1])
        assert deep[0] < 500 or (template, deep[0]) == ("/contexts/{name}/embeddings/refresh", 501)
    await make_context(client, "gone")
    assert (await client.call("PUT", "/groups/gone", {"contexts": ["gone"]}))[0] == 200
    for path in ("/groups/gone", "/contexts/gone"):
        status, body, _h = await client.call("DELETE", path, raw=nested(100_000, "array"))
        assert status == 200 and body["result"] is True, (path, body)


def _code(body: object) -> object:
    return body.get("code") if isinstance(body, dict) else body


def _allowed(template: str) -> set[str]:
    methods = {r.method for r in ROUTES if r.template == template}
    return methods | ({"HEAD"} if "GET" in methods else set())


async def test_405_names_the_methods_the_path_supports(client: Client) -> None:
    """Every routed path and every probe: a method it does not serve answers 405 with `Allow`."""
    await make_context(client, "demo")
    templates = dict.fromkeys(r.template for r in ROUTES)
    probes = ["/health", "/live", "/ready", "/version", "/metrics", "/openapi.json", "/ui"]
    for template in [*templates, *probes]:
        allowed = _allowed(template) if template in templates else {"GET", "HEAD"}
        path = template.replace("{name}", "demo")
        for method in sorted({"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"} - allowed):
            resp = await client.call(method, path, content_type=None)
            assert_error(
                resp, 405, "method_not_allowed", f"{method} is not supported on {path}; GET /protocol lists the API"
            )
            listed = [m.strip() for m in resp[2]["Allow"].split(",")]
            assert sorted(listed) == sorted(allowed) and len(listed) == len(set(listed)), (method, path, listed)


async def test_allow_lists_in_one_order(client: Client) -> None:
    """GET, HEAD, POST, PUT, PATCH, DELETE: whatever order the route table holds them in."""
    _s, _b, headers = await client.call("DELETE", "/contexts/demo/query", content_type=None)
    assert headers["Allow"] == "POST"
    _s, _b, headers = await client.call("POST", "/contexts/demo", content_type=None)
    assert headers["Allow"] == "GET, HEAD, PUT, PATCH, DELETE"
    _s, _b, headers = await client.call("GET", "/mcp")
    assert headers["Allow"] == "POST"
    async with client.session.head(client.base + "/contexts/demo/query") as resp:  # HEAD: no body to check
        assert resp.status == 405 and resp.headers["Allow"] == "POST"


async def test_a_404_carries_no_allow(client: Client) -> None:
    status, _b, headers = await client.call("DELETE", "/no/such/path", content_type=None)
    assert status == 404 and "Allow" not in headers


async def test_mcp_parses_its_body_as_every_route_does(client: Client) -> None:
    """Not JSON to the reference's parser is not JSON on POST /mcp either: NaN, Infinity, 1e400."""
    for literal in (b"NaN", b"Infinity", b"1e400"):
        raw = b'{"jsonrpc":"2.0","id":' + literal + b',"method":"ping"}'
        status, body, _h = await client.call("POST", "/mcp", raw=raw)
        assert status == 400 and body == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "body is not JSON"},
        }, (literal, body)
    status, body, _h = await client.call("POST", "/mcp", raw=b'{"jsonrpc":"2.0","id":1e300,"method":"ping"}')
    assert status == 200 and body == {"jsonrpc": "2.0", "id": 1e300, "result": {}}, body
