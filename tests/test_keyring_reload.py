"""Key reload: the diff of two key tables, the refusal texts, the outcome of a reload, and (in process) that a
reload reaches authentication and the OAuth delegations of a removed key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog
from aiohttp import ClientSession
from conftest import start_client
from oauth_support import ISSUER, OAuthClient

from taguru_server.server.config import KeyScope
from taguru_server.server.keyring import KeyDiff, Keyring, Keys, diff, parse_keyring
from taguru_server.server.metrics import Metrics
from taguru_server.server.reload import DISARM, Applied, Refused, Reloader, Unchanged, judge, shell_keys
from taguru_server.server.state import KEYS_KEY, METRICS_KEY

pytestmark = pytest.mark.anyio

ARMED = parse_keyring({"TAGURU_API_TOKENS": "ci:tok-ci,laptop:tok-laptop,bot:tok-bot"})


def ring(tokens: str, scopes: dict[str, object] | None = None) -> Keyring:
    values = {"TAGURU_API_TOKENS": tokens}
    if scopes is not None:
        values["TAGURU_KEY_SCOPES"] = json.dumps(scopes)
    return parse_keyring(values)


def file(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def test_diff_by_name_sorted_and_a_key_may_be_rotated_and_rescoped() -> None:
    old = ring("ci:a,laptop:b,bot:c,zed:d", {"bot": "read", "zed": "write"})
    new = ring("ci:a2,bot:c,zed:d,new2:e,new1:f", {"ci": "read", "zed": {"role": "write", "contexts": ["sake"]}})
    assert diff(old, new) == KeyDiff(
        added=("new1", "new2"),
        removed=("laptop",),
        rotated=("ci",),
        rescoped=("bot", "ci", "zed"),  # bot's scope disappeared: it is admin on every context now
    )
    assert diff(old, old).empty and not diff(old, new).empty


def test_an_equal_effective_grant_is_no_rescope() -> None:
    old = ring("ci:a")
    assert diff(old, ring("ci:a", {"ci": "admin"})).empty  # admin on every context either way
    assert diff(
        ring("ci:a", {"ci": {"role": "read", "contexts": ["x", "y"]}}),
        ring("ci:a", {"ci": {"role": "read", "contexts": ["y", "x"]}}),
    ).empty


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (["TAGURU_API_TOKENS=tok-pasted-alone"], "TAGURU_API_TOKENS entry #1 is not name:token"),
        (["TAGURU_API_TOKENS=ci:tok-a,,:tok-b"], "TAGURU_API_TOKENS entry #3 has an empty name or token"),
        (["TAGURU_API_TOKENS=ci:"], "TAGURU_API_TOKENS entry #1 has an empty name or token"),
        (
            ["TAGURU_API_TOKENS=a@b:tok-a"],
            "key name 'a@b' must not contain '@' (reserved for OAuth delegation, 'key@client')",
        ),
        (["TAGURU_API_TOKENS=ci:tok-a,ci:tok-b"], "key name 'ci' is configured twice"),
        (["TAGURU_API_TOKEN=tok-a", "TAGURU_API_TOKENS=default:tok-b"], "key name 'default' is configured twice"),
        (["TAGURU_API_TOKENS=ci:tok-a,cd:tok-a"], "key name 'cd' reuses the token of key name 'ci'"),
        (
            ["TAGURU_API_TOKENS=ci:tok-a", 'TAGURU_KEY_SCOPES={"nobody":"read"}'],
            "TAGURU_KEY_SCOPES names 'nobody', which is no configured key",
        ),
        (
            ["TAGURU_API_TOKENS=ci:tok-a", 'TAGURU_KEY_SCOPES={"ci":"owner"}'],
            "TAGURU_KEY_SCOPES key 'ci': unknown role 'owner' (read, write, or admin)",
        ),
        (
            ["TAGURU_API_TOKENS=ci:tok-a", 'TAGURU_KEY_SCOPES={"ci":{"role":"read","contexts":[]}}'],
            "TAGURU_KEY_SCOPES key 'ci': an empty contexts list grants nothing — omit the field to grant every context",
        ),
        (["TAGURU_API_TOKENS=ci:tok-a", "# every key gone but one", "TAGURU_API_TOKENS=,"], DISARM),
        ([], DISARM),
    ],
)
def test_refusal_texts_name_no_token(lines: list[str], error: str) -> None:
    outcome = judge(ARMED, {}, file(*lines))
    assert outcome == Refused(error)
    assert "tok-" not in outcome.error


def test_scope_shape_refusals() -> None:
    prefix = 'TAGURU_KEY_SCOPES is not the documented JSON shape ({"name": "role" | {"role": …, "contexts": […]}}): '
    for scopes in ("{not json", "[1]", '{"ci": 5}', '{"ci": {"contexts": "sake"}}', '{"ci": {"role": 1}}'):
        outcome = judge(ARMED, {}, file("TAGURU_API_TOKENS=ci:tok-a", f"TAGURU_KEY_SCOPES={scopes}"))
        assert isinstance(outcome, Refused) and outcome.error.startswith(prefix), scopes


def test_bytes_that_are_not_utf8_refuse() -> None:
    outcome = judge(ARMED, {}, b"TAGURU_API_TOKENS=ci:tok-\xff\n")
    assert outcome == Refused("config is not valid UTF-8: invalid utf-8 sequence of 1 bytes from index 25")


def test_a_malformed_line_refuses_naming_the_file_and_line_only() -> None:
    outcome = judge(ARMED, {}, file("TAGURU_API_TOKENS=ci:tok-b", "bad name=tok-secret"), "/etc/taguru.conf")
    assert outcome == Refused("config /etc/taguru.conf: line 2: the name before '=' is not a variable name")


def test_applied_unchanged_and_no_file() -> None:
    same = file("TAGURU_API_TOKENS=bot:tok-bot, laptop:tok-laptop,ci:tok-ci", "TAGURU_LOG_LEVEL=debug")
    assert judge(ARMED, {}, same) == Unchanged()  # another setting changed: it does not reload
    assert judge(ARMED, {}, None) == Unchanged()
    outcome = judge(ARMED, {}, file("TAGURU_API_TOKENS=ci:tok-ci2,bot:tok-bot", 'TAGURU_KEY_SCOPES={"bot":"read"}'))
    assert isinstance(outcome, Applied)
    assert outcome.diff == KeyDiff(removed=("laptop",), rotated=("ci",), rescoped=("bot",))
    assert outcome.keyring.grant("bot") == KeyScope("read", None)


def test_from_no_keys_to_keys_is_allowed() -> None:
    outcome = judge(Keyring(), {}, file("TAGURU_API_TOKEN=tok-first"))
    assert isinstance(outcome, Applied) and outcome.diff.added == ("default",)


def test_a_variable_of_the_real_environment_keeps_its_boot_value() -> None:
    shell = shell_keys({"TAGURU_API_TOKENS": "ci:tok-ci,laptop:tok-laptop,bot:tok-bot", "HOME": "/"})
    assert shell == {"TAGURU_API_TOKENS": "ci:tok-ci,laptop:tok-laptop,bot:tok-bot"}
    # the file cannot override it; the scopes, which only the file sets, reload
    outcome = judge(ARMED, shell, file("TAGURU_API_TOKENS=ci:tok-other", 'TAGURU_KEY_SCOPES={"ci":"read"}'))
    assert isinstance(outcome, Applied) and outcome.diff == KeyDiff(rescoped=("ci",))
    # deleting TAGURU_KEY_SCOPES from the file un-scopes every key
    scoped = outcome.keyring
    back = judge(scoped, shell, file("TAGURU_LOG_LEVEL=info"))
    assert isinstance(back, Applied) and back.diff == KeyDiff(rescoped=("ci",))


async def test_reloader_swaps_logs_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "keys.env"
    path.write_text("TAGURU_API_TOKENS=ci:tok-new,bot:tok-bot\n")
    keys, metrics = Keys(ARMED), Metrics()
    reloader = Reloader(keys, metrics, str(path), {})
    with structlog.testing.capture_logs() as logs:
        assert isinstance(await reloader.reload("sighup"), Applied)
        assert await reloader.reload("sighup") == Unchanged()
        path.write_text("TAGURU_API_TOKENS=ci\n")
        assert isinstance(await reloader.reload("sighup"), Refused)
        path.unlink()
        assert await reloader.reload("sighup") == Refused(f"cannot read config {path}: No such file or directory")
    assert keys.current.names == {"ci": "tok-new", "bot": "tok-bot"}
    assert [entry["event"] for entry in logs] == [
        "keyring.reloaded",
        "keyring.reload_unchanged",
        "keyring.reload_refused",
        "keyring.reload_refused",
    ]
    assert logs[0] == {
        "event": "keyring.reloaded",
        "log_level": "info",
        "trigger": "sighup",
        "added": [],
        "removed": ["laptop"],
        "rotated": ["ci"],
        "rescoped": [],
        "keys": 2,
        "scoped": 0,
    }
    assert logs[2]["error"] == "TAGURU_API_TOKENS entry #1 is not name:token"
    assert "tok-" not in repr(logs)
    assert metrics.keyring_reloads._value.get() == 2  # applied and no change
    assert metrics.keyring_reload_refusals._value.get() == 2


async def test_the_watch_reloads_once_per_change_from_the_bytes_it_read(tmp_path: Path) -> None:
    import asyncio

    path = tmp_path / "keys.env"
    path.write_text("TAGURU_API_TOKENS=ci:tok-ci,laptop:tok-laptop,bot:tok-bot\n")
    keys, metrics = Keys(ARMED), Metrics()
    reloader = Reloader(keys, metrics, str(path), {})
    watch = asyncio.get_running_loop().create_task(reloader.watch(interval=0.02))
    try:
        await asyncio.sleep(0.1)
        assert metrics.keyring_reloads._value.get() == 0  # the first digest: the boot's keys, no reload
        path.write_text("TAGURU_API_TOKENS=broken\n")
        await asyncio.sleep(0.15)
        assert metrics.keyring_reload_refusals._value.get() == 1  # once per change, not once per tick
        path.unlink()  # a failed read is no change
        await asyncio.sleep(0.1)
        path.write_text("TAGURU_API_TOKENS=ci:tok-2\n")
        await asyncio.sleep(0.15)
    finally:
        watch.cancel()
    assert keys.current.names == {"ci": "tok-2"}
    assert (metrics.keyring_reloads._value.get(), metrics.keyring_reload_refusals._value.get()) == (1, 1)


async def test_the_watch_arms_an_edit_made_before_it_started(tmp_path: Path) -> None:
    import asyncio

    path = tmp_path / "keys.env"
    path.write_text("TAGURU_API_TOKENS=ci:tok-edited-after-the-boot-read\n")
    keys, metrics = Keys(ARMED), Metrics()
    watch = asyncio.get_running_loop().create_task(Reloader(keys, metrics, str(path), {}).watch(interval=10))
    try:
        await asyncio.sleep(0.1)
    finally:
        watch.cancel()
    assert keys.current.names == {"ci": "tok-edited-after-the-boot-read"}


async def test_a_reload_reaches_requests_and_ends_a_removed_keys_delegations(settings_factory, tmp_path: Path) -> None:
    path = tmp_path / "keys.env"
    path.write_text("TAGURU_API_TOKENS=laptop:tok-op,ci:tok-ci\n")
    settings = settings_factory(
        TAGURU_API_TOKENS="laptop:tok-op,ci:tok-ci", TAGURU_PUBLIC_URL=ISSUER, TAGURU_AUTH_FAIL_LIMIT_PER_MIN="0"
    )
    server, client, session = await start_client(settings)
    http = OAuthClient(session, client.base)
    try:
        reloader = Reloader(server.app[KEYS_KEY], server.app[METRICS_KEY], str(path), {})
        _id, laptop = await http.tokens("tok-op")
        _id, ci = await http.tokens("tok-ci", "other")
        assert (await http.mcp(laptop["access_token"]))[0] == 200
        path.write_text("TAGURU_API_TOKENS=ci:tok-ci2\n")
        assert isinstance(await reloader.reload("sighup"), Applied)
        assert (await http.mcp(laptop["access_token"]))[0] == 401  # its key is gone
        assert (await http.mcp(ci["access_token"]))[0] == 200  # rotating a key keeps its delegations
        async with ClientSession() as raw:
            for token, status in (("tok-ci", 401), ("tok-ci2", 200), ("tok-op", 401)):
                async with raw.get(client.base + "/contexts", headers={"Authorization": f"Bearer {token}"}) as resp:
                    assert resp.status == status, token
        status, _body, _h = await http.approve((await http.register())[1]["client_id"], "tok-op")
        assert status == 200  # the consent page again: a removed key delegates nothing
    finally:
        await session.close()
        await server.close()
