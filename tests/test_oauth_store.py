"""The OAuth grant store without HTTP: credential material, the code and refresh grants, registration
checks, slugs and escaping, the bounded stores' eviction, and persistence in the data dir (a restart,
an unreadable file, worker processes sharing it)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from pg_support import backend, database_url_for

from taguru_server.server.oauth import tokens
from taguru_server.server.oauth.clients import (
    RegistrationRefused,
    acceptable_redirect,
    check_registration,
    request_fields,
    slug,
)
from taguru_server.server.oauth.grants import GrantStore
from taguru_server.server.oauth.pages import escape
from taguru_server.server.oauth.persist import OAuthState, RowBacking
from taguru_server.store.persist.backend import open_store

VER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
CH = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
CB = "https://claude.ai/api/mcp/auth_callback"
NOW = 1_767_225_600


def _approved(store: GrantStore, now: int = NOW, name: str = "claude") -> tuple[str, str]:
    """A registered client and a code for `laptop@<name>`."""
    client = store.register(name, [CB], now)
    return client.client_id, store.issue_code(client.client_id, CB, CH, f"laptop@{name}", now)


def test_base64url_and_pkce_match_the_rfc_vectors() -> None:
    vectors = {b"": "", b"f": "Zg", b"fo": "Zm8", b"foo": "Zm9v", b"foob": "Zm9vYg", b"fooba": "Zm9vYmE"}
    for raw, text in vectors.items():
        assert tokens.b64url(raw) == text
    assert tokens.b64url(bytes([0xFB, 0xFF])) == "-_8"
    assert tokens.pkce_s256(VER) == CH
    token = tokens.new_token()
    assert len(token) == 43 and set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert tokens.digest("x") == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"


def test_the_code_flow_issues_tokens_and_codes_are_single_use() -> None:
    store = GrantStore()
    client_id, code = _approved(store)
    assert store.exchange_code(code, client_id, CB, "x" * 43, NOW) is None  # a wrong verifier burns the code
    assert store.exchange_code(code, client_id, CB, VER, NOW) is None
    _client_id, code = (
        store.register("other", [CB], NOW).client_id,
        store.issue_code(client_id, CB, CH, "laptop@claude", NOW),
    )
    pair = store.exchange_code(code, client_id, CB, VER, NOW)
    assert pair is not None
    assert store.identity_of(pair.access_token, NOW) == "laptop@claude"
    assert store.identity_of(pair.access_token, NOW + tokens.ACCESS_TTL_SECS - 1) == "laptop@claude"
    assert store.identity_of(pair.access_token, NOW + tokens.ACCESS_TTL_SECS) is None
    assert store.identity_of(pair.refresh_token, NOW) is None  # a refresh token is no access token
    assert all(len(entry.hash) == 64 for entry in store.access + store.refresh + store.codes)


def test_expired_or_misbound_codes_are_refused() -> None:
    store = GrantStore()
    client_id, code = _approved(store)
    assert store.exchange_code(code, client_id, CB, VER, NOW + tokens.CODE_TTL_SECS) is None
    for wrong_client, wrong_redirect in ((client_id + "x", CB), (client_id, CB + "/x")):
        code = store.issue_code(client_id, CB, CH, "laptop@claude", NOW)
        assert store.exchange_code(code, wrong_client, wrong_redirect, VER, NOW) is None
        assert store.exchange_code(code, client_id, CB, VER, NOW) is None  # burned by the misbound attempt
    code = store.issue_code(client_id, CB, CH, "laptop@claude", NOW)
    assert store.exchange_code(code, client_id, CB, VER, NOW + tokens.CODE_TTL_SECS - 1) is not None


def test_a_verifier_outside_the_rfc_length_bounds_is_refused() -> None:
    store = GrantStore()
    client_id = store.register("claude", [CB], NOW).client_id
    for verifier in ("a" * 42, "a" * 129):
        code = store.issue_code(client_id, CB, tokens.pkce_s256(verifier), "laptop@claude", NOW)
        assert store.exchange_code(code, client_id, CB, verifier, NOW) is None
        assert store.exchange_code(code, client_id, CB, verifier, NOW) is None
    for verifier in ("a" * 43, "a" * 128):
        code = store.issue_code(client_id, CB, tokens.pkce_s256(verifier), "laptop@claude", NOW)
        assert store.exchange_code(code, client_id, CB, verifier, NOW) is not None


def test_a_refresh_token_under_the_wrong_client_is_refused_without_burning() -> None:
    store = GrantStore()
    client_id, code = _approved(store)
    pair = store.exchange_code(code, client_id, CB, VER, NOW)
    assert pair is not None
    assert store.use_refresh(pair.refresh_token, "someone-else", NOW) is None
    rotated = store.use_refresh(pair.refresh_token, client_id, NOW)
    assert rotated is not None and rotated.refresh_token != pair.refresh_token
    assert store.use_refresh(pair.refresh_token, client_id, NOW) is None  # rotation killed the presented token
    assert store.use_refresh(rotated.refresh_token, client_id, NOW + tokens.REFRESH_TTL_SECS) is None  # expired


def test_refresh_tokens_rotate_and_survive_restart(tmp_path: Path) -> None:
    state = OAuthState.in_data_dir(tmp_path, shared=False, clock=lambda: NOW)
    state.boot()
    client = state.change(lambda store, now: store.register("claude", [CB], now))
    code = state.change(lambda store, now: store.issue_code(client.client_id, CB, CH, "laptop@claude", now))
    pair = state.change(lambda store, now: store.exchange_code(code, client.client_id, CB, VER, now))
    assert pair is not None
    doc = json.loads((tmp_path / "oauth.json").read_text())
    assert list(doc) == ["clients", "refresh"]
    assert list(doc["clients"][0]) == ["client_id", "client_name", "redirect_uris", "created_at"]
    assert list(doc["refresh"][0]) == ["hash", "key", "client_id", "expires_at"]
    assert (
        doc["refresh"][0]["hash"] == tokens.digest(pair.refresh_token) and doc["refresh"][0]["key"] == "laptop@claude"
    )
    assert doc["refresh"][0]["expires_at"] == NOW + tokens.REFRESH_TTL_SECS and doc["clients"][0]["created_at"] == NOW
    text = (tmp_path / "oauth.json").read_text()
    assert pair.access_token not in text and pair.refresh_token not in text and '\n  "clients": [' in text
    assert tokens.digest(pair.access_token) not in text  # access tokens are never written
    assert stat.S_IMODE(os.stat(tmp_path / "oauth.json").st_mode) == 0o600
    assert not (tmp_path / "oauth.live.json").exists()

    restarted = OAuthState.in_data_dir(tmp_path, shared=False, clock=lambda: NOW + 10)
    restarted.boot()
    assert restarted.current().identity_of(pair.access_token, NOW + 10) is None  # died with the process
    assert restarted.current().client(client.client_id) is not None
    rotated = restarted.change(lambda store, now: store.use_refresh(pair.refresh_token, client.client_id, now))
    assert rotated is not None and restarted.current().identity_of(rotated.access_token, NOW + 10) == "laptop@claude"
    again = OAuthState.in_data_dir(tmp_path, shared=False, clock=lambda: NOW + 20)
    again.boot()
    assert again.change(lambda store, now: store.use_refresh(pair.refresh_token, client.client_id, now)) is None


@pytest.mark.parametrize("content", ["{not json", '{"clients": []}', '{"clients": [{"client_id": 1}], "refresh": []}'])
def test_a_corrupt_store_starts_empty_instead_of_failing_the_boot(tmp_path: Path, content: str) -> None:
    (tmp_path / "oauth.json").write_text(content)
    state = OAuthState.in_data_dir(tmp_path, shared=False)
    state.boot()
    assert state.current().clients == [] and state.current().refresh == []


def test_worker_processes_share_every_grant_through_the_data_dir(tmp_path: Path) -> None:
    first, second = (OAuthState.in_data_dir(tmp_path, shared=True, clock=lambda: NOW) for _ in range(2))
    first.boot()
    second.boot()
    client = first.change(lambda store, now: store.register("claude", [CB], now))
    assert second.current().client(client.client_id) is not None
    code = second.change(lambda store, now: store.issue_code(client.client_id, CB, CH, "laptop@claude", now))
    pair = first.change(lambda store, now: store.exchange_code(code, client.client_id, CB, VER, now))
    assert pair is not None
    assert second.current().identity_of(pair.access_token, NOW) == "laptop@claude"
    assert second.change(lambda store, now: store.exchange_code(code, client.client_id, CB, VER, now)) is None
    live = json.loads((tmp_path / "oauth.live.json").read_text())
    assert set(live) == {"codes", "access"} and pair.access_token not in json.dumps(live)


def test_registration_validates_redirects() -> None:
    accepted = (
        "http://127.0.0.1:7777/cb",
        "http://localhost:7777/cb",
        "http://[::1]:7777/cb",
        CB,
        "http://127.9.9.9/x?y",
    )
    refused = (
        "http://127.0.0.1.evil.example/cb",
        "http://localhost.evil.example/cb",
        "https://trusted.example.com@evil.example/cb",
        "http://x@127.0.0.1:7777/cb",
        "http://[2001:db8::1]:7777/cb",
        "http://evil.example/cb",
        "ftp://127.0.0.1/cb",
        "https:///nohost",
        "not a url",
    )
    for uri in accepted:
        assert acceptable_redirect(uri), uri
        assert check_registration("c", [uri]) == "c"
    for uri in refused:
        assert not acceptable_redirect(uri), uri
        with pytest.raises(RegistrationRefused) as exc:
            check_registration("c", [CB, uri])
        assert str(exc.value) == "redirect uri #2 must be https or loopback"  # never echoes the URI


def test_registration_bounds_name_and_redirect_sizes() -> None:
    assert check_registration("n" * 256, [CB]) == "n" * 256
    with pytest.raises(RegistrationRefused, match=r"^client_name is too long \(257 bytes, max 256\)$"):
        check_registration("n" * 257, [CB])
    with pytest.raises(RegistrationRefused, match=r"^too many redirect_uris \(11, max 10\)$"):
        check_registration("c", [CB] * 11)
    long = "https://a.example/" + "x" * 2031
    with pytest.raises(RegistrationRefused, match=r"^redirect uri #1 is too long \(2049 bytes, max 2048\)$"):
        check_registration("c", [long])
    with pytest.raises(RegistrationRefused, match=r"^redirect_uris must not be empty$"):
        check_registration("c", [])
    assert request_fields({"client_name": 3, "redirect_uris": [1, CB] + [CB] * 20}) == ("client", [CB] * 11)
    assert request_fields([]) == ("client", [])


def test_registration_strips_invisible_and_direction_control_characters() -> None:
    assert check_registration("Cla\u202eude\u200b Code\U000e0041", [CB]) == "Claude Code"
    assert check_registration(" \u200b ", [CB]) == ""


def test_registration_rejects_invisible_characters_in_redirect_uris() -> None:
    for char in ("\u202e", "\u200b", "\ufeff", "\ufe0f", "\U000e0100", "\u206e"):
        with pytest.raises(RegistrationRefused) as exc:
            check_registration("c", [CB, f"https://a.example/é{char}x"])
        assert str(exc.value) == (
            f"redirect uri #2 contains a disallowed invisible character (U+{ord(char):04X}) at byte 20"
        )


def test_slugs_and_escaping_defang_client_names() -> None:
    assert slug("Claude Web (personal)") == "ClaudeWebpersonal"
    assert slug("<script>") == "script"
    assert slug("日本語のみ") == "client"
    assert slug("a" * 30) == "a" * 24
    assert escape('<b a="x">&\'') == "&lt;b a=&quot;x&quot;&gt;&amp;&#39;"


def test_token_stores_self_heal_at_the_cap_instead_of_growing_without_bound() -> None:
    store = GrantStore()
    client_id = store.register("claude", [CB], NOW).client_id
    for _ in range(tokens.CODE_CAP + 50):
        store.issue_code(client_id, CB, CH, "laptop@claude", NOW)
        store.mint("laptop@claude", client_id, NOW)
    assert (
        len(store.codes) == tokens.CODE_CAP
        and len(store.access) == tokens.ACCESS_CAP
        and len(store.refresh) == tokens.REFRESH_CAP
    )


def test_a_flooding_client_evicts_its_own_grants_not_another_clients() -> None:
    store = GrantStore()
    victim = store.register("victim", [CB], NOW).client_id
    kept = store.mint("laptop@victim", victim, NOW)
    flooder = store.register("flooder", [CB], NOW + 1).client_id
    for _ in range(3 * tokens.ACCESS_CAP):
        store.mint("laptop@flooder", flooder, NOW + 1)
    assert store.identity_of(kept.access_token, NOW + 1) == "laptop@victim"
    assert store.use_refresh(kept.refresh_token, victim, NOW + 1) is not None


def test_a_registration_per_grant_cannot_evict_the_victim_past_the_first_round() -> None:
    store = GrantStore()
    victim = store.register("victim", [CB], NOW).client_id
    kept = store.mint("laptop@victim", victim, NOW)
    for i in range(3 * tokens.ACCESS_CAP):
        throwaway = store.register(f"t{i}", [CB], NOW + 1 + i).client_id
        store.mint("laptop@t", throwaway, NOW + 1 + i)
    assert store.identity_of(kept.access_token, NOW + 1) == "laptop@victim"


def test_a_registration_flood_evicts_unapproved_clients_not_an_approved_one() -> None:
    store = GrantStore()
    approved = store.register("approved", [CB], NOW).client_id
    store.mint("laptop@approved", approved, NOW)
    first_unapproved = store.register("u", [CB], NOW + 1).client_id
    for i in range(2 * tokens.CLIENT_CAP):
        store.register(f"u{i}", [CB], NOW + 2 + i)
    assert len(store.clients) == tokens.CLIENT_CAP
    assert store.client(approved) is not None and store.client(first_unapproved) is None
    fresh = GrantStore()
    oldest = fresh.register("oldest", [CB], NOW).client_id
    for i in range(tokens.CLIENT_CAP):
        fresh.register(f"c{i}", [CB], NOW + 1 + i)
    assert len(fresh.clients) == tokens.CLIENT_CAP and fresh.client(oldest) is None  # the oldest goes at 100


def test_expired_refresh_tokens_are_swept_on_the_next_mint() -> None:
    store = GrantStore()
    client_id = store.register("claude", [CB], NOW).client_id
    store.mint("laptop@claude", client_id, NOW)
    store.mint("laptop@claude", client_id, NOW + tokens.REFRESH_TTL_SECS)
    assert len(store.refresh) == 1 and len(store.access) == 1


def test_a_clock_before_the_epoch_fails_closed() -> None:
    with pytest.raises(tokens.ClockBeforeEpoch):
        tokens.now_secs(-1.0)
    state = OAuthState.in_data_dir("unused", shared=False, clock=lambda: -5.0)
    with pytest.raises(tokens.ClockBeforeEpoch):
        state.now()


@pytest.mark.skipif(backend() != "postgres", reason="replicas share the grants only on PostgreSQL")
def test_replicas_share_every_grant_through_the_database(tmp_path: Path) -> None:
    url = database_url_for(tmp_path / "data")
    assert url is not None
    store = open_store(str(tmp_path / "data"), url)  # the schema, with its store_meta table
    try:
        first, second = (OAuthState(RowBacking(url), clock=lambda: NOW) for _ in range(2))
        first.boot()
        second.boot()
        client = first.change(lambda grants, now: grants.register("claude", [CB], now))
        assert second.current().client(client.client_id) is not None
        code = second.change(lambda grants, now: grants.issue_code(client.client_id, CB, CH, "laptop@claude", now))
        pair = first.change(lambda grants, now: grants.exchange_code(code, client.client_id, CB, VER, now))
        assert pair is not None
        assert second.current().identity_of(pair.access_token, NOW) == "laptop@claude"
        rotated = second.change(lambda grants, now: grants.use_refresh(pair.refresh_token, client.client_id, now))
        assert rotated is not None
        assert first.change(lambda grants, now: grants.use_refresh(pair.refresh_token, client.client_id, now)) is None
        restarted = OAuthState(RowBacking(url), clock=lambda: NOW)
        restarted.boot()
        assert [c.client_id for c in restarted.current().clients] == [client.client_id]
    finally:
        store.close()
