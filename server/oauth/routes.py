"""The six OAuth routes (answered without a token while OAuth is mounted): metadata, registration,
the consent page and its approval, and the token endpoint."""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote_plus

from aiohttp import web

from taguru_server.server.call import Probe
from taguru_server.server.oauth import pages
from taguru_server.server.oauth.clients import RegistrationRefused, check_registration, request_fields, slug
from taguru_server.server.oauth.gate import OAuth
from taguru_server.server.oauth.grants import Client, GrantStore, TokenPair
from taguru_server.server.oauth.tokens import ACCESS_TTL_SECS, CHALLENGE_BYTES, ClockBeforeEpoch
from taguru_server.server.reply import json_response
from taguru_server.server.routing import allow_header
from taguru_server.server.state import AUTH_LIMITER_KEY, BODY_KEY, KEYS_KEY, OAUTH_KEY
from taguru_server.store.errors import ApiError, Code

FORM = "application/x-www-form-urlencoded"
JSON_EXPECTED = "Expected request with `Content-Type: application/json`"
FORM_EXPECTED = "Form requests must have `Content-Type: application/x-www-form-urlencoded`"
UNKNOWN_CLIENT = "unknown client_id — register first (RFC 7591)"
UNREGISTERED_REDIRECT = "redirect_uri is not registered for this client"


def _plain(status: int, text: str) -> web.Response:
    """A framework-style plain-text rejection (wrong content type, unparsable body)."""
    return web.Response(text=text, status=status, content_type="text/plain", charset="utf-8")


def _media_type(request: web.Request) -> str:
    """The request's media type without parameters, lowercased."""
    return request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


def _form(raw: bytes | str) -> dict[str, str]:
    """Form-decoded fields (`+` is a space); the last of a repeated field wins."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return dict(parse_qsl(text, keep_blank_values=True))


def encode_state(state: str) -> str:
    """Form-urlencoding: space as `+`, every byte outside `A-Z a-z 0-9 * - . _` as uppercase `%XX`."""
    return quote_plus(state, safe="*").replace("~", "%7E")


def back_to(redirect_uri: str, query: str, state: str) -> web.Response:
    """303 to the client's redirect URI with `query` (and the state) added; empty body, only `Location`."""
    location = f"{redirect_uri}{'&' if '?' in redirect_uri else '?'}{query}"
    if state:
        location += f"&state={encode_state(state)}"
    return web.Response(status=303, headers={"Location": location})


def _oauth(request: web.Request) -> OAuth:
    return request.app[OAUTH_KEY]


# ----- metadata ----------------------------------------------------------------------------------
async def protected_resource(request: web.Request) -> web.StreamResponse:
    """The protected resource's metadata (RFC 9728)."""
    oauth = _oauth(request)
    return json_response(
        {"authorization_servers": [oauth.issuer], "bearer_methods_supported": ["header"], "resource": oauth.resource}
    )


async def authorization_server(request: web.Request) -> web.StreamResponse:
    """The authorization server's metadata (RFC 8414)."""
    issuer = _oauth(request).issuer
    return json_response(
        {
            "authorization_endpoint": f"{issuer}/oauth/authorize",
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "issuer": issuer,
            "registration_endpoint": f"{issuer}/oauth/register",
            "response_types_supported": ["code"],
            "token_endpoint": f"{issuer}/oauth/token",
            "token_endpoint_auth_methods_supported": ["none"],
        }
    )


# ----- registration ------------------------------------------------------------------------------
async def register(request: web.Request) -> web.StreamResponse:
    """Register a public client: 201 with its id, or 400 `invalid_client_metadata` naming the first problem."""
    if _media_type(request) != "application/json":
        return _plain(415, JSON_EXPECTED)
    try:
        body = json.loads(request[BODY_KEY])
        json.dumps(body, ensure_ascii=False).encode("utf-8")  # a lone surrogate is no JSON text a client may send
    except (ValueError, RecursionError):
        return _plain(400, "Failed to parse the request body as JSON")
    name, uris = request_fields(body)
    oauth = _oauth(request)
    try:
        cleaned = check_registration(name, uris)
        client = await asyncio.to_thread(oauth.state.change, lambda store, now: store.register(cleaned, uris, now))
    except RegistrationRefused as exc:
        return _metadata_refused(str(exc))
    except ClockBeforeEpoch:
        return _metadata_refused("system clock reads before the Unix epoch")
    answer = {
        "client_id": client.client_id,
        "client_name": client.client_name,
        "grant_types": ["authorization_code", "refresh_token"],
        "redirect_uris": client.redirect_uris,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    return json_response(answer, status=201)


def _metadata_refused(text: str) -> web.Response:
    return json_response({"error": "invalid_client_metadata", "error_description": text}, status=400)


# ----- the consent page and its approval ---------------------------------------------------------
async def _checked(oauth: OAuth, params: Mapping[str, str]) -> Client | web.Response:
    """The client, once the request's parameters pass the checks in order; else the page or redirect to answer."""
    await oauth.refreshed()
    client = oauth.state.store.client(params.get("client_id", ""))
    if client is None:
        return pages.refusal_page(UNKNOWN_CLIENT)
    redirect_uri, state = params.get("redirect_uri", ""), params.get("state", "")
    if redirect_uri not in client.redirect_uris:
        return pages.refusal_page(UNREGISTERED_REDIRECT)
    if (
        params.get("response_type", "") != "code"
        or len(params.get("code_challenge", "").encode("utf-8", "surrogatepass")) != CHALLENGE_BYTES
        or params.get("code_challenge_method", "") != "S256"
    ):
        return back_to(redirect_uri, "error=invalid_request", state)
    resource = params.get("resource", "")
    if resource and resource != oauth.resource:
        return back_to(redirect_uri, "error=invalid_target", state)
    return client


async def consent(request: web.Request) -> web.StreamResponse:
    """GET /oauth/authorize: the consent page, or the refusal the parameters earn."""
    params = _form(request.rel_url.raw_query_string)
    checked = await _checked(_oauth(request), params)
    if isinstance(checked, web.StreamResponse):
        return checked
    return pages.consent_page(checked.client_name, params)


def _key_name(tokens: Mapping[str, str], key: str) -> str | None:
    """The name of the configured key equal to `key` (every key compared in constant time)."""
    found = None
    for token, name in tokens.items():
        if hmac.compare_digest(token.encode("utf-8", "surrogatepass"), key.encode("utf-8", "surrogatepass")):
            found = name
    return found


def _wrong_key(request: web.Request, client: Client, params: Mapping[str, str]) -> web.StreamResponse:
    """A key that is not configured: 429 past the address's failure budget, else the page again with a notice."""
    limiter = request.app[AUTH_LIMITER_KEY]
    address = request.remote or "-"
    try:
        limiter.check(address)
    except ApiError as err:
        wait = int((err.headers or {}).get("Retry-After", "1"))
        return pages.throttled_page(wait)
    limiter.failed(address)
    return pages.consent_page(client.client_name, params, rejected=True)


async def approve(request: web.Request) -> web.StreamResponse:
    """POST /oauth/authorize: delegate a configured key; 303 back to the client with a single-use code."""
    if _media_type(request) != FORM:
        return _plain(415, FORM_EXPECTED)
    params = _form(request[BODY_KEY])
    oauth = _oauth(request)
    checked = await _checked(oauth, params)
    if isinstance(checked, web.StreamResponse):
        return checked
    name = _key_name(request.app[KEYS_KEY].current.tokens, params.get("key", ""))
    if name is None:
        return _wrong_key(request, checked, params)
    redirect_uri, state = params["redirect_uri"], params.get("state", "")
    identity = f"{name}@{slug(checked.client_name)}"
    challenge, client_id = params["code_challenge"], checked.client_id
    try:
        code = await asyncio.to_thread(
            oauth.state.change, lambda store, now: store.issue_code(client_id, redirect_uri, challenge, identity, now)
        )
    except ClockBeforeEpoch:
        return back_to(redirect_uri, "error=server_error", state)
    return back_to(redirect_uri, f"code={code}", state)


# ----- tokens ------------------------------------------------------------------------------------
def _grant_error(error: str, status: int = 400) -> web.Response:
    return json_response({"error": error}, status=status)


def _exchange(store: GrantStore, now: int, fields: Mapping[str, str]) -> TokenPair | None:
    """One grant: a code exchange or a refresh rotation."""
    client_id = fields.get("client_id", "")
    if fields.get("grant_type") == "authorization_code":
        return store.exchange_code(
            fields.get("code", ""), client_id, fields.get("redirect_uri", ""), fields.get("code_verifier", ""), now
        )
    return store.use_refresh(fields.get("refresh_token", ""), client_id, now)


async def token(request: web.Request) -> web.StreamResponse:
    """POST /oauth/token: exchange a code (PKCE S256) or rotate a refresh token into a new pair."""
    if _media_type(request) != FORM:
        return _plain(415, FORM_EXPECTED)
    fields = _form(request[BODY_KEY])
    oauth = _oauth(request)
    try:
        oauth.state.now()
    except ClockBeforeEpoch:
        return _grant_error("server_error", 500)
    if fields.get("grant_type", "") not in ("authorization_code", "refresh_token"):
        return _grant_error("unsupported_grant_type")
    try:
        pair = await asyncio.to_thread(oauth.state.change, lambda store, now: _exchange(store, now, fields))
    except ClockBeforeEpoch:
        return _grant_error("server_error", 500)
    if pair is None:
        return _grant_error("invalid_grant")
    answer: dict[str, Any] = {
        "access_token": pair.access_token,
        "expires_in": ACCESS_TTL_SECS,
        "refresh_token": pair.refresh_token,
        "token_type": "Bearer",
    }
    return json_response(answer)


OAUTH_ROUTE_KEY: web.RequestKey[Probe] = web.RequestKey("oauth_route", Probe)

OAUTH_ROUTES = [
    Probe("/.well-known/oauth-protected-resource", protected_resource, "json", refuses=False),
    Probe("/.well-known/oauth-protected-resource/mcp", protected_resource, "json", refuses=False),
    Probe("/.well-known/oauth-authorization-server", authorization_server, "json", refuses=False),
    Probe("/oauth/register", register, "json", method="POST"),
    Probe("/oauth/authorize", consent, "html"),
    Probe("/oauth/authorize", approve, "html", method="POST"),
    Probe("/oauth/token", token, "json", method="POST"),
]


def oauth_route(method: str, raw_path: str) -> Probe | None:
    """The OAuth route at exactly this path (no decoding, no prefix), or None; another method is a 405."""
    path = raw_path.split("?", 1)[0]
    on_path = [route for route in OAUTH_ROUTES if route.template == path]
    if not on_path:
        return None
    for route in on_path:
        if route.method == method:
            return route
    raise ApiError(
        Code.METHOD_NOT_ALLOWED,
        f"{method} is not supported on {raw_path}; GET /protocol lists the API",
        headers=allow_header(tuple(route.method for route in on_path)),
    )
