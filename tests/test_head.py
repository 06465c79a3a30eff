"""HEAD is answered on every GET route like GET, without the body (graph-reads.md §9, the reference's
framework default): same status and headers; on a route without GET it is a 405 like any other method."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client

from taguru_server.server.app import build_app
from taguru_server.server.inspector import ASSETS
from taguru_server.server.routing import PROBES, ROUTES

# per response, sized by the `time` field, or framing (a streamed GET is chunked; its HEAD sends no body to frame)
VOLATILE = {"date", "x-request-id", "content-length", "server-timing", "transfer-encoding"}


async def get_and_head(client: Client, path: str, headers: dict[str, str] | None = None) -> tuple[int, int]:
    async with client.session.get(client.base + path, headers=headers) as got:
        body = await got.read()
        got_headers = {k.lower(): v for k, v in got.headers.items() if k.lower() not in VOLATILE}
        got_status, got_length = got.status, len(body)
    async with client.session.head(client.base + path, headers=headers) as head:
        assert await head.read() == b"", path
        assert head.status == got_status, (path, head.status, got_status)
        assert {k.lower(): v for k, v in head.headers.items() if k.lower() not in VOLATILE} == got_headers, path
        assert head.headers["X-Request-Id"], path
        return head.status, got_length - int(head.headers.get("Content-Length", got_length))


@pytest.mark.anyio
async def test_head_answers_every_get_route_like_get(client: Client) -> None:
    await client.ok("PUT", "/contexts/kura", {})
    await client.ok("PUT", "/groups/cellar", {"contexts": ["kura"]})
    statuses = {}
    for route in ROUTES:
        method, template = route.method, route.template
        if method == "GET":
            path = template.replace("{name}", "cellar" if template.startswith("/groups/") else "kura")
            statuses[template] = (await get_and_head(client, path))[0]
    for path in [*PROBES, "/nowhere", "/contexts/absent"]:
        statuses[path] = (await get_and_head(client, path))[0]
    assert statuses["/contexts"] == statuses["/contexts/{name}"] == statuses["/groups/{name}"] == 200
    for probe in ("/health", "/live", "/ready", "/version", "/metrics", "/openapi.json", *ASSETS):
        assert statuses[probe] == 200, probe
    assert statuses["/nowhere"] == statuses["/contexts/absent"] == 404
    # fixed bodies: HEAD announces exactly the length GET sends
    for path in ("/ui", "/openapi.json", "/live", "/protocol"):
        assert (await get_and_head(client, path))[1] == 0, path
    # a revalidated page is a 304 either way
    etag = ASSETS["/ui"].etag
    assert (await get_and_head(client, "/ui", {"If-None-Match": etag}))[0] == 304


@pytest.mark.anyio
async def test_head_elsewhere_is_refused_like_any_other_method(client: Client) -> None:
    for path in ("/flush", "/contexts/kura/evidence", "/import"):
        async with client.session.head(client.base + path) as resp:
            assert resp.status == 405 and await resp.read() == b"", path


@pytest.fixture
async def guarded(settings_factory) -> AsyncIterator[Client]:
    server = TestServer(build_app(settings_factory(TAGURU_API_TOKEN="head-token")))
    await server.start_server()
    session = ClientSession()
    try:
        yield Client(session, str(server.make_url("")).rstrip("/"))
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
async def test_head_is_authenticated_as_the_get(guarded: Client) -> None:
    assert (await get_and_head(guarded, "/contexts"))[0] == 401
    assert (await get_and_head(guarded, "/contexts", {"Authorization": "Bearer head-token"}))[0] == 200
    assert (await get_and_head(guarded, "/health"))[0] == 200  # probes and the page need no token
    assert (await get_and_head(guarded, "/ui"))[0] == 200
