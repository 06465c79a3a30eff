"""The grant store: registered clients, authorization codes, access and refresh grants, bounded and hashed.

Codes and tokens are kept only as the SHA-256 of their text; every lookup compares in constant time
and scans the whole store. A store at its cap evicts (never refuses): a client's own grant with the
earliest expiry first, else a grant of the most recently registered other client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from taguru_server.server.oauth import tokens


@attrs.define
class Client:
    """A registered public client."""

    client_id: str
    client_name: str
    redirect_uris: list[str]
    created_at: int


@attrs.define
class Code:
    """An authorization code: single use, bound to its client, redirect, challenge and identity."""

    hash: str
    client_id: str
    redirect_uri: str
    challenge: str
    identity: str
    expires_at: int


@attrs.define
class Grant:
    """An access or refresh grant: the identity it acts as, for one client, until `expires_at`."""

    hash: str
    key: str
    client_id: str
    expires_at: int


G = TypeVar("G", Code, Grant)


def swap_remove(items: list[Any], index: int) -> Any:
    """Remove one entry, moving the last entry into its place (the reference's store order)."""
    last = items.pop()
    if index == len(items):
        return last
    taken = items[index]
    items[index] = last
    return taken


def find_hash(items: list[G], token: str) -> int | None:
    """The index of the entry whose hash is the token's, scanning every entry in constant time each."""
    wanted = tokens.digest(token)
    found = None
    for index, item in enumerate(items):
        if tokens.same(item.hash, wanted):
            found = index
    return found


@attrs.define
class TokenPair:
    """A successful exchange: the texts of a new access token and a new refresh token."""

    access_token: str
    refresh_token: str


@attrs.define
class GrantStore:
    """Every OAuth grant of the server, with the caps and eviction rules."""

    clients: list[Client] = attrs.field(factory=list)
    codes: list[Code] = attrs.field(factory=list)
    access: list[Grant] = attrs.field(factory=list)
    refresh: list[Grant] = attrs.field(factory=list)

    # ----- clients -------------------------------------------------------------------------------
    def client(self, client_id: str) -> Client | None:
        """The registered client with this id (every entry compared)."""
        found = None
        for client in self.clients:
            if tokens.same(client.client_id, client_id):
                found = client
        return found

    def register(self, name: str, redirect_uris: list[str], now: int) -> Client:
        """Store a new client (evicting at the cap) and return it."""
        while len(self.clients) >= tokens.CLIENT_CAP:
            self._evict_client()
        client = Client(tokens.new_token(), name, list(redirect_uris), now)
        self.clients.append(client)
        return client

    def _evict_client(self) -> None:
        """The oldest registration no operator approved (no refresh grant), else the oldest overall."""
        approved = {grant.client_id for grant in self.refresh}
        candidates = [i for i, c in enumerate(self.clients) if c.client_id not in approved] or list(
            range(len(self.clients))
        )
        oldest = min(candidates, key=lambda i: self.clients[i].created_at)
        swap_remove(self.clients, oldest)

    def _registered_at(self, client_id: str) -> int:
        """When a client registered; one no longer registered counts as time 0."""
        client = self.client(client_id)
        return 0 if client is None else client.created_at

    # ----- bounded grant stores ------------------------------------------------------------------
    def _insert(self, items: list[G], item: G, cap: int, now: int) -> None:
        """Drop expired entries, evict while at the cap, then add the entry."""
        items[:] = [entry for entry in items if entry.expires_at > now]
        while len(items) >= cap:
            swap_remove(items, self._victim(items, item.client_id))
        items.append(item)

    def _victim(self, items: list[G], client_id: str) -> int:
        """This client's grant with the earliest expiry, else a grant of the most recently registered other client."""
        own = [i for i, entry in enumerate(items) if entry.client_id == client_id]
        if own:
            return min(own, key=lambda i: items[i].expires_at)
        best, best_at = 0, -1
        for index, entry in enumerate(items):
            registered = self._registered_at(entry.client_id)
            if registered >= best_at:
                best, best_at = index, registered
        return best

    # ----- the code flow -------------------------------------------------------------------------
    def issue_code(self, client_id: str, redirect_uri: str, challenge: str, identity: str, now: int) -> str:
        """A new authorization code for this binding, valid CODE_TTL_SECS."""
        code = tokens.new_token()
        entry = Code(tokens.digest(code), client_id, redirect_uri, challenge, identity, now + tokens.CODE_TTL_SECS)
        self._insert(self.codes, entry, tokens.CODE_CAP, now)
        return code

    def exchange_code(self, code: str, client_id: str, redirect_uri: str, verifier: str, now: int) -> TokenPair | None:
        """Tokens for a code, or None; the code is spent on presentation, whatever follows."""
        index = find_hash(self.codes, code)
        if index is None:
            return None
        grant: Code = swap_remove(self.codes, index)
        if grant.expires_at <= now or grant.client_id != client_id or grant.redirect_uri != redirect_uri:
            return None
        if not tokens.VERIFIER_MIN_BYTES <= len(verifier.encode("utf-8", "surrogatepass")) <= tokens.VERIFIER_MAX_BYTES:
            return None
        if not tokens.same(tokens.pkce_s256(verifier), grant.challenge):
            return None
        return self.mint(grant.identity, grant.client_id, now)

    def use_refresh(self, token: str, client_id: str, now: int) -> TokenPair | None:
        """Rotate a live refresh grant of this client into new tokens, or None (a wrong client spends nothing)."""
        self.refresh[:] = [entry for entry in self.refresh if entry.expires_at > now]
        wanted = tokens.digest(token)
        found = None
        for index, entry in enumerate(self.refresh):
            if tokens.same(entry.hash, wanted) and entry.client_id == client_id:
                found = index
        if found is None:
            return None
        grant: Grant = swap_remove(self.refresh, found)
        return self.mint(grant.key, grant.client_id, now)

    def mint(self, identity: str, client_id: str, now: int) -> TokenPair:
        """A new access token and a new refresh token for an identity."""
        access, refresh = tokens.new_token(), tokens.new_token()
        self._insert(
            self.access,
            Grant(tokens.digest(access), identity, client_id, now + tokens.ACCESS_TTL_SECS),
            tokens.ACCESS_CAP,
            now,
        )
        self._insert(
            self.refresh,
            Grant(tokens.digest(refresh), identity, client_id, now + tokens.REFRESH_TTL_SECS),
            tokens.REFRESH_CAP,
            now,
        )
        return TokenPair(access, refresh)

    def identity_of(self, access_token: str, now: int) -> str | None:
        """The identity of an unexpired access token, or None."""
        index = find_hash(self.access, access_token)
        if index is None or self.access[index].expires_at <= now:
            return None
        return self.access[index].key

    # ----- documents -----------------------------------------------------------------------------
    def durable(self) -> dict[str, Any]:
        """The persisted part (clients and refresh grants), in the file's field order."""
        return {
            "clients": [
                {
                    "client_id": c.client_id,
                    "client_name": c.client_name,
                    "redirect_uris": c.redirect_uris,
                    "created_at": c.created_at,
                }
                for c in self.clients
            ],
            "refresh": [
                {"hash": g.hash, "key": g.key, "client_id": g.client_id, "expires_at": g.expires_at}
                for g in self.refresh
            ],
        }

    def live(self) -> dict[str, Any]:
        """The in-memory part (codes and access grants, hashes only), shared by worker processes."""
        return {
            "codes": [attrs.asdict(code) for code in self.codes],
            "access": [attrs.asdict(grant) for grant in self.access],
        }

    def load_durable(self, doc: Any) -> None:
        """Replace clients and refresh grants from a persisted document (ValueError when it is not one)."""
        self.clients = _records(doc, "clients", _client)
        self.refresh = _records(doc, "refresh", _grant)

    def load_live(self, doc: Any) -> None:
        """Replace codes and access grants from a shared live document (ValueError when it is not one)."""
        self.codes = _records(doc, "codes", _code)
        self.access = _records(doc, "access", _grant)


def _records(doc: Any, key: str, build: Callable[[Any], Any]) -> list[Any]:
    """One top-level list of a document, each entry built; ValueError when the list is missing or wrong."""
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise ValueError(key)
    try:
        return [build(entry) for entry in doc[key]]
    except (TypeError, KeyError) as exc:
        raise ValueError(key) from exc


CODE_FIELDS = {"hash": str, "client_id": str, "redirect_uri": str, "challenge": str, "identity": str, "expires_at": int}
GRANT_FIELDS = {"hash": str, "key": str, "client_id": str, "expires_at": int}
CLIENT_FIELDS = {"client_id": str, "client_name": str, "created_at": int}


def _fields(entry: Any, kinds: dict[str, type]) -> dict[str, Any]:
    """An entry's named fields, each of its declared type (TypeError or KeyError otherwise)."""
    if not isinstance(entry, dict):
        raise TypeError("entry")
    out = {}
    for name, kind in kinds.items():
        value = entry[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TypeError(name)
        out[name] = value
    return out


def _code(entry: Any) -> Code:
    """A shared authorization code entry."""
    return Code(**_fields(entry, CODE_FIELDS))


def _client(entry: Any) -> Client:
    """A persisted client entry."""
    base = _fields(entry, CLIENT_FIELDS)
    uris = entry["redirect_uris"]
    if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
        raise TypeError("redirect_uris")
    return Client(base["client_id"], base["client_name"], list(uris), base["created_at"])


def _grant(entry: Any) -> Grant:
    """A persisted access or refresh grant entry."""
    return Grant(**_fields(entry, GRANT_FIELDS))
