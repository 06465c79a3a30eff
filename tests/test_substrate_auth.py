"""Auth (§1.6): bearer tokens, roles per route, context grants, exempt probes, /import grants."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Client, start_client
from multidict import CIMultiDict
from substrate_support import NO_ROUTE, assert_error, assert_ok, ctx_path, state

pytestmark = pytest.mark.anyio

TOKENS = {
    "admin": "tok-admin",
    "writer": "tok-writer",
    "reader": "tok-reader",
    "bot": "tok-bot",
    "botread": "tok-botread",
    "botadmin": "tok-botadmin",
}
SCOPES = {
    "writer": "write",
    "reader": "read",
    "bot": {"role": "write", "contexts": ["sake"]},
    "botread": {"role": "read", "contexts": ["sake", "shared"]},
    "botadmin": {"role": "admin", "contexts": ["sake"]},
}
UNAUTHORIZED = {
    "status": "error",
    "code": "unauthorized",
    "error": "missing or invalid bearer token (send Authorization: Bearer <token>)",
}

ASSOC = [{"subject": "alpha", "label": "connects_to", "object": "beta", "weight": 1.0, "source": "doc.md"}]

# (method, tail, role, body): every substrate route on /contexts/{name}
CONTEXT_ROUTES: list[tuple[str, str, str, Any]] = [
    ("GET", "", "read", None),
    ("GET", "labels", "read", None),
    ("GET", "aliases", "read", None),
    ("GET", "sources", "read", None),
    ("POST", "resolve", "read", {"cue": "alpha"}),
    ("POST", "resolve_label", "read", {"cue": "connects_to"}),
    ("POST", "describe", "read", {"concept": "alpha"}),
    ("POST", "query", "read", {"subject": "alpha"}),
    ("POST", "recall", "read", {"cue": "alpha"}),
    ("POST", "activate", "read", {"origins": ["alpha"]}),
    ("POST", "sources/lookup", "read", {"sources": ["doc.md"]}),
    ("POST", "sources/search", "read", {"query": "alpha"}),
    ("POST", "citations", "read", {"source": "doc.md", "paragraph": 0}),
    ("POST", "resolve/explain", "read", {"cue": "alpha", "expected": "beta"}),
    ("POST", "resolve_label/explain", "read", {"cue": "connects", "expected": "connects_to"}),
    ("POST", "sources/search/explain", "read", {"query": "alpha", "source": "doc.md"}),
    ("PATCH", "", "write", {"pinned": True}),
    ("POST", "associations", "write", ASSOC),
    ("POST", "associations/retract", "write", {"subject": "alpha", "label": "connects_to", "object": "beta"}),
    ("POST", "aliases", "write", {"concepts": {"Alpha": "alpha"}}),
    ("DELETE", "aliases", "write", {"concepts": ["Alpha"]}),
    ("POST", "sources", "write", {"passages": {"doc.md": "alpha connects to beta"}}),
    ("POST", "sources/retract", "write", {"source": "doc.md"}),
    ("PUT", "", "write", None),
    ("DELETE", "", "admin", None),
]
READ_ROUTES = [r for r in CONTEXT_ROUTES if r[2] == "read"]
WRITE_ROUTES = [r for r in CONTEXT_ROUTES if r[2] == "write"]


def template(tail: str) -> str:
    return "/contexts/{name}" + (f"/{tail}" if tail else "")


def import_text(*batches: tuple[str, str]) -> str:
    lines = []
    for context, source in batches:
        lines.append({"taguru_batch": 1, "context": context, "source": source, "create": {}})
        lines.append({"passage": f"text of {source}"})
        lines.append({"subject": "s", "label": "r", "object": source, "weight": 1.0})
    return "".join(json.dumps(x) + "\n" for x in lines)


@pytest.fixture
async def auth_client(settings_factory) -> AsyncIterator[Client]:
    settings = settings_factory(
        TAGURU_API_TOKENS=", ".join(f"{k}:{v}" for k, v in TOKENS.items()) + ",",
        TAGURU_KEY_SCOPES=json.dumps(SCOPES),
        TAGURU_AUTH_FAIL_LIMIT_PER_MIN="0",  # these tests fail auth on purpose, many times over
    )
    server, client, session = await start_client(settings)
    try:
        for name in ("sake", "other", "shared"):
            assert_ok(await client.call("PUT", ctx_path(name), token=TOKENS["admin"], content_type=None))
            assert_ok(await client.call("POST", ctx_path(name, "associations"), ASSOC, token=TOKENS["admin"]))
            assert_ok(
                await client.call(
                    "POST", ctx_path(name, "sources"), {"passages": {"doc.md": "alpha beta"}}, token=TOKENS["admin"]
                )
            )
        yield client
    finally:
        await session.close()
        await server.close()


async def call(client: Client, method: str, path: str, body: Any, token: str | None) -> Any:
    if body is None:
        return await client.call(method, path, token=token, content_type=None)
    return await client.call(method, path, body, token=token)


async def snapshot(client: Client) -> dict[str, Any]:
    return {name: await state(client, name, token=TOKENS["admin"]) for name in ("sake", "other", "shared")}


def assert_unauthorized(resp: tuple[int, Any, dict[str, str]]) -> None:
    status, body, headers = resp
    assert status == 401, body
    assert {k: v for k, v in body.items() if k != "time"} == UNAUTHORIZED
    assert isinstance(body["time"], float)
    assert headers.get("WWW-Authenticate") == "Bearer"


# ----- 401 -------------------------------------------------------------------------------------------------


async def test_401_on_every_route_family(auth_client: Client) -> None:
    before = await snapshot(auth_client)
    for token in (None, "wrong", "tok-admi", "tok-admin2", " "):
        for method, tail, _role, body in CONTEXT_ROUTES:
            for name in ("sake", "ghost"):
                assert_unauthorized(await call(auth_client, method, ctx_path(name, tail), body, token))
        assert_unauthorized(await call(auth_client, "GET", "/contexts", None, token))
        assert_unauthorized(
            await auth_client.call("POST", "/import", raw=import_text(("sake", "x")), token=token, content_type=None)
        )
        # auth comes before routing: unknown paths and wrong methods are 401 too
        assert_unauthorized(await call(auth_client, "GET", "/nope", None, token))
        assert_unauthorized(await call(auth_client, "POST", "/contexts", None, token))
    assert await snapshot(auth_client) == before


async def raw_headers(client: Client, method: str, path: str, headers: CIMultiDict[str]) -> Any:
    async with client.session.request(method, client.base + path, headers=headers) as resp:
        body = json.loads(await resp.read())
        return resp.status, body, dict(resp.headers)


@pytest.mark.parametrize(
    "value,ok",
    [
        ("Bearer tok-reader", True),
        ("bearer tok-reader", True),
        ("BEARER    tok-reader", True),
        ("bEaReR tok-reader", True),
        ("Basic tok-reader", False),
        ("Bearer", False),
        ("Bearer ", False),
        ("Bearertok-reader", False),
        ("tok-reader", False),
        ("Bearer tok-reader extra", False),
        ("Bearer TOK-READER", False),
    ],
)
async def test_authorization_header_forms(auth_client: Client, value: str, ok: bool) -> None:
    resp = await raw_headers(auth_client, "GET", "/contexts", CIMultiDict([("Authorization", value)]))
    if ok:
        assert resp[0] == 200, resp
    else:
        assert_unauthorized(resp)


async def test_two_authorization_headers_count_as_none(auth_client: Client) -> None:
    both = CIMultiDict([("Authorization", "Bearer tok-admin"), ("Authorization", "Bearer tok-admin")])
    assert_unauthorized(await raw_headers(auth_client, "GET", "/contexts", both))


async def test_exempt_probes(auth_client: Client) -> None:
    for token in (None, "wrong"):
        for path in ("/health", "/live", "/metrics", "/version"):
            status, _body, headers = await auth_client.call("GET", path, token=token)
            assert status == 200, path
            assert "WWW-Authenticate" not in headers


# ----- roles -----------------------------------------------------------------------------------------------


async def test_read_key_reads_but_cannot_write(auth_client: Client) -> None:
    before = await snapshot(auth_client)
    tok = TOKENS["reader"]
    for method, tail, _role, body in READ_ROUTES:
        for name in ("sake", "other"):
            status, parsed, _h = await call(auth_client, method, ctx_path(name, tail), body, tok)
            assert status == 200, (method, tail, parsed)
    for method, tail, role, body in WRITE_ROUTES + [r for r in CONTEXT_ROUTES if r[2] == "admin"]:
        for name in ("sake", "ghost"):
            assert_error(
                await call(auth_client, method, ctx_path(name, tail), body, tok),
                403,
                "forbidden",
                f"key 'reader' has role 'read', but {method} {template(tail)} needs '{role}'",
            )
    assert_error(
        await auth_client.call("POST", "/import", raw=import_text(("sake", "new")), token=tok, content_type=None),
        403,
        "forbidden",
        "key 'reader' has role 'read', but POST /import needs 'admin'",
    )
    # unmatched routes need admin, and the template prints as <unmatched>
    assert_error(
        await call(auth_client, "GET", "/nope", None, tok),
        403,
        "forbidden",
        "key 'reader' has role 'read', but GET <unmatched> needs 'admin'",
    )
    assert_error(
        await call(auth_client, "POST", "/contexts/sake/unknown", {}, tok),
        403,
        "forbidden",
        "key 'reader' has role 'read', but POST <unmatched> needs 'admin'",
    )
    listing = assert_ok(await auth_client.call("GET", "/contexts", token=tok))
    assert listing["total"] == 3
    assert await snapshot(auth_client) == before


async def test_write_key_writes_but_cannot_delete_or_import(auth_client: Client) -> None:
    tok = TOKENS["writer"]
    for method, tail, _role, body in WRITE_ROUTES:
        if method == "PUT":
            continue
        status, parsed, _h = await call(auth_client, method, ctx_path("other", tail), body, tok)
        assert status == 200, (method, tail, parsed)
    assert_ok(await auth_client.call("PUT", ctx_path("fresh"), token=tok, content_type=None))
    before = await snapshot(auth_client)
    assert_error(
        await call(auth_client, "DELETE", ctx_path("other"), None, tok),
        403,
        "forbidden",
        "key 'writer' has role 'write', but DELETE /contexts/{name} needs 'admin'",
    )
    body = assert_error(
        await auth_client.call("POST", "/import", raw=import_text(("sake", "new")), token=tok, content_type=None),
        403,
        "forbidden",
        "key 'writer' has role 'write', but POST /import needs 'admin'",
    )
    assert "integrity" not in body
    assert await snapshot(auth_client) == before
    # an unlisted key is admin on every context
    assert_ok(await auth_client.call("DELETE", ctx_path("fresh"), token=TOKENS["admin"]))


# ----- grants ----------------------------------------------------------------------------------------------


async def test_scoped_key_stays_in_its_context(auth_client: Client) -> None:
    before = await snapshot(auth_client)
    tok = TOKENS["bot"]
    for method, tail, role, body in CONTEXT_ROUTES:
        for name in ("other", "ghost", "sake2", "Sake"):
            resp = await call(auth_client, method, ctx_path(name, tail), body, tok)
            if role == "admin":
                # the role is checked before the grant
                assert_error(
                    resp, 403, "forbidden", f"key 'bot' has role 'write', but {method} {template(tail)} needs 'admin'"
                )
            else:
                assert_error(resp, 403, "forbidden", f"key 'bot' has no grant on context '{name}'")
    assert await snapshot(auth_client) == before
    # inside its grant it reads and writes
    for method, tail, _role, body in READ_ROUTES + [r for r in WRITE_ROUTES if r[0] != "PUT"]:
        status, parsed, _h = await call(auth_client, method, ctx_path("sake", tail), body, tok)
        assert status == 200, (method, tail, parsed)
    assert_error(await call(auth_client, "PUT", ctx_path("sake"), None, tok), 409, "already_exists")
    after = await snapshot(auth_client)
    assert after["other"] == before["other"] and after["shared"] == before["shared"]
    assert after["sake"] != before["sake"]


async def test_scoped_read_key(auth_client: Client) -> None:
    before = await snapshot(auth_client)
    tok = TOKENS["botread"]
    for method, tail, _role, body in READ_ROUTES:
        for name in ("sake", "shared"):
            status, parsed, _h = await call(auth_client, method, ctx_path(name, tail), body, tok)
            assert status == 200, (method, tail, parsed)
        assert_error(
            await call(auth_client, method, ctx_path("other", tail), body, tok),
            403,
            "forbidden",
            "key 'botread' has no grant on context 'other'",
        )
    for method, tail, role, body in WRITE_ROUTES:
        assert_error(
            await call(auth_client, method, ctx_path("sake", tail), body, tok),
            403,
            "forbidden",
            f"key 'botread' has role 'read', but {method} {template(tail)} needs '{role}'",
        )
    # an ungranted name is a 403 even when it does not exist; grants match the decoded name
    assert_error(
        await call(auth_client, "GET", ctx_path("shared2"), None, tok),
        403,
        "forbidden",
        "key 'botread' has no grant on context 'shared2'",
    )
    assert assert_ok(await auth_client.call("GET", "/contexts/sh%61red", token=tok))["name"] == "shared"
    assert await snapshot(auth_client) == before


async def test_listing_shows_only_granted_contexts(auth_client: Client) -> None:
    async def names(token: str, query: str = "") -> tuple[int, list[str]]:
        result = assert_ok(await auth_client.call("GET", "/contexts" + query, token=token))
        return result["total"], [c["name"] for c in result["contexts"]]

    assert await names(TOKENS["admin"]) == (3, ["other", "sake", "shared"])
    assert await names(TOKENS["reader"]) == (3, ["other", "sake", "shared"])
    assert await names(TOKENS["bot"]) == (1, ["sake"])
    assert await names(TOKENS["botread"]) == (2, ["sake", "shared"])
    assert await names(TOKENS["botread"], "?after=sake") == (2, ["shared"])
    assert await names(TOKENS["botread"], "?limit=1") == (2, ["sake"])
    assert_ok(await auth_client.call("PATCH", ctx_path("shared"), {"pinned": True}, token=TOKENS["admin"]))
    assert await names(TOKENS["botread"], "?pinned=true") == (1, ["shared"])
    assert await names(TOKENS["botread"], "?pinned=false") == (1, ["sake"])
    assert await names(TOKENS["bot"], "?pinned=true") == (0, [])


async def test_import_grants(auth_client: Client) -> None:
    before = await snapshot(auth_client)
    tok = TOKENS["botadmin"]
    # every batch's context is checked before anything lands
    for query in ("", "?dry_run=true"):
        body = assert_error(
            await auth_client.call(
                "POST",
                "/import" + query,
                raw=import_text(("sake", "s1"), ("other", "s2")),
                token=tok,
                content_type=None,
            ),
            403,
            "forbidden",
            "key 'botadmin' has no grant on context 'other' (batch source 's2'); nothing was applied",
        )
        assert body["integrity"] == "nothing_written"
        assert "durable_batches" not in body
    body = assert_error(
        await auth_client.call("POST", "/import", raw=import_text(("brand-new", "n1")), token=tok, content_type=None),
        403,
        "forbidden",
        "key 'botadmin' has no grant on context 'brand-new' (batch source 'n1'); nothing was applied",
    )
    assert body["integrity"] == "nothing_written"
    assert await snapshot(auth_client) == before
    listing = assert_ok(await auth_client.call("GET", "/contexts", token=TOKENS["admin"]))
    assert listing["total"] == 3
    # a parse error is reported as such, even for a scoped key
    assert_error(
        await auth_client.call("POST", "/import", raw="{", token=tok, content_type=None),
        400,
        "malformed_request",
        prefix="line 1: not JSON: ",
    )
    # granted batches land; the role (admin) lets the scoped key delete its own context only
    result = assert_ok(
        await auth_client.call("POST", "/import", raw=import_text(("sake", "s1")), token=tok, content_type=None)
    )
    assert [b["source"] for b in result["batches"]] == ["s1"]
    assert_error(
        await call(auth_client, "DELETE", ctx_path("other"), None, tok),
        403,
        "forbidden",
        "key 'botadmin' has no grant on context 'other'",
    )
    # the unscoped admin key imports anywhere
    result = assert_ok(
        await auth_client.call(
            "POST", "/import", raw=import_text(("other", "s2"), ("new", "s3")), token=TOKENS["admin"], content_type=None
        )
    )
    assert [b["created"] for b in result["batches"]] == [False, True]


async def test_auth_precedes_other_refusals(auth_client: Client) -> None:
    """401, then 403, then routing (404/405), then 413/415/400/422, then the handler's 400 and 404."""
    tok = TOKENS["reader"]
    assert_unauthorized(await auth_client.call("POST", ctx_path("ghost", "associations"), raw=b"{", token=None))
    assert_error(
        await auth_client.call("POST", ctx_path("ghost", "associations"), raw=b"{", token=tok), 403, "forbidden"
    )
    assert_error(
        await auth_client.call("POST", ctx_path("sake", "query"), raw=b"{", token=tok), 400, "malformed_request"
    )
    assert_error(
        await auth_client.call("POST", ctx_path("ghost", "query"), {"subject": "a"}, token=tok),
        404,
        "no_context",
        "context 'ghost' not found",
    )
    assert_error(
        await auth_client.call("GET", "/nope", token=TOKENS["admin"]),
        404,
        "unknown_path",
        NO_ROUTE.format(m="GET", u="/nope"),
    )
    assert_error(
        await auth_client.call("POST", "/contexts", token=TOKENS["admin"], content_type=None), 405, "method_not_allowed"
    )
