"""The armed key table (TAGURU_API_TOKEN, TAGURU_API_TOKENS, TAGURU_KEY_SCOPES) as one immutable object, the
one reference to it that a reload swaps, and how two tables differ.

A request reads `Keys.current` once and judges its authentication, any OAuth delegation and its role and
grants against that one object, so it runs entirely under the table it was authenticated in, even when
a reload swaps the table meanwhile (server/reload.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol

import attrs

from taguru_server.server.config import KeyScope, Settings, parse_scopes, parse_tokens

KEY_VARIABLES = ("TAGURU_API_TOKEN", "TAGURU_API_TOKENS", "TAGURU_KEY_SCOPES")
EVERYTHING = KeyScope("admin", None)  # the grant of a key no scope names


class KeyTable(Protocol):
    """What authentication reads: the tokens (token → key name) and the scopes (key name → grant)."""

    @property
    def tokens(self) -> Mapping[str, str]: ...

    @property
    def scopes(self) -> Mapping[str, KeyScope]: ...

    @property
    def auth_enabled(self) -> bool: ...


def _frozen_tokens(mapping: Mapping[str, str]) -> Mapping[str, str]:
    """A read-only copy of token → key name."""
    return MappingProxyType(dict(mapping))


def _frozen_scopes(mapping: Mapping[str, KeyScope]) -> Mapping[str, KeyScope]:
    """A read-only copy of key name → grant."""
    return MappingProxyType(dict(mapping))


@attrs.frozen
class Keyring:
    """One armed key table; never changed once built (a reload builds another)."""

    tokens: Mapping[str, str] = attrs.field(converter=_frozen_tokens, factory=dict)
    scopes: Mapping[str, KeyScope] = attrs.field(converter=_frozen_scopes, factory=dict)

    @property
    def auth_enabled(self) -> bool:
        """Any key is configured (no key at all: the unauthenticated localhost mode)."""
        return bool(self.tokens)

    @property
    def names(self) -> dict[str, str]:
        """Key name → its token."""
        return {name: token for token, name in self.tokens.items()}

    def grant(self, name: str) -> KeyScope:
        """The effective grant of a key: its scope, else admin on every context."""
        return self.scopes.get(name, EVERYTHING)


def keyring_of(settings: Settings) -> Keyring:
    """The key table the boot armed."""
    return Keyring(settings.tokens, settings.scopes)


def parse_keyring(values: Mapping[str, str]) -> Keyring:
    """The key table of these variables, judged exactly as at boot; ConfigError names what is wrong."""
    tokens = parse_tokens(values)
    return Keyring(tokens, parse_scopes(values.get("TAGURU_KEY_SCOPES", ""), set(tokens.values())))


@attrs.frozen
class KeyDiff:
    """How a new table differs from the armed one, by key name; each list sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    rotated: tuple[str, ...] = ()  # same name, another token
    rescoped: tuple[str, ...] = ()  # same name, another effective grant (a scope that disappears counts)

    @property
    def empty(self) -> bool:
        """No key was added, removed, rotated or rescoped."""
        return not (self.added or self.removed or self.rotated or self.rescoped)


def diff(old: Keyring, new: Keyring) -> KeyDiff:
    """The difference between the armed table `old` and `new` (a key may be both rotated and rescoped)."""
    before, after = old.names, new.names
    kept = sorted(before.keys() & after.keys())
    return KeyDiff(
        added=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        rotated=tuple(n for n in kept if before[n] != after[n]),
        rescoped=tuple(n for n in kept if old.grant(n) != new.grant(n)),
    )


class Keys:
    """The one reference to the armed table; a reload replaces it whole (requests read it once)."""

    __slots__ = ("current",)

    def __init__(self, keyring: Keyring) -> None:
        self.current = keyring
