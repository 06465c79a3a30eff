"""What an OAuth token opens: `POST /mcp` only, as its delegating key, while that key is still configured."""

from __future__ import annotations

import asyncio

import structlog

from taguru_server.server.keyring import KeyTable
from taguru_server.server.oauth.persist import OAuthState
from taguru_server.server.oauth.tokens import ClockBeforeEpoch

log = structlog.get_logger("taguru.oauth")

MCP_PATH = "/mcp"


def base_key(identity: str) -> str:
    """The key a delegation acts as: the part before the last `@` (a key name itself has no `@`)."""
    return identity.rpartition("@")[0] if "@" in identity else identity


class OAuth:
    """The mounted OAuth server: its issuer `P`, the protected resource `P/mcp`, and the grant store."""

    def __init__(self, issuer: str, state: OAuthState) -> None:
        self.issuer = issuer
        self.resource = f"{issuer}{MCP_PATH}"
        self.metadata_url = f"{issuer}/.well-known/oauth-protected-resource"
        self.state = state

    @property
    def challenge(self) -> str:
        """The `WWW-Authenticate` value of every 401 while OAuth is mounted (plain `Bearer` if not a header value)."""
        value = f'Bearer resource_metadata="{self.metadata_url}"'
        if any(ord(c) < 0x20 or ord(c) == 0x7F or ord(c) > 0x7E for c in value):
            return "Bearer"
        return value

    async def refreshed(self) -> None:
        """Bring the grants up to date with the other processes (off the event loop: it may read the database)."""
        if self.state.shared:
            await asyncio.to_thread(self.state.current)

    def delegated(self, token: str, keys: KeyTable) -> str | None:
        """The identity an access token acts as, if it is live and its key (or itself) is still configured in
        the key table the request was given (a reload that removes the key ends its delegations), on the
        grants as last `refreshed`."""
        try:
            now = self.state.now()
        except ClockBeforeEpoch:
            return None  # every access token counts as expired
        identity = self.state.store.identity_of(token, now)
        if identity is None:
            return None
        names = set(keys.tokens.values())
        if identity in names or base_key(identity) in names:
            return identity
        return None


def enabled_note(issuer: str) -> None:
    """The boot's info line naming the issuer."""
    log.info("oauth enabled for remote MCP", issuer=issuer)
