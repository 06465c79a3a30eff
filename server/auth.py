"""Bearer-token authentication, roles per route, and context grants."""

from __future__ import annotations

import hmac
import math
import time
from collections import deque
from collections.abc import Callable

from taguru_server.server.config import ROLES
from taguru_server.server.keyring import KeyTable
from taguru_server.store.errors import ApiError, Code

UNAUTHORIZED = "missing or invalid bearer token (send Authorization: Bearer <token>)"


class Principal:
    """Who is calling: a named key with a role and an optional context grant list."""

    __slots__ = ("key", "role", "contexts")

    def __init__(self, key: str | None, role: str, contexts: frozenset[str] | None) -> None:
        self.key = key
        self.role = role
        self.contexts = contexts

    @property
    def budget_key(self) -> str | None:
        """The key whose request budget this principal spends: an OAuth delegation `key@client` bills `key`."""
        if self.key is None or "@" not in self.key:
            return self.key
        return self.key.rpartition("@")[0]

    def may_access(self, name: str) -> bool:
        return self.contexts is None or name in self.contexts

    def require_grant(self, name: str) -> None:
        if not self.may_access(name):
            raise ApiError(Code.FORBIDDEN, f"key '{self.key}' has no grant on context '{name}'")

    def require_role(self, method: str, template: str, needed: str) -> None:
        if ROLES.index(self.role) < ROLES.index(needed):
            raise ApiError(
                Code.FORBIDDEN, f"key '{self.key}' has role '{self.role}', but {method} {template} needs '{needed}'"
            )


OPEN = Principal(None, "admin", None)


def authenticate(
    keys: KeyTable,
    headers: list[str],
    delegated: Callable[[str], str | None] | None = None,
    challenge: str = "Bearer",
) -> Principal:
    """Resolve the Authorization header(s) to a principal, or raise 401 (with `challenge` as `WWW-Authenticate`).

    `keys` is the key table the request was given (the armed `Keyring`, or the boot's `Settings`).
    A token that is no configured key is passed to `delegated` when given (an OAuth access token on
    `/mcp`), which answers the identity `key@client` it acts as, or None.
    """
    if not keys.auth_enabled:
        return OPEN
    if len(headers) != 1:
        raise unauthorized(challenge)
    scheme, _, rest = headers[0].partition(" ")
    token = rest.lstrip(" ")
    if scheme.lower() != "bearer" or not token:
        raise unauthorized(challenge)
    name = None
    for candidate, key in keys.tokens.items():
        if hmac.compare_digest(candidate.encode(), token.encode()):
            name = key
    if name is None and delegated is not None:
        name = delegated(token)
    if name is None:
        raise unauthorized(challenge)
    scope = keys.scopes.get(name)
    if scope is None and "@" in name:  # a delegation inherits its base key's grant
        scope = keys.scopes.get(name.rpartition("@")[0])
    if scope is None:
        return Principal(name, "admin", None)
    return Principal(name, scope.role, scope.contexts)


def unauthorized(challenge: str = "Bearer") -> ApiError:
    return ApiError(Code.UNAUTHORIZED, UNAUTHORIZED, headers={"WWW-Authenticate": challenge})


class SlidingWindow:
    """Events per key over the last minute."""

    WINDOW_SECS = 60.0

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self.events: dict[str, deque[float]] = {}

    def wait_secs(self, times: deque[float]) -> int:
        return max(1, math.ceil(self.WINDOW_SECS - (self.clock() - times[0])))

    def _recent(self, key: str) -> deque[float]:
        now = self.clock()
        times = self.events.setdefault(key, deque())
        while times and now - times[0] >= self.WINDOW_SECS:
            times.popleft()
        return times


class FailedAuthLimiter(SlidingWindow):
    """Per client address: past `limit` failed authentications in a minute, answer 429."""

    def check(self, address: str) -> None:
        """Refuse an address that already used up its failures for this minute."""
        if not self.limit:
            return
        times = self._recent(address)
        if len(times) >= self.limit:
            wait = self.wait_secs(times)
            raise ApiError(
                Code.RATE_LIMITED,
                f"too many failed authentication attempts — retry in {wait}s",
                headers={"Retry-After": str(wait)},
            )

    def failed(self, address: str) -> None:
        if self.limit:
            self._recent(address).append(self.clock())
            if len(self.events) > 10_000:  # forget addresses idle for a minute
                now = self.clock()
                for key in [k for k, v in self.events.items() if not v or now - v[-1] >= self.WINDOW_SECS]:
                    del self.events[key]


class KeyRateLimiter(SlidingWindow):
    """Per named key: at most `limit` requests a minute (TAGURU_RATE_LIMIT_PER_MIN; 0 is off)."""

    def admit(self, key: str | None) -> None:
        if not self.limit or key is None:
            return
        times = self._recent(key)
        if len(times) >= self.limit:
            wait = self.wait_secs(times)
            raise ApiError(
                Code.RATE_LIMITED,
                f"key '{key}' is over its request budget ({self.limit} per minute) — retry in {wait}s",
                headers={"Retry-After": str(wait)},
            )
        times.append(self.clock())
