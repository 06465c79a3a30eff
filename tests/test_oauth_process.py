"""OAuth against a real `taguru serve` process: refresh grants and clients survive a restart, a restart
without the delegating key retires its delegations, worker processes share the grants, the access log
names `key@client`, and the boot refuses TAGURU_PUBLIC_URL without an API key."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from pg_support import backend
from process_support import Server, base_env, cli

pytestmark = pytest.mark.slow

ISSUER = "https://taguru.example"
CB = "http://127.0.0.1:9/cb"
VERIFIER = "v" * 64
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=").decode()
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def send(
    server: Server, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> Any:
    """One request on a fresh connection, redirects not followed: (status, body bytes, headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def token(server: Server, **fields: str) -> tuple[int, Any]:
    status, body, _h = send(server, "POST", "/oauth/token", urlencode(fields).encode(), FORM)
    return status, json.loads(body)


def flow(server: Server, key: str) -> tuple[str, dict[str, Any]]:
    """Register, approve with `key`, exchange the code: (client_id, the token answer)."""
    reg = json.dumps({"client_name": "claude", "redirect_uris": [CB]}).encode()
    status, body, _h = send(server, "POST", "/oauth/register", reg, {"Content-Type": "application/json"})
    assert status == 201, body
    client_id = json.loads(body)["client_id"]
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CB,
        "state": "s",
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        "key": key,
    }
    status, _b, headers = send(server, "POST", "/oauth/authorize", urlencode(params).encode(), FORM)
    assert status == 303, status
    code = parse_qs(urlsplit(headers["Location"]).query)["code"][0]
    status, pair = token(
        server, grant_type="authorization_code", client_id=client_id, code=code, code_verifier=VERIFIER, redirect_uri=CB
    )
    assert status == 200, pair
    return client_id, pair


def mcp(server: Server, access: str) -> int:
    frame = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {access}"}
    return int(send(server, "POST", "/mcp", frame, headers)[0])


def start(tmp_path: Path, tokens: str, *args: str) -> Server:
    return Server(
        tmp_path / "data",
        tmp_path / "server.log",
        args,
        TAGURU_API_TOKENS=tokens,
        TAGURU_PUBLIC_URL=ISSUER,
        TAGURU_AUTH_FAIL_LIMIT_PER_MIN="0",
    )


def test_refresh_grants_survive_a_restart_and_removing_the_key_retires_them(tmp_path: Path) -> None:
    server = start(tmp_path, "laptop:tok-op,other:tok-other")
    try:
        client_id, pair = flow(server, "tok-op")
        assert mcp(server, pair["access_token"]) == 200
    finally:
        server.stop()
    assert (
        "key=laptop@claude" in (tmp_path / "server.log").read_text()
        or '"key": "laptop@claude"' in (tmp_path / "server.log").read_text()
    )
    server = start(tmp_path, "laptop:tok-op,other:tok-other")
    try:
        # one process keeps access tokens in memory only; replicas on PostgreSQL share them through the store
        assert mcp(server, pair["access_token"]) == (200 if backend() == "postgres" else 401)
        status, rotated = token(
            server, grant_type="refresh_token", client_id=client_id, refresh_token=pair["refresh_token"]
        )
        assert status == 200 and mcp(server, rotated["access_token"]) == 200
    finally:
        server.stop()
    server = start(tmp_path, "other:tok-other")
    try:
        status, fresh = token(
            server, grant_type="refresh_token", client_id=client_id, refresh_token=rotated["refresh_token"]
        )
        assert status == 200 and mcp(server, fresh["access_token"]) == 401
    finally:
        server.stop()


def test_worker_processes_share_the_grants(tmp_path: Path) -> None:
    server = start(tmp_path, "laptop:tok-op", "--workers", "2")
    try:
        for _ in range(6):  # each request lands on either worker
            client_id, pair = flow(server, "tok-op")
            assert mcp(server, pair["access_token"]) == 200
            status, rotated = token(
                server, grant_type="refresh_token", client_id=client_id, refresh_token=pair["refresh_token"]
            )
            assert status == 200 and mcp(server, rotated["access_token"]) == 200
    finally:
        server.stop()


def test_the_boot_refuses_a_public_url_without_an_api_key(tmp_path: Path) -> None:
    done = cli("serve", env=base_env(tmp_path / "data", TAGURU_PUBLIC_URL=ISSUER))
    assert done.returncode != 0
    assert "TAGURU_PUBLIC_URL is set but no API key is" in done.stderr + done.stdout
