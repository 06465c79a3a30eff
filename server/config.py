"""Settings from TAGURU_* variables (and an optional KEY=VALUE config file)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import attrs

from taguru_server.client.config import read_config_file

ROLES = ("read", "write", "admin")


class ConfigError(Exception):
    """A configuration the server refuses to boot with."""


@attrs.frozen
class KeyScope:
    role: str
    contexts: frozenset[str] | None  # None: every context


@attrs.frozen
class Settings:
    addr: str = "127.0.0.1:8248"
    data_dir: str = "data"
    max_body_bytes: int = 8 * 1024 * 1024
    request_timeout_secs: int = 30
    header_timeout_secs: int = 10
    min_body_rate: int = 1024
    workers: int = 1
    database_url: str | None = None  # postgresql://… selects the shared PostgreSQL store
    read_consistency: str = "strong"  # or "eventual": replicas skip the per-read catch-up check
    max_concurrent_requests: int = 256
    auth_fail_limit_per_min: int = 10
    rate_limit_per_min: int = 0
    tokens: dict[str, str] = attrs.field(factory=dict)  # token -> key name
    scopes: dict[str, KeyScope] = attrs.field(factory=dict)

    @property
    def auth_enabled(self) -> bool:
        return bool(self.tokens)

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.addr.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)


def _int(env: Mapping[str, str], key: str, default: int, zero_means: int | None = None) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{key} must be a whole number, got a value that does not parse") from None
    if value < 0:
        raise ConfigError(f"{key} must not be negative")
    if value == 0 and zero_means is not None:
        return zero_means
    return value


def _database_url(env: Mapping[str, str]) -> str | None:
    raw = env.get("TAGURU_DATABASE_URL", "").strip()
    if not raw:
        return None
    if not raw.startswith(("postgresql://", "postgres://")):
        raise ConfigError("TAGURU_DATABASE_URL must be a postgresql:// URL (leave it unset for the SQLite store)")
    return raw


def _consistency(env: Mapping[str, str]) -> str:
    raw = env.get("TAGURU_READ_CONSISTENCY", "").strip() or "strong"
    if raw not in ("strong", "eventual"):
        raise ConfigError("TAGURU_READ_CONSISTENCY must be 'strong' or 'eventual'")
    return raw


def load_settings(env: Mapping[str, str] | None = None, config_file: str | None = None) -> Settings:
    """Build settings; the real environment wins over the config file."""
    env = dict(os.environ if env is None else env)
    file = config_file or env.get("TAGURU_CONFIG")
    if file:
        merged = read_config_file(file)
        merged.update(env)
        env = merged
    tokens = _parse_tokens(env)
    scopes = _parse_scopes(env.get("TAGURU_KEY_SCOPES", ""), set(tokens.values()))
    return Settings(
        addr=env.get("TAGURU_ADDR", "").strip() or "127.0.0.1:8248",
        data_dir=env.get("TAGURU_DATA_DIR", "").strip() or "data",
        max_body_bytes=_int(env, "TAGURU_MAX_BODY_BYTES", 8 * 1024 * 1024, zero_means=8 * 1024 * 1024),
        request_timeout_secs=_int(env, "TAGURU_REQUEST_TIMEOUT_SECS", 30, zero_means=1),
        header_timeout_secs=_int(env, "TAGURU_HEADER_TIMEOUT_SECS", 10),
        min_body_rate=_int(env, "TAGURU_MIN_BODY_RATE", 1024),
        workers=_int(env, "TAGURU_WORKERS", 1, zero_means=1),
        database_url=_database_url(env),
        read_consistency=_consistency(env),
        max_concurrent_requests=_int(env, "TAGURU_MAX_CONCURRENT_REQUESTS", 256),
        auth_fail_limit_per_min=_int(env, "TAGURU_AUTH_FAIL_LIMIT_PER_MIN", 10),
        rate_limit_per_min=_int(env, "TAGURU_RATE_LIMIT_PER_MIN", 0),
        tokens=tokens,
        scopes=scopes,
    )


def _parse_tokens(env: Mapping[str, str]) -> dict[str, str]:
    tokens: dict[str, str] = {}
    names: set[str] = set()

    def add(name: str, token: str) -> None:
        if "@" in name:
            raise ConfigError(f"API key name '{name}' must not contain '@'")
        if name in names:
            raise ConfigError(f"API key name '{name}' is defined twice")
        if token in tokens:
            raise ConfigError(f"API key '{name}' reuses another key's token")
        if not name or not token:
            raise ConfigError("TAGURU_API_TOKENS entries must be name:token with both parts non-empty")
        names.add(name)
        tokens[token] = name

    single = env.get("TAGURU_API_TOKEN", "").strip()
    if single:
        add("default", single)
    for entry in env.get("TAGURU_API_TOKENS", "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, token = entry.partition(":")
        if not sep:
            raise ConfigError("TAGURU_API_TOKENS entries must be name:token")
        add(name.strip(), token.strip())
    return tokens


def _parse_scopes(raw: str, key_names: set[str]) -> dict[str, KeyScope]:
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"TAGURU_KEY_SCOPES is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("TAGURU_KEY_SCOPES must be a JSON object of key name → role or {role, contexts}")
    scopes: dict[str, KeyScope] = {}
    for name, spec in data.items():
        if name not in key_names:
            raise ConfigError(f"TAGURU_KEY_SCOPES names unknown key '{name}'")
        if isinstance(spec, str):
            role, contexts = spec, None
        elif isinstance(spec, dict):
            role = spec.get("role", "admin")
            ctxs = spec.get("contexts")
            if ctxs is None:
                contexts = None
            elif isinstance(ctxs, list) and all(isinstance(c, str) for c in ctxs):
                if not ctxs:
                    raise ConfigError(f"TAGURU_KEY_SCOPES key '{name}' has an empty contexts list")
                contexts = frozenset(ctxs)
            else:
                raise ConfigError(f"TAGURU_KEY_SCOPES key '{name}': contexts must be an array of names")
        else:
            raise ConfigError(f"TAGURU_KEY_SCOPES key '{name}' must map to a role or {{role, contexts}}")
        if role not in ROLES:
            raise ConfigError(f"TAGURU_KEY_SCOPES key '{name}' has unknown role '{role}'")
        scopes[name] = KeyScope(role, contexts)
    return scopes
