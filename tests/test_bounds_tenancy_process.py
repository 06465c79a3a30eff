"""Process level, on real `taguru serve` processes: 1,000-deep JSON on every body route is a 4xx envelope (never a
500); and with TAGURU_STRICT_TENANCY=1 a scoped key gets the same bytes from a server holding other tenants'
groups as from one without them, with no out-of-scope name in any answer (the probes of
`tests/test_strict_tenancy.py`, run in order against both servers).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from process_support import Server
from test_bounded_input import body_routes, nested
from test_strict_tenancy import HIDDEN, PROBES, SCOPES, TIME, TOKENS, VISIBLE, _leaked, _request_bytes

pytestmark = pytest.mark.slow


def _raw(url: str, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        if isinstance(body, bytes):
            data = body
            headers["Content-Type"] = "application/x-ndjson" if path.startswith("/import") else "application/json"
        else:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _ok(url: str, method: str, path: str, body: Any = None, token: str | None = None) -> None:
    status, raw = _raw(url, method, path, body, token)
    assert status == 200, (method, path, raw[:300])


def test_deep_json_on_every_body_route_is_a_4xx(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log")
    servers.append(server)
    _ok(server.url, "PUT", "/contexts/k", {"description": "deep"})
    _ok(server.url, "PUT", "/groups/k", {"contexts": ["k"]})
    routes = body_routes()
    assert len(routes) > 30
    for method, template in routes:
        path = template.replace("{name}", "k")
        for kind in ("array", "object"):
            status, raw = _raw(server.url, method, path, nested(1_000, kind))
            assert 400 <= status < 500, (method, template, kind, status, raw[:200])
            parsed = json.loads(raw)
            assert parsed.get("status") == "error" or "error" in parsed, (method, template, raw[:200])
    assert _raw(server.url, "GET", "/health")[0] == 200
    assert b"Traceback" not in server.log_path.read_bytes()


def _seed(url: str, hidden: bool) -> None:
    for name in ("sake", "bunko"):
        _ok(url, "PUT", f"/contexts/{name}", {"description": name}, token="atok")
        assoc = [{"subject": "蔵", "label": "在庫", "object": f"{name}-x", "weight": 1.0, "source": "s.md"}]
        _ok(url, "POST", f"/contexts/{name}/associations", assoc, token="atok")
        _ok(url, "POST", f"/contexts/{name}/sources", {"passages": {"s.md": "蔵元"}}, token="atok")
    for name, body in VISIBLE.items():
        _ok(url, "PUT", f"/groups/{name}", body, token="atok")
    if hidden:
        for name, body in HIDDEN.items():
            _ok(url, "PUT", f"/groups/{name}", body, token="atok")
    _ok(url, "PUT", "/groups/shelf", {"contexts": ["sake"]}, token="atok")
    if hidden:
        _ok(url, "PATCH", "/groups/shelf", {"add_groups": ["h-blank"]}, token="atok")


def test_strict_tenancy_answers_are_the_same_with_and_without_other_tenants(
    tmp_path: Path, servers: list[Server]
) -> None:
    env = {
        "TAGURU_API_TOKENS": ",".join(f"{k}:{v}" for k, v in TOKENS.items()),
        "TAGURU_KEY_SCOPES": json.dumps(SCOPES),
        "TAGURU_STRICT_TENANCY": "1",
    }
    full = Server(tmp_path / "full", tmp_path / "full.log", **env)
    bare = Server(tmp_path / "bare", tmp_path / "bare.log", **env)
    servers.extend([full, bare])
    _seed(full.url, hidden=True)
    _seed(bare.url, hidden=False)
    for probe, token, (method, path, body), _leaks in PROBES:
        got = _raw(full.url, method, path, body, token)
        without = _raw(bare.url, method, path, body, token)
        got, without = (got[0], TIME.sub(rb"\g<1>0", got[1])), (without[0], TIME.sub(rb"\g<1>0", without[1]))
        assert got == without, (probe, got, without)
        assert got[0] != 500, probe
        assert not _leaked(got[1], _request_bytes((method, path, body))), (probe, got)
