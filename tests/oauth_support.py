"""Helpers of the OAuth tests: a server with OAuth mounted and the steps of the code flow over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from aiohttp import ClientSession
from conftest import start_client

ISSUER = "https://taguru.example"
CB = "https://claude.ai/api/mcp/auth_callback"
VER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
CH = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
FORM = "application/x-www-form-urlencoded"


class OAuthClient:
    """Raw requests to one test server (no redirects followed, no schema checks)."""

    def __init__(self, session: ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def send(
        self, method: str, path: str, *, data: bytes | str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes, Any]:
        async with self.session.request(
            method, self.base + path, data=data, headers=headers or {}, allow_redirects=False
        ) as resp:
            return resp.status, await resp.read(), resp.headers

    async def json(self, method: str, path: str, **kw: Any) -> tuple[int, Any, Any]:
        status, body, headers = await self.send(method, path, **kw)
        return status, json.loads(body) if body else None, headers

    async def form(self, path: str, fields: dict[str, str]) -> tuple[int, bytes, Any]:
        return await self.send("POST", path, data=urlencode(fields), headers={"Content-Type": FORM})

    async def register(self, name: str = "claude", uris: list[str] | None = None) -> tuple[int, Any]:
        body = json.dumps({"client_name": name, "redirect_uris": [CB] if uris is None else uris})
        status, parsed, _h = await self.json(
            "POST", "/oauth/register", data=body, headers={"Content-Type": "application/json"}
        )
        return status, parsed

    async def approve(self, client_id: str, key: str, **extra: str) -> tuple[int, bytes, Any]:
        return await self.form("/oauth/authorize", authorize_params(client_id, **extra) | {"key": key})

    async def code(self, client_id: str, key: str, **extra: str) -> str:
        status, _body, headers = await self.approve(client_id, key, **extra)
        assert status == 303, status
        return parse_qs(urlsplit(headers["Location"]).query)["code"][0]

    async def token(self, **fields: str) -> tuple[int, Any]:
        status, body, _h = await self.form("/oauth/token", fields)
        return status, json.loads(body)

    async def exchange(self, client_id: str, code: str, verifier: str = VER) -> tuple[int, Any]:
        return await self.token(
            grant_type="authorization_code", client_id=client_id, code=code, code_verifier=verifier, redirect_uri=CB
        )

    async def tokens(self, key: str, name: str = "claude") -> tuple[str, dict[str, Any]]:
        """Register, approve with `key` and exchange: (client_id, the token answer)."""
        status, client = await self.register(name)
        assert status == 201
        client_id = client["client_id"]
        status, pair = await self.exchange(client_id, await self.code(client_id, key))
        assert status == 200, pair
        return client_id, pair

    async def mcp(self, token: str | None, method: str = "tools/list", params: Any = None) -> tuple[int, Any, Any]:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        frame = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        return await self.json("POST", "/mcp", data=json.dumps(frame), headers=headers)


def authorize_params(client_id: str, **extra: str) -> dict[str, str]:
    """The seven authorize parameters of a good request (overridden by `extra`)."""
    return {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CB,
        "state": "st4te",
        "code_challenge": CH,
        "code_challenge_method": "S256",
        "resource": f"{ISSUER}/mcp",
    } | extra


@asynccontextmanager
async def oauth_server(settings_factory: Any, **env: str) -> AsyncIterator[OAuthClient]:
    """A server with OAuth mounted (key `laptop:tok-op` unless `env` says otherwise)."""
    base = {
        "TAGURU_API_TOKENS": "laptop:tok-op",
        "TAGURU_PUBLIC_URL": ISSUER,
        "TAGURU_AUTH_FAIL_LIMIT_PER_MIN": "0",
    }
    server, client, session = await start_client(settings_factory(**(base | env)))
    try:
        yield OAuthClient(session, client.base)
    finally:
        await session.close()
        await server.close()
