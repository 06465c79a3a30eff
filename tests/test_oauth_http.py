"""OAuth for remote MCP over real HTTP (in process): the code flow end to end, the refusals at authorize
and token, the consent pages' headers, what a token opens, revocation by removing its key, and the
server without TAGURU_PUBLIC_URL answering as before."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from oauth_support import CB, CH, ISSUER, VER, authorize_params, oauth_server

from taguru_server.server.config import ConfigError, load_settings
from taguru_server.server.oauth.pages import HARDENING

pytestmark = pytest.mark.anyio

METADATA_URL = f"{ISSUER}/.well-known/oauth-protected-resource"
PROTECTED = {"authorization_servers": [ISSUER], "bearer_methods_supported": ["header"], "resource": f"{ISSUER}/mcp"}
UNAUTHORIZED = "missing or invalid bearer token (send Authorization: Bearer <token>)"


def assert_hardened(headers: object) -> None:
    assert headers["Content-Type"] == "text/html; charset=utf-8"  # type: ignore[index]
    for name, value in HARDENING.items():
        assert headers[name] == value  # type: ignore[index]


async def test_the_code_flow_delegates_a_key_to_a_remote_mcp_client(settings_factory) -> None:
    async with oauth_server(settings_factory, TAGURU_API_TOKENS="laptop:tok-op,other:tok-other") as http:
        status, body, headers = await http.mcp(None, "initialize")
        assert status == 401 and body["code"] == "unauthorized" and body["error"] == UNAUTHORIZED
        assert headers["WWW-Authenticate"] == f'Bearer resource_metadata="{METADATA_URL}"'
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            status, raw, _h = await http.send("GET", path)
            assert status == 200 and raw == json.dumps(PROTECTED, separators=(",", ":")).encode()
        status, meta, _h = await http.json("GET", "/.well-known/oauth-authorization-server")
        assert status == 200 and meta == {
            "authorization_endpoint": f"{ISSUER}/oauth/authorize",
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "issuer": ISSUER,
            "registration_endpoint": f"{ISSUER}/oauth/register",
            "response_types_supported": ["code"],
            "token_endpoint": f"{ISSUER}/oauth/token",
            "token_endpoint_auth_methods_supported": ["none"],
        }
        status, client = await http.register()
        assert status == 201
        client_id = client.pop("client_id")
        assert len(client_id) == 43
        assert client == {
            "client_name": "claude",
            "grant_types": ["authorization_code", "refresh_token"],
            "redirect_uris": [CB],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
        status, page, headers = await http.send("GET", "/oauth/authorize?" + urlencode(authorize_params(client_id)))
        assert status == 200 and b"claude" in page and b"not accepted" not in page
        assert_hardened(headers)
        status, page, headers = await http.approve(client_id, "wrong")
        assert status == 200 and b"that key was not accepted" in page
        status, body, headers = await http.approve(client_id, "tok-op")
        assert status == 303 and body == b""
        location = headers["Location"]
        assert location.startswith(f"{CB}?code=") and location.endswith("&state=st4te")
        code = parse_qs(urlsplit(location).query)["code"][0]
        status, pair = await http.exchange(client_id, code)
        assert status == 200 and set(pair) == {"access_token", "expires_in", "refresh_token", "token_type"}
        assert pair["token_type"] == "Bearer" and pair["expires_in"] == 3600
        assert len(pair["access_token"]) == 43 and len(pair["refresh_token"]) == 43
        assert await http.exchange(client_id, code) == (400, {"error": "invalid_grant"})  # a code is single use

        status, reply, _h = await http.mcp(pair["access_token"])
        assert status == 200 and any(tool["name"] == "list_contexts" for tool in reply["result"]["tools"])
        status, reply, _h = await http.mcp(pair["access_token"], "ping")
        assert status == 200 and "result" in reply
        auth = {"Authorization": f"Bearer {pair['access_token']}"}
        status, body, headers = await http.json("GET", "/contexts", headers=auth)
        assert status == 401 and body["error"] == UNAUTHORIZED  # the raw API stays key-only
        assert headers["WWW-Authenticate"] == f'Bearer resource_metadata="{METADATA_URL}"'
        status, _b, _h = await http.json("GET", "/contexts", headers={"Authorization": "Bearer tok-op"})
        assert status == 200
        status, _b, _h = await http.send("GET", "/mcp", headers=auth)
        assert status == 405  # a token authenticates /mcp whatever the method

        status, rotated = await http.token(
            grant_type="refresh_token", client_id=client_id, refresh_token=pair["refresh_token"]
        )
        assert status == 200 and rotated["refresh_token"] != pair["refresh_token"]
        assert (await http.mcp(rotated["access_token"]))[0] == 200
        again = await http.token(grant_type="refresh_token", client_id=client_id, refresh_token=pair["refresh_token"])
        assert again == (400, {"error": "invalid_grant"})

    # restarted without `laptop`: the refresh grant survived, but what it mints no longer opens /mcp
    async with oauth_server(settings_factory, TAGURU_API_TOKENS="other:tok-other") as http:
        assert (await http.mcp(rotated["access_token"]))[0] == 401  # access tokens die with the process
        status, fresh = await http.token(
            grant_type="refresh_token", client_id=client_id, refresh_token=rotated["refresh_token"]
        )
        assert status == 200
        status, body, headers = await http.mcp(fresh["access_token"])
        assert status == 401 and body["code"] == "unauthorized"


async def test_refusals_at_authorize_and_token(settings_factory) -> None:
    async with oauth_server(settings_factory) as http:
        _s, client = await http.register()
        client_id = client["client_id"]
        status, page, headers = await http.send("GET", "/oauth/authorize?" + urlencode(authorize_params("nonesuch")))
        assert status == 400 and "unknown client_id — register first (RFC 7591)".encode() in page
        assert b"Cannot continue" in page
        assert_hardened(headers)
        status, page, headers = await http.send(
            "GET", "/oauth/authorize?" + urlencode(authorize_params(client_id, redirect_uri="https://other.example/cb"))
        )
        assert status == 400 and b"redirect_uri is not registered for this client" in page
        assert_hardened(headers)

        evil = authorize_params(client_id, state="evil&code=injected", code_challenge_method="plain")
        for status, body, headers in (
            await http.send("GET", "/oauth/authorize?" + urlencode(evil)),
            await http.form("/oauth/authorize", evil | {"key": "tok-op"}),
        ):
            assert status == 303 and body == b""
            assert headers["Location"] == f"{CB}?error=invalid_request&state=evil%26code%3Dinjected"
        for bad in ({"response_type": "token"}, {"code_challenge": ""}, {"code_challenge": "abc"}):
            status, _b, headers = await http.send(
                "GET", "/oauth/authorize?" + urlencode(authorize_params(client_id, **bad))
            )
            assert status == 303 and headers["Location"] == f"{CB}?error=invalid_request&state=st4te"
        foreign = authorize_params(client_id, code_challenge="a" * 43, state="s4", resource="https://other.example/mcp")
        status, _b, headers = await http.send("GET", "/oauth/authorize?" + urlencode(foreign))
        assert status == 303 and headers["Location"] == f"{CB}?error=invalid_target&state=s4"

        # the POST success keeps an encoded state, with exactly one code= in the Location
        status, _b, headers = await http.approve(client_id, "tok-op", state="evil&code=injected")
        assert status == 303 and headers["Location"].count("code=") == 1
        assert headers["Location"].endswith("&state=evil%26code%3Dinjected")
        assert parse_qs(urlsplit(headers["Location"]).query)["state"] == ["evil&code=injected"]

        code = await http.code(client_id, "tok-op")
        assert await http.exchange(client_id, code, "wrong-verifier") == (400, {"error": "invalid_grant"})
        assert await http.exchange(client_id, code) == (400, {"error": "invalid_grant"})  # the wrong verifier burned it
        assert await http.token(grant_type="password", client_id=client_id) == (
            400,
            {"error": "unsupported_grant_type"},
        )
        assert await http.token(client_id=client_id) == (400, {"error": "unsupported_grant_type"})
        code = await http.code(client_id, "tok-op")
        mismatched = await http.token(
            grant_type="authorization_code", client_id=client_id, code=code, code_verifier=VER, redirect_uri=CB + "x"
        )
        assert mismatched == (400, {"error": "invalid_grant"})


async def test_registration_refusals_over_http(settings_factory) -> None:
    async with oauth_server(settings_factory) as http:
        assert await http.register(uris=[]) == (
            400,
            {"error": "invalid_client_metadata", "error_description": "redirect_uris must not be empty"},
        )
        status, body = await http.register(uris=[f"https://a.example/{i}" for i in range(11)])
        assert status == 400 and "too many redirect_uris" in body["error_description"]
        status, body = await http.register(uris=["http://evil.example/cb"])
        assert status == 400 and body["error_description"] == "redirect uri #1 must be https or loopback"
        status, raw, _h = await http.send("POST", "/oauth/register", data=b"{}", headers={"Content-Type": "text/plain"})
        assert status == 415
        status, raw, _h = await http.send(
            "POST", "/oauth/register", data=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert status == 400


async def test_a_wrong_consent_key_spends_the_failed_auth_budget(settings_factory) -> None:
    async with oauth_server(settings_factory, TAGURU_AUTH_FAIL_LIMIT_PER_MIN="1") as http:
        _s, client = await http.register()
        client_id = client["client_id"]
        status, page, _h = await http.approve(client_id, "wrong")
        assert status == 200 and b"not accepted" in page
        status, page, headers = await http.approve(client_id, "wrong")
        assert status == 429 and int(headers["Retry-After"]) >= 1
        assert_hardened(headers)
        status, _b, _h = await http.approve(client_id, "tok-op")
        assert status == 303
        # the bearer gate shares the budget: this address is over it
        status, body, headers = await http.mcp("not-a-token")
        assert status == 429 and body["code"] == "rate_limited" and "WWW-Authenticate" not in headers


async def test_the_consent_form_shows_the_redirect_target_escaped(settings_factory) -> None:
    target = "https://claude.ai/cb?x=1&y=2"
    async with oauth_server(settings_factory) as http:
        _s, client = await http.register('<b a="x">&\'', [target])
        assert client["client_name"] == '<b a="x">&\''
        params = authorize_params(client["client_id"], redirect_uri=target, state='"><script>')
        status, page, headers = await http.send("GET", "/oauth/authorize?" + urlencode(params))
        assert status == 200
        assert_hardened(headers)
        text = page.decode()
        assert 'class="detail"' in text and "<code>https://claude.ai/cb?x=1&amp;y=2</code>" in text
        assert "&lt;b a=&quot;x&quot;&gt;&amp;&#39;" in text and "<script" not in text and "<b a" not in text
        assert 'method="post"' in text and 'action="/oauth/authorize"' in text
        assert 'type="password" name="key" autofocus autocomplete="off"' in text
        for field in ("response_type", "client_id", "redirect_uri", "state", "code_challenge", "resource"):
            assert f'type="hidden" name="{field}"' in text
        assert "<img" not in text and "src=" not in text and "<link" not in text


async def test_oauth_exemption_is_exact_not_prefixed(settings_factory) -> None:
    async with oauth_server(settings_factory) as http:
        for path in ("/oauth/admin-panel", "/oauth/", "/oauth", "/.well-known/oauth-evil-metadata"):
            for method in ("GET", "POST"):
                status, body, headers = await http.json(method, path)
                assert status == 401, (method, path)
                assert headers["WWW-Authenticate"] == f'Bearer resource_metadata="{METADATA_URL}"'
        status, _b, _h = await http.send("DELETE", "/oauth/token")
        assert status == 405
        status, _b, _h = await http.send("HEAD", "/.well-known/oauth-authorization-server")
        assert status == 200


async def test_without_public_url_the_oauth_paths_are_unsupported_and_401s_say_bearer(settings_factory) -> None:
    async with oauth_server(settings_factory, TAGURU_PUBLIC_URL="") as http:
        status, body, _h = await http.json("GET", "/.well-known/oauth-authorization-server")
        assert status == 404 and body["code"] == "unknown_path"
        assert "not supported by this server" in body["error"]
        status, body, headers = await http.mcp(None)
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"


async def test_a_delegation_inherits_its_keys_role_and_grants(settings_factory) -> None:
    env = {
        "TAGURU_API_TOKENS": "bot:tok-bot",
        "TAGURU_KEY_SCOPES": json.dumps({"bot": {"role": "write", "contexts": ["sake"]}}),
    }
    async with oauth_server(settings_factory, **env) as http:
        _client_id, pair = await http.tokens("tok-bot", "Claude Web (personal)")
        token = pair["access_token"]
        status, reply, _h = await http.mcp(token, "tools/call", {"name": "compact", "arguments": {"context": "sake"}})
        assert status == 200 and reply["result"]["isError"] is True
        assert reply["result"]["structuredContent"]["error"] == (
            "key 'bot@ClaudeWebpersonal' has role 'write', but POST /contexts/{name}/compact needs 'admin'"
        )
        status, reply, _h = await http.mcp(
            token, "tools/call", {"name": "recall", "arguments": {"context": "bunko", "cue": "x"}}
        )
        assert (
            reply["result"]["structuredContent"]["error"]
            == "key 'bot@ClaudeWebpersonal' has no grant on context 'bunko'"
        )


async def test_delegations_share_their_base_keys_request_budget(settings_factory) -> None:
    async with oauth_server(settings_factory, TAGURU_RATE_LIMIT_PER_MIN="3") as http:
        _client_id, pair = await http.tokens("tok-op")
        assert (await http.mcp(pair["access_token"]))[0] == 200
        assert (await http.mcp("tok-op"))[0] == 200
        assert (await http.mcp(pair["access_token"]))[0] == 200
        status, body, _h = await http.mcp(pair["access_token"])
        assert status == 429 and body["error"].startswith("key 'laptop' is over its request budget (3 per minute)")


def test_public_url_needs_a_key_and_blank_leaves_oauth_off(tmp_path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"TAGURU_DATA_DIR": str(tmp_path), "TAGURU_PUBLIC_URL": ISSUER})
    assert str(refused.value) == (
        "TAGURU_PUBLIC_URL is set but no API key is: the OAuth consent step delegates an EXISTING key, so configure "
        "TAGURU_API_TOKEN(S) first"
    )
    keyed = {"TAGURU_DATA_DIR": str(tmp_path), "TAGURU_API_TOKEN": "t"}
    assert load_settings(keyed | {"TAGURU_PUBLIC_URL": "  "}).public_url is None
    assert load_settings(keyed).public_url is None
    assert load_settings(keyed | {"TAGURU_PUBLIC_URL": "http://taguru.test//"}).public_url == "http://taguru.test"
    assert CH  # the RFC vector the flow uses


async def test_authorize_parameters_are_form_decoded_once(settings_factory) -> None:
    async with oauth_server(settings_factory) as http:
        _s, client = await http.register()
        query = urlencode(authorize_params(client["client_id"], code_challenge_method="plain"))
        status, _b, headers = await http.send("GET", "/oauth/authorize?" + query.replace("st4te", "a+b%2541%7E"))
        assert status == 303 and headers["Location"].endswith("&state=a+b%2541%7E")


async def test_a_client_name_with_a_lone_surrogate_is_refused_as_unparsable(settings_factory) -> None:
    async with oauth_server(settings_factory) as http:
        body = b'{"client_name":"x\\ud800y","redirect_uris":["https://a.example/cb"]}'
        status, text, headers = await http.send(
            "POST", "/oauth/register", data=body, headers={"Content-Type": "application/json"}
        )
        assert status == 400 and headers["Content-Type"].startswith("text/plain") and b"JSON" in text
