"""Helpers shared by the substrate acceptance tests (error envelopes, nothing-written checks)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from conftest import Client


def ctx_path(name: str, tail: str = "") -> str:
    """`/contexts/{name}[/tail]` with the name as one percent-encoded segment."""
    return f"/contexts/{quote(name, safe='')}" + (f"/{tail}" if tail else "")


async def make_context(client: Client, name: str, body: Any = None, token: str | None = None) -> None:
    if body is None:
        status, parsed, _h = await client.call("PUT", ctx_path(name), content_type=None, token=token)
    else:
        status, parsed, _h = await client.call("PUT", ctx_path(name), body, token=token)
    assert status == 200, parsed
    assert parsed["result"] is True


async def entry(client: Client, name: str, token: str | None = None) -> dict[str, Any]:
    status, parsed, _h = await client.call("GET", ctx_path(name), token=token)
    assert status == 200, parsed
    return parsed["result"]


async def state(client: Client, name: str, token: str | None = None) -> dict[str, Any]:
    """Everything a write could change, minus the advisory usage counters."""
    e = await entry(client, name, token=token)
    out: dict[str, Any] = {
        "stats": e["stats"],
        "revision": e["revision"],
        "meta": [e["description"], e["pinned"], e["dice_floor"], e["semantic_floor"]],
    }
    for tail in ("labels", "aliases", "sources"):
        status, parsed, _h = await client.call("GET", ctx_path(name, tail), token=token)
        assert status == 200, parsed
        out[tail] = parsed["result"]
    return out


def assert_error(
    resp: tuple[int, Any, dict[str, str]],
    status: int,
    code: str,
    error: str | None = None,
    *,
    prefix: str | None = None,
    contains: str | None = None,
) -> dict[str, Any]:
    """Check a complete error envelope; returns the body for further checks."""
    got_status, body, headers = resp
    assert got_status == status, (got_status, body)
    assert isinstance(body, dict), body
    assert body["status"] == "error", body
    assert body["code"] == code, body
    assert isinstance(body["time"], float), body
    assert "result" not in body
    assert headers.get("Content-Type", "").startswith("application/json"), headers
    if error is not None:
        assert body["error"] == error, body["error"]
    if prefix is not None:
        assert body["error"].startswith(prefix), body["error"]
    if contains is not None:
        assert contains in body["error"], body["error"]
    if "issues" in body:
        assert body["issues_total"] >= len(body["issues"])
        assert len(body["issues"]) <= 20
        for issue in body["issues"]:
            assert set(issue) == {"path", "kind", "expected", "actual"}, issue
    return body


def collected_text(what: str, issues: list[tuple[str, str, str]], total: int | None = None) -> str:
    """The §1.2 collected-validation prose for (path, expected, actual) triples."""
    n = total if total is not None else len(issues)
    text = f"{what} refused {n} issue(s):"
    for path, expected, actual in issues[:20]:
        text += f"\n- {path}: expected {expected}, got {actual}"
    if n > 20:
        text += f"\n… and {n - 20} more issue(s)"
    return text + "; nothing was applied"


def assert_collected(
    resp: tuple[int, Any, dict[str, str]], what: str, issues: list[tuple[str, str, str, str]]
) -> dict[str, Any]:
    """A 400 invalid_argument collected refusal with exactly these (path, kind, expected, actual) issues."""
    body = assert_error(resp, 400, "invalid_argument", collected_text(what, [(p, e, a) for p, _k, e, a in issues]))
    assert body["issues"] == [{"path": p, "kind": k, "expected": e, "actual": a} for p, k, e, a in issues]
    assert body["issues_total"] == len(issues)
    assert body["integrity"] == "nothing_written"
    assert body["retryable_after_correction"] is True
    return body


def assert_ok(resp: tuple[int, Any, dict[str, str]]) -> Any:
    status, body, _h = resp
    assert status == 200, body
    assert body["status"] == "ok", body
    assert isinstance(body["time"], float)
    return body["result"]


NO_ROUTE = "no route for {m} {u}; GET /protocol lists the API"
NOT_SUPPORTED = "{m} is not supported on {u}; GET /protocol lists the API"
