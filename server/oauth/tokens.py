"""The OAuth constants and credential material: random tokens, their stored hashes, PKCE S256."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

CODE_TTL_SECS = 60
ACCESS_TTL_SECS = 3600
REFRESH_TTL_SECS = 30 * 24 * 3600
CLIENT_CAP = 100
CODE_CAP = 100
ACCESS_CAP = 100
REFRESH_CAP = 100
MAX_CLIENT_NAME_BYTES = 256
MAX_REDIRECT_URIS = 10
MAX_REDIRECT_URI_BYTES = 2048
VERIFIER_MIN_BYTES = 43
VERIFIER_MAX_BYTES = 128
CHALLENGE_BYTES = 43


class ClockBeforeEpoch(Exception):
    """The system clock reads before 1970: every grant operation fails closed."""


def b64url(data: bytes) -> str:
    """Base64url without padding (RFC 4648, section 5)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def new_token() -> str:
    """32 bytes from the OS CSPRNG, base64url without padding: 43 characters."""
    return b64url(secrets.token_bytes(32))


def digest(token: str) -> str:
    """The lowercase hex SHA-256 of a token's text: the only form codes and tokens are kept in."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def pkce_s256(verifier: str) -> str:
    """The S256 code challenge of a verifier (RFC 7636)."""
    return b64url(hashlib.sha256(verifier.encode("utf-8", "surrogatepass")).digest())


def same(a: str, b: str) -> bool:
    """Constant-time equality of two texts."""
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


def now_secs(clock: float | None = None) -> int:
    """Whole Unix seconds now; a clock before 1970 raises `ClockBeforeEpoch`."""
    value = time.time() if clock is None else clock
    if value < 0:
        raise ClockBeforeEpoch
    return int(value)
