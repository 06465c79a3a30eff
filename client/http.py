"""The HTTP client of a taguru server: settings, base URL, token, the JSON envelope, errors."""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any, TypedDict, Unpack
from urllib.parse import quote, urlsplit

import aiohttp
import attrs
from multidict import CIMultiDict
from yarl import URL

from taguru_server.client.config import config_file_path, with_config_file

TIMEOUT_SECS = 35
RESPONSE_CAP = 256 * 1024 * 1024
MESSAGE_CAP = 200
CONNECTIONS = 8
DEFAULT_ADDR = "127.0.0.1:8248"
JSON = "application/json"
_READ_CHUNK = 64 * 1024
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*$")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_SEGMENT_SAFE = "!$&'()*+,;=:@-._~"


class SetupError(Exception):
    """A configuration or URL problem (exit 2)."""


class ConfigFileError(SetupError):
    """The KEY=VALUE settings file could not be read."""

    def __init__(self, path: str, cause: OSError | ValueError) -> None:
        super().__init__(f"cannot read config file {path}: {cause}")
        self.path = path
        self.cause = cause


class CallError(Exception):
    """One HTTP call that did not produce a usable `result`."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class TransportError(CallError):
    """No HTTP answer arrived: the connection failed or timed out."""

    def __init__(self, message: str, *, kind: str, detail: str, timed_out: bool, reached: bool) -> None:
        super().__init__(message)
        self.kind = kind  # the failing exception's type name
        self.detail = detail
        self.timed_out = timed_out
        self.reached = reached  # False: no connection was made at all


class ServerError(CallError):
    """The server answered with an error status; `error` and `code` are its envelope's fields."""

    def __init__(self, message: str, status: int, code: str | None, error: str | None) -> None:
        super().__init__(message, status, code)
        self.error = error


class NotEnvelope(CallError):
    """A 200 answer whose body is not a taguru `{"result": …}` envelope."""


class _SinkFailed(Exception):
    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


@attrs.frozen
class Reply:
    """One HTTP answer: status, raw body and headers."""

    status: int
    body: bytes
    headers: Mapping[str, str]


def cut(message: str, cap: int = MESSAGE_CAP) -> str:
    """Cut a message to `cap` UTF-8 bytes on a character boundary, appending `…` when cut."""
    data = message.encode("utf-8")
    if len(data) <= cap:
        return message
    return data[:cap].decode("utf-8", errors="ignore") + "…"


def environment(config: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """The process environment (the caller's, as it read it) over the KEY=VALUE config file (a real
    variable wins)."""
    try:
        return with_config_file(env, config)
    except (OSError, ValueError) as exc:
        raise ConfigFileError(config_file_path(config, env) or "", exc) from None


def base_url(flag: str | None, env: Mapping[str, str]) -> str:
    """The server's base URL: the flag, else TAGURU_URL, else one built from TAGURU_ADDR (a full URL there is
    taken as is)."""
    flag = flag if flag is not None else (env.get("TAGURU_URL", "").strip() or None)
    if flag is not None:
        url = flag.rstrip("/")
    else:
        addr = env.get("TAGURU_ADDR", "").strip() or DEFAULT_ADDR
        url = addr.rstrip("/") if "://" in addr else _addr_url(addr)
    check_url(url)
    return url


def _addr_url(addr: str) -> str:
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
    return f"http://{host}:{port}"


def check_url(url: str) -> None:
    """Refuse a URL that does not parse or that carries credentials."""
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
        _ = parts.port  # raises for a port that is out of range or not a number
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
    """TAGURU_API_TOKEN, else the token of the first usable TAGURU_API_TOKENS entry."""
    single = env.get("TAGURU_API_TOKEN", "").strip()
    if single:
        return single
    for entry in env.get("TAGURU_API_TOKENS", "").split(","):
        _name, sep, token = entry.strip().partition(":")
        if sep and token.strip():
            return token.strip()
    return None


def new_session(timeout: float = TIMEOUT_SECS, connections: int = CONNECTIONS) -> aiohttp.ClientSession:
    """A session for `TaguruClient`: a total timeout per call and a bounded connection pool."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout),
        connector=aiohttp.TCPConnector(limit=connections),
    )


def _trimmed(body: bytes) -> str:
    return body.decode("utf-8", errors="replace").strip()


class SendOptions(TypedDict, total=False):
    """The keyword options of one request (`send`, `send_sync`): a raw body and its content type
    (application/json unless given), an Accept header, extra headers, this call's timeout."""

    data: bytes | None
    content_type: str
    accept: str | None
    headers: Mapping[str, str] | None
    timeout: float | None


def _envelope_fields(raw: bytes) -> tuple[str | None, str | None]:
    """The `error` and `code` strings of an error envelope, when the body is one."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    error = doc["error"] if isinstance(doc.get("error"), str) else None
    code = doc["code"] if isinstance(doc.get("code"), str) else None
    return error, code


def server_error(reply: Reply, url: str) -> ServerError:
    """The ServerError an error reply stands for, with its envelope's `error` and `code` when it has them."""
    error, code = _envelope_fields(reply.body)
    message = f"{url} answered {reply.status}: {error if error is not None else _trimmed(reply.body)}"
    retry = reply.headers.get("Retry-After")
    if retry:
        message += f" (Retry-After: {retry})"
    return ServerError(message, reply.status, code, error)


class TaguruClient:
    """A JSON client of one taguru server (async over aiohttp; `send_sync` for synchronous tools)."""

    def __init__(
        self,
        base: str,
        token: str | None = None,
        session: aiohttp.ClientSession | None = None,
        *,
        timeout: float = TIMEOUT_SECS,
        max_response_bytes: int | None = RESPONSE_CAP,
        connections: int = CONNECTIONS,
    ) -> None:
        self.base = base.rstrip("/")
        self.token = token or None
        self.session = session
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.connections = connections
        self._owned: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> TaguruClient:
        if self.session is None:
            self._owned = self.session = new_session(self.timeout, self.connections)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._owned is not None:
            await self._owned.close()
            self._owned = self.session = None

    def url(self, segments: list[str], query: str = "") -> str:
        """The absolute URL of a path given as unescaped segments, plus an encoded query."""
        path = "/".join(quote(s, safe=_SEGMENT_SAFE) for s in segments)
        return f"{self.base}/{path}" + (f"?{query}" if query else "")

    def _absolute(self, target: str) -> str:
        return self.base + target if target.startswith("/") else target

    def _prepare(self, body: Any, options: SendOptions) -> tuple[bytes | None, dict[str, str]]:
        """The bytes to send (`body` as compact JSON, else the raw `data`) and the request's headers."""
        headers: dict[str, str] = {}
        accept = options.get("accept")
        if accept:
            headers["Accept"] = accept
        data = options.get("data")
        if body is not None:
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if data is not None:
            headers["Content-Type"] = options.get("content_type", JSON)
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(options.get("headers") or {})
        return data, headers

    def _timeout(self, options: SendOptions) -> float:
        """This call's timeout: the option, else the client's."""
        timeout = options.get("timeout")
        return self.timeout if timeout is None else timeout

    async def send(
        self,
        method: str,
        target: str,
        body: Any = None,
        **options: Unpack[SendOptions],
    ) -> Reply:
        """One request (`target`: an absolute URL or a path under the base); any status comes back as a Reply."""
        if self.session is None:
            raise RuntimeError("TaguruClient needs a session: pass one or use `async with`")
        url = self._absolute(target)
        payload, sent = self._prepare(body, options)
        secs = self._timeout(options)
        try:
            async with self.session.request(
                method, URL(url, encoded=True), data=payload, headers=sent, timeout=aiohttp.ClientTimeout(total=secs)
            ) as resp:
                raw = await self._read(resp, url)
                return Reply(resp.status, raw, resp.headers)
        except CallError:
            raise
        except TimeoutError:
            message = f"{url}: timed out after {secs:g}s"
            raise TransportError(message, kind="TimeoutError", detail=message, timed_out=True, reached=True) from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            kind = type(exc).__name__
            detail = str(exc) or kind
            reached = not isinstance(exc, aiohttp.ClientConnectorError)
            message = f"{url}: {detail}"
            raise TransportError(message, kind=kind, detail=detail, timed_out=False, reached=reached) from None

    async def _read(self, resp: aiohttp.ClientResponse, url: str) -> bytes:
        cap = self.max_response_bytes
        if cap is None:
            return await resp.read()
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(_READ_CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                raise CallError(f"{url}: the response exceeds the {cap}-byte cap")
        return b"".join(chunks)

    def send_sync(
        self,
        method: str,
        target: str,
        body: Any = None,
        **options: Unpack[SendOptions],
    ) -> Reply:
        """`send` for a synchronous caller (no event loop); any status comes back as a Reply."""
        url = self._absolute(target)
        payload, sent = self._prepare(body, options)
        request = urllib.request.Request(url, data=payload, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout(options)) as resp:
                return Reply(resp.status, resp.read(), CIMultiDict(resp.headers.items()))
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read(), CIMultiDict(exc.headers.items() if exc.headers else ()))
        except urllib.error.URLError as exc:
            detail = str(exc.reason)
            timed_out = isinstance(exc.reason, TimeoutError)
            raise TransportError(
                f"{url}: {detail}", kind=type(exc).__name__, detail=detail, timed_out=timed_out, reached=False
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            kind = type(exc).__name__
            detail = str(exc) or kind
            timed_out = isinstance(exc, TimeoutError)
            message = f"{url}: {detail}"
            raise TransportError(message, kind=kind, detail=detail, timed_out=timed_out, reached=True) from None

    def download_sync(self, target: str, sink: IO[bytes], *, timeout: float | None = None) -> Reply:
        """GET a non-enveloped body (an export stream) into `sink` a chunk at a time, in constant memory.

        A 200 comes back as a Reply with an empty body (the bytes went to `sink`); another status
        as a Reply with its (error envelope) body, nothing written. A body cut short raises
        TransportError, so a truncated stream is never taken for a whole one.
        """
        url = self._absolute(target)
        _payload, sent = self._prepare(None, {})
        request = urllib.request.Request(url, method="GET", headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout if timeout is None else timeout) as resp:
                while chunk := resp.read(_READ_CHUNK):
                    try:
                        sink.write(chunk)
                    except OSError as exc:
                        raise _SinkFailed(exc) from None
                return Reply(resp.status, b"", CIMultiDict(resp.headers.items()))
        except _SinkFailed as failed:
            raise failed.cause from None  # the local file, not the connection, failed
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read(), CIMultiDict(exc.headers.items() if exc.headers else ()))
        except urllib.error.URLError as exc:
            detail = str(exc.reason)
            raise TransportError(
                f"{url}: {detail}",
                kind=type(exc).__name__,
                detail=detail,
                timed_out=isinstance(exc.reason, TimeoutError),
                reached=False,
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            kind = type(exc).__name__
            detail = str(exc) or kind
            message = f"{url}: {detail}"
            raise TransportError(
                message, kind=kind, detail=detail, timed_out=isinstance(exc, TimeoutError), reached=True
            ) from None

    def decode(self, reply: Reply, url: str) -> Any:
        """The envelope's `result` of a 200 reply; ServerError for another status, NotEnvelope for a bad body."""
        if reply.status != 200:
            raise server_error(reply, url)
        try:
            doc = json.loads(reply.body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or "result" not in doc:
            raise NotEnvelope(f"{url}: not a taguru response: {_trimmed(reply.body)}", reply.status)
        return doc["result"]

    async def health(self) -> None:
        """GET /health; CallError unless it answers 200."""
        url = self.base + "/health"
        reply = await self.send("GET", url, accept=JSON)
        if reply.status != 200:
            raise server_error(reply, url)

    async def call(self, method: str, segments: list[str], body: Any = None, query: str = "") -> Any:
        """One enveloped JSON call; returns the `result`, raises CallError (or a subclass) otherwise."""
        url = self.url(segments, query)
        return self.decode(await self.send(method, url, body, accept=JSON), url)
