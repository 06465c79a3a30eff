"""The operator verbs (graph-reads.md §5): flush, rename, compact, the maintenance sweep; their checks in order."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Client, start_client
from substrate_support import assert_error, assert_ok, ctx_path

from taguru_server.stages.model import GATE_MESSAGE

pytestmark = pytest.mark.anyio

TOKENS = {"admin": "tok-admin", "writer": "tok-writer", "botadmin": "tok-botadmin", "wide": "tok-wide"}
SCOPES = {
    "writer": "write",
    "botadmin": {"role": "admin", "contexts": ["sake"]},
    "wide": {"role": "admin", "contexts": ["sake", "renamed", ""]},
}
EDGE = [{"subject": "alpha", "label": "rel", "object": "beta", "weight": 1.0, "source": "doc.md"}]
STALE = (
    "the cursor's history is no longer held (a restart, a recreate, or more changes than the feed retains) — "
    "run a full resync, then tail again from a fresh cursor (GET /changes without since)"
)


@pytest.fixture
async def auth_client(settings_factory) -> AsyncIterator[Client]:
    settings = settings_factory(
        TAGURU_API_TOKENS=",".join(f"{k}:{v}" for k, v in TOKENS.items()),
        TAGURU_KEY_SCOPES=json.dumps(SCOPES),
        TAGURU_AUTH_FAIL_LIMIT_PER_MIN="0",
    )
    server, client, session = await start_client(settings)
    try:
        for name in ("sake", "other"):
            assert_ok(await client.call("PUT", ctx_path(name), token=TOKENS["admin"], content_type=None))
            assert_ok(await client.call("POST", ctx_path(name, "associations"), EDGE, token=TOKENS["admin"]))
        yield client
    finally:
        await session.close()
        await server.close()


async def post(client: Client, path: str, body: Any = None, token: str = "admin") -> tuple[int, Any, dict[str, str]]:
    if body is None:
        return await client.call("POST", path, token=TOKENS[token], content_type=None)
    return await client.call("POST", path, body, token=TOKENS[token])


# ----- flush -------------------------------------------------------------------------------------------------


async def test_flush_answers_an_empty_list_without_a_body_or_content_type(auth_client: Client) -> None:
    assert assert_ok(await post(auth_client, "/flush")) == []
    assert assert_ok(await auth_client.call("POST", "/flush", raw=b"junk", token=TOKENS["admin"])) == []


async def test_flush_refuses_roles_and_scoped_keys(auth_client: Client) -> None:
    assert_error(
        await post(auth_client, "/flush", token="writer"),
        403,
        "forbidden",
        "key 'writer' has role 'write', but POST /flush needs 'admin'",
    )
    assert_error(
        await post(auth_client, "/flush", token="botadmin"),
        403,
        "forbidden",
        "flush is server-wide (it names every flushed context); a context-scoped key cannot call it",
    )


# ----- rename ------------------------------------------------------------------------------------------------


async def test_rename_checks_in_order(auth_client: Client) -> None:
    path = ctx_path("sake", "rename")
    status, body, _h = await auth_client.call("POST", path, raw=b'{"to":"x"}', token=TOKENS["admin"], content_type=None)
    assert status == 415 and body["code"] == "malformed_request"
    status, body, _h = await post(auth_client, path, {"too": "x"})
    assert status == 422 and body["code"] == "malformed_request"
    long = "é" * 33
    # 2: the size cap comes before the grant check
    assert_error(
        await post(auth_client, path, {"to": long}, token="botadmin"),
        400,
        "invalid_argument",
        "the destination name is 66 bytes, over the 64-byte cap; nothing was applied",
    )
    # 3: a scoped key needs a grant on the destination too (even an empty one, before step 5)
    for to in ("elsewhere", ""):
        assert_error(
            await post(auth_client, path, {"to": to}, token="botadmin"),
            403,
            "forbidden",
            f"key 'botadmin' has no grant on context '{to}'; nothing was applied",
        )
    # 5: empty, before existence
    assert_error(
        await post(auth_client, ctx_path("ghost", "rename"), {"to": ""}),
        400,
        "invalid_argument",
        "the destination name must not be empty",
    )
    # 6
    assert_error(
        await post(auth_client, ctx_path("ghost", "rename"), {"to": "x"}),
        404,
        "no_context",
        "context 'ghost' not found",
    )
    # 7: the same name is a no-op
    assert assert_ok(await post(auth_client, path, {"to": "sake", "extra": 1})) is True
    # 8
    assert_error(
        await post(auth_client, path, {"to": "other"}), 409, "already_exists", "context 'other' already exists"
    )
    assert_error(
        await post(auth_client, path, {"to": "x"}, token="writer"),
        403,
        "forbidden",
        "key 'writer' has role 'write', but POST /contexts/{name}/rename needs 'admin'",
    )
    assert assert_ok(await auth_client.call("GET", ctx_path("sake"), token=TOKENS["admin"]))["name"] == "sake"


async def test_rename_moves_everything_and_starts_a_new_feed(auth_client: Client) -> None:
    admin = TOKENS["admin"]
    await auth_client.call("POST", ctx_path("sake", "sources"), {"passages": {"doc.md": "alpha text"}}, token=admin)
    await auth_client.call("POST", ctx_path("sake", "aliases"), {"concepts": {"Alpha": "alpha"}}, token=admin)
    before = assert_ok(await auth_client.call("GET", ctx_path("sake"), token=admin))
    tail = assert_ok(await auth_client.call("GET", ctx_path("sake", "changes"), token=admin, content_type=None))
    assert assert_ok(await post(auth_client, ctx_path("sake", "rename"), {"to": "renamed"}, token="wide")) is True
    assert_error(
        await auth_client.call("GET", ctx_path("sake"), token=admin), 404, "no_context", "context 'sake' not found"
    )
    after = assert_ok(await auth_client.call("GET", ctx_path("renamed"), token=admin))
    assert after["name"] == "renamed"
    assert {k: v for k, v in after.items() if k not in ("name", "usage")} == {
        k: v for k, v in before.items() if k not in ("name", "usage")
    }
    found = assert_ok(await post(auth_client, ctx_path("renamed", "recall"), {"cue": "Alpha"}))
    assert found["matches"][0]["subject"] == "alpha"
    cited = assert_ok(await post(auth_client, ctx_path("renamed", "citations"), {"source": "doc.md", "paragraph": 0}))
    assert cited["text"] == "alpha text"
    status, body, _h = await auth_client.call(
        "GET", ctx_path("renamed", "changes") + "?since=" + tail["next"], token=admin, content_type=None
    )
    assert status == 410 and body["error"] == STALE
    fresh = assert_ok(await auth_client.call("GET", ctx_path("renamed", "changes"), token=admin, content_type=None))
    assert fresh["next"].split("-")[1] != tail["next"].split("-")[1] and fresh["next"].endswith("-0")
    # the old name is free again
    assert_ok(await auth_client.call("PUT", ctx_path("sake"), token=admin, content_type=None))
    assert assert_ok(await auth_client.call("GET", ctx_path("sake"), token=admin))["stats"]["associations"] == 0


async def test_a_refused_rename_changes_nothing(auth_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from taguru_server.store.rows import RowStore

    def refuse(self: Any, cid: int, old: str, new: str) -> int:
        with self._tx() as db:
            db.execute("UPDATE contexts SET name = ? WHERE id = ?", (new, cid))
            raise self._failed(_io_error(self))

    monkeypatch.setattr(RowStore, "rename", refuse)
    status, body, _h = await post(auth_client, ctx_path("sake", "rename"), {"to": "renamed"})
    assert status == 503 and body["error"] == "the rename could not be made durable; nothing was applied"
    monkeypatch.undo()
    assert assert_ok(await auth_client.call("GET", ctx_path("sake"), token=TOKENS["admin"]))["name"] == "sake"
    assert_error(
        await auth_client.call("GET", ctx_path("renamed"), token=TOKENS["admin"]),
        404,
        "no_context",
        "context 'renamed' not found",
    )


def _io_error(store: Any) -> BaseException:
    """An exception of the store's own error class (what its driver raises on an I/O failure)."""
    return store.ERRORS[0]("disk I/O error")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/flush", None),
        (ctx_path("sake", "rename"), {"to": "x"}),
        (ctx_path("ghost", "rename"), {"to": ""}),
        (ctx_path("ghost", "compact"), None),
        ("/maintenance/compact", None),
    ],
)
async def test_a_spent_budget_is_refused_at_entry(
    auth_client: Client, monkeypatch: pytest.MonkeyPatch, path: str, body: Any
) -> None:
    from taguru_server.server.routes import maintenance

    monkeypatch.setattr(maintenance, "_now", lambda: float("inf"))
    assert_error(await post(auth_client, path, body), 408, "timeout", GATE_MESSAGE)
