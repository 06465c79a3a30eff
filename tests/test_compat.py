"""Reference routes this server does not serve answer 404 saying so (after the reference's role check);
GET /protocol lists the routes it does serve."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from conftest import Client, start_client
from substrate_support import NO_ROUTE, assert_error

from taguru_server.server import compat
from taguru_server.server.routing import ROUTES

pytestmark = pytest.mark.anyio

RANK = {"read": 0, "write": 1, "admin": 2}
TOKENS = {"admin": "tok-admin", "reader": "tok-reader", "writer": "tok-writer"}


@pytest.fixture
async def auth_client(settings_factory) -> AsyncIterator[Client]:
    settings = settings_factory(
        TAGURU_API_TOKENS=",".join(f"{k}:{v}" for k, v in TOKENS.items()),
        TAGURU_KEY_SCOPES=json.dumps({"reader": "read", "writer": "write"}),
        TAGURU_AUTH_FAIL_LIMIT_PER_MIN="0",
    )
    server, client, session = await start_client(settings)
    try:
        yield client
    finally:
        await session.close()
        await server.close()


def _concrete(template: str) -> str:
    return template.replace("{name}", "sake%20kura")


def test_no_unsupported_row_is_a_served_route() -> None:
    served = {(r.method, r.template) for r in ROUTES}
    stale = [(m, t) for m, t, _role in compat.UNSUPPORTED if (m, t) in served]
    assert stale == [], "served now: delete these rows from server/compat.UNSUPPORTED and docs/compatibility.md"


async def test_an_unsupported_route_says_so_after_the_role_check(auth_client: Client) -> None:
    for method, template, role in compat.UNSUPPORTED:
        path = _concrete(template)
        text = f"{method} {template} is a Taguru route not supported by this server; see docs/compatibility.md"
        for key, key_role in (("admin", "admin"), ("writer", "write"), ("reader", "read")):
            resp = await auth_client.call(method, path, {}, token=TOKENS[key])
            if RANK[key_role] < RANK.get(role, 0):
                assert_error(
                    resp, 403, "forbidden", f"key '{key}' has role '{key_role}', but {method} {template} needs '{role}'"
                )
            else:
                assert_error(resp, 404, "unknown_path", text)
        if role == "exempt":  # served without a token by the reference: no 401 first
            assert_error(await auth_client.call(method, path, {}), 404, "unknown_path", text)
        else:
            status, _body, _h = await auth_client.call(method, path, {})
            assert status == 401


async def test_other_unknown_paths_keep_the_reference_text(auth_client: Client) -> None:
    for method, uri in (("GET", "/nope"), ("POST", "/contexts/x/nope"), ("DELETE", "/contexts/x/nope")):
        assert_error(
            await auth_client.call(method, uri, token=TOKENS["admin"], content_type=None),
            404,
            "unknown_path",
            NO_ROUTE.format(m=method, u=uri),
        )


async def test_protocol_lists_every_served_route(auth_client: Client) -> None:
    status, text, _h = await auth_client.call("GET", "/protocol", token=TOKENS["reader"], content_type=None)
    assert status == 200 and isinstance(text, str)
    for route in ROUTES:
        assert f"- `{route.method} {route.template}` ({route.role})" in text
    for _method, template, _role in compat.UNSUPPORTED:
        assert f" {template}`" not in text
