"""A real server behind the fake embedding provider, and the two-fruit context the semantic tests share."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client
from fake_embedder import FRUITY, FakeEmbedder, table

from taguru_server.server.app import build_app


@contextlib.asynccontextmanager
async def serving(settings_factory: Any, fake: FakeEmbedder, **env: str) -> AsyncIterator[Client]:
    """The fake provider behind a real HTTP client, and a server using it (model `fake-table`)."""
    provider = TestServer(fake.app())
    await provider.start_server()
    settings = settings_factory(
        TAGURU_EMBED_URL=str(provider.make_url("/v1/embeddings")), TAGURU_EMBED_MODEL="fake-table", **env
    )
    server = TestServer(build_app(settings))
    await server.start_server()
    session = ClientSession()
    try:
        yield Client(session, str(server.make_url("")).rstrip("/"))
    finally:
        await session.close()
        await server.close()
        await provider.close()


@contextlib.asynccontextmanager
async def fruit_context(settings_factory: Any) -> AsyncIterator[tuple[Client, FakeEmbedder]]:
    """Context `fruit`: two colour facts and two passages, embedded as they are stored."""
    fake = FakeEmbedder(table(FRUITY))
    async with serving(settings_factory, fake, TAGURU_EMBED_PASSAGES="1") as client:
        await client.ok("PUT", "/contexts/fruit", {"description": "d"})
        await client.ok(
            "POST",
            "/contexts/fruit/associations",
            [
                {"subject": "りんご", "label": "色", "object": "赤", "weight": 1.0},
                {"subject": "みかん", "label": "色", "object": "橙", "weight": 1.0},
            ],
        )
        await client.ok(
            "POST",
            "/contexts/fruit/sources",
            {"passages": {"a.md": "りんごは赤い果物。", "b.md": "みかんは橙色の果物。"}},
        )
        yield client, fake
