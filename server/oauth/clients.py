"""Dynamic client registration (RFC 7591): the request's fields, the checks in order, names and slugs."""

from __future__ import annotations

import unicodedata
from typing import Any
from urllib.parse import urlsplit

from taguru_server.client.urls import is_loopback_host
from taguru_server.server.oauth.tokens import MAX_CLIENT_NAME_BYTES, MAX_REDIRECT_URI_BYTES, MAX_REDIRECT_URIS

INVISIBLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x061C, 0x061C),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0xE0000, 0xE007F),
    (0xE0100, 0xE01EF),
)
SLUG_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
SLUG_MAX = 24


class RegistrationRefused(Exception):
    """A registration the checks refuse; the text is the `error_description`."""


def invisible(char: str) -> bool:
    """A control character or one of the invisible and direction-control characters a name or URI may not hide."""
    if unicodedata.category(char) == "Cc":
        return True
    point = ord(char)
    return any(low <= point <= high for low, high in INVISIBLE_RANGES)


def utf8_len(text: str) -> int:
    """The text's length in UTF-8 bytes."""
    return len(text.encode("utf-8", "surrogatepass"))


def clean_name(name: str) -> str:
    """A client name with its invisible characters removed, then trimmed of surrounding whitespace."""
    return "".join(c for c in name if not invisible(c)).strip()


def slug(name: str) -> str:
    """The name's ASCII letters, digits, `-` and `_`, cut to 24 characters; `client` when nothing is left."""
    kept = "".join(c for c in name if c in SLUG_CHARS)[:SLUG_MAX]
    return kept or "client"


def acceptable_redirect(uri: str) -> bool:
    """https without credentials, or http to a loopback host without credentials (parsed, never prefix-matched)."""
    try:
        parts = urlsplit(uri)
        scheme = parts.scheme.lower()
        if scheme not in ("https", "http") or not parts.netloc or "@" in parts.netloc:
            return False
        host = (parts.hostname or "").lower()
        _ = parts.port  # a port that does not parse makes the URI unparseable
    except ValueError:
        return False
    if scheme == "https":
        return bool(host)
    return is_loopback_host(host)


def _invisible_at(uri: str) -> str | None:
    """The refusal naming the first invisible character of a URI, or None."""
    offset = 0
    for char in uri:
        if invisible(char):
            return f"contains a disallowed invisible character (U+{ord(char):04X}) at byte {offset}"
        offset += utf8_len(char)
    return None


def request_fields(body: Any) -> tuple[str, list[str]]:
    """The client name (else `client`) and the redirect URIs (strings only, at most 11 read) of a request."""
    if not isinstance(body, dict):
        return "client", []
    name = body.get("client_name")
    uris = body.get("redirect_uris")
    strings = [u for u in uris if isinstance(u, str)][: MAX_REDIRECT_URIS + 1] if isinstance(uris, list) else []
    return name if isinstance(name, str) else "client", strings


def check_registration(name: str, uris: list[str]) -> str:
    """The cleaned client name, once every check passes in order; else `RegistrationRefused`."""
    if not uris:
        raise RegistrationRefused("redirect_uris must not be empty")
    if len(uris) > MAX_REDIRECT_URIS:
        raise RegistrationRefused(f"too many redirect_uris ({len(uris)}, max {MAX_REDIRECT_URIS})")
    for index, uri in enumerate(uris, start=1):
        size = utf8_len(uri)
        if size > MAX_REDIRECT_URI_BYTES:
            raise RegistrationRefused(f"redirect uri #{index} is too long ({size} bytes, max {MAX_REDIRECT_URI_BYTES})")
        hidden = _invisible_at(uri)
        if hidden is not None:
            raise RegistrationRefused(f"redirect uri #{index} {hidden}")
        if not acceptable_redirect(uri):
            raise RegistrationRefused(f"redirect uri #{index} must be https or loopback")
    cleaned = clean_name(name)
    size = utf8_len(cleaned)
    if size > MAX_CLIENT_NAME_BYTES:
        raise RegistrationRefused(f"client_name is too long ({size} bytes, max {MAX_CLIENT_NAME_BYTES})")
    return cleaned
