"""Server connection (§3): config file, base URL checks and masking, token, the JSON client."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

from taguru_server.server.config import read_config_file

TIMEOUT_SECS = 35
RESPONSE_CAP = 256 * 1024 * 1024
MESSAGE_CAP = 200
DEFAULT_ADDR = "127.0.0.1:8248"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*$")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_SEGMENT_SAFE = "!$&'()*+,;=:@-._~"


class SetupError(Exception):
    """A configuration or URL problem (exit 2)."""


class CallError(Exception):
    """One HTTP call that did not produce a usable `result`."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def cut(message: str, cap: int = MESSAGE_CAP) -> str:
    """Cut a message to `cap` UTF-8 bytes on a character boundary, appending `…` when cut."""
    data = message.encode("utf-8")
    if len(data) <= cap:
        return message
    return data[:cap].decode("utf-8", errors="ignore") + "…"


def environment(config: str | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment over the KEY=VALUE config file (a real variable wins)."""
    real = dict(os.environ if env is None else env)
    path = config or real.get("TAGURU_CONFIG")
    if not path:
        return real
    try:
        merged = read_config_file(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SetupError(f"cannot read config file {path}: {exc}") from None
    merged.update(real)
    return merged


def base_url(flag: str | None, env: Mapping[str, str]) -> str:
    if flag is not None:
        url = flag.rstrip("/")
    else:
        addr = env.get("TAGURU_ADDR", "").strip() or DEFAULT_ADDR
        host, _, port = addr.rpartition(":")
        if port == "0":
            raise SetupError(
                f"TAGURU_ADDR ({addr}) binds to port 0 (OS-assigned) — the actual port can't be discovered from "
                "here; pass the server's real URL explicitly: 'taguru health http://host:PORT'"
            )
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host in ("[::]", "::"):
            host = "[::1]"
        url = f"http://{host}:{port}"
    check_url(url)
    return url


def check_url(url: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError:
        raise SetupError("the --url value could not be parsed as a URL") from None
    if "@" in parts.netloc:
        raise SetupError(
            "the URL must not carry credentials (user:password@…) — set TAGURU_API_TOKEN (or TAGURU_API_TOKENS) instead"
        )
    if not parts.scheme or not _SCHEME.match(parts.scheme):
        raise SetupError("the --url value could not be parsed as a URL")
    try:
        parts.port
    except ValueError:
        raise SetupError("the --url value could not be parsed as a URL") from None
    if parts.scheme.lower() in ("http", "https") and not parts.hostname:
        raise SetupError("the --url value could not be parsed as a URL")


def mask_url(url: str) -> str:
    """`scheme://host[:port]`: no userinfo, path or query; default ports omitted."""
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError:
        return "<unparseable-url>"
    if not parts.scheme or not host:
        return "<unparseable-url>"
    scheme = parts.scheme.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and _DEFAULT_PORTS.get(scheme) != port:
        return f"{scheme}://{host}:{port}"
    return f"{scheme}://{host}"


def bearer_token(env: Mapping[str, str]) -> str | None:
    single = env.get("TAGURU_API_TOKEN", "").strip()
    if single:
        return single
    for entry in env.get("TAGURU_API_TOKENS", "").split(","):
        _name, sep, token = entry.strip().partition(":")
        if sep and token.strip():
            return token.strip()
    return None


def _trimmed(body: bytes) -> str:
    return body.decode("utf-8", errors="replace").strip()


class Api:
    """A JSON client of one server; every call returns the envelope's `result`."""

    def __init__(self, base: str, token: str | None, session: aiohttp.ClientSession) -> None:
        self.base = base
        self.token = token
        self.session = session

    def url(self, segments: list[str], query: str = "") -> str:
        path = "/".join(quote(s, safe=_SEGMENT_SAFE) for s in segments)
        return f"{self.base}/{path}" + (f"?{query}" if query else "")

    async def _request(self, method: str, url: str, body: Any) -> tuple[int, bytes, Mapping[str, str]]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            async with self.session.request(method, URL(url, encoded=True), data=data, headers=headers) as resp:
                raw = await resp.content.read(RESPONSE_CAP + 1)
                if len(raw) > RESPONSE_CAP:
                    raise CallError(f"{url}: the response exceeds the {RESPONSE_CAP}-byte cap")
                return resp.status, raw, resp.headers
        except CallError:
            raise
        except TimeoutError:
            raise CallError(f"{url}: timed out after {TIMEOUT_SECS}s") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise CallError(f"{url}: {str(exc) or type(exc).__name__}") from None

    async def health(self) -> None:
        url = self.base + "/health"
        status, raw, headers = await self._request("GET", url, None)
        if status != 200:
            raise CallError(self._status_message(url, status, raw, headers)[0], status)

    def _status_message(self, url: str, status: int, raw: bytes, headers: Mapping[str, str]) -> tuple[str, str | None]:
        code = None
        detail = _trimmed(raw)
        try:
            doc = json.loads(raw)
            if isinstance(doc, dict):
                if isinstance(doc.get("error"), str):
                    detail = doc["error"]
                if isinstance(doc.get("code"), str):
                    code = doc["code"]
        except ValueError:
            pass
        msg = f"{url} answered {status}: {detail}"
        retry = headers.get("Retry-After")
        if retry:
            msg += f" (Retry-After: {retry})"
        return msg, code

    async def call(self, method: str, segments: list[str], body: Any = None, query: str = "") -> Any:
        url = self.url(segments, query)
        status, raw, headers = await self._request(method, url, body)
        if status != 200:
            msg, code = self._status_message(url, status, raw, headers)
            raise CallError(msg, status, code if status == 404 else None)
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or "result" not in doc:
            raise CallError(f"{url}: not a taguru response: {_trimmed(raw)}", status)
        return doc["result"]


def new_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECS),
        connector=aiohttp.TCPConnector(limit=8),
    )
