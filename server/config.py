"""The settings tree: every command's settings from the TAGURU_* variables and the optional KEY=VALUE
config file (`load_configuration`), the server's own part (`Settings`) and how each is parsed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import structlog

from taguru_server.client.config import with_config_file
from taguru_server.server.cache_config import (
    Quota,
    boolean,
    cache_settings,
    json_object,
    parsed,
    semantic_threshold,
    unit_f32,
    unsigned,
)
from taguru_server.server.logging import LogSettings, parse_log_format, parse_log_level
from taguru_server.server.variables import default_float, default_int, default_str, process_environment

if TYPE_CHECKING:
    from taguru_server.server.providers.chat import ProviderConfig
    from taguru_server.server.providers.reranker import RerankSettings

ROLES = ("read", "write", "admin")

log = structlog.get_logger("taguru.config")
bridge_log = structlog.get_logger("taguru.mcp_stdio")  # the bridge's own warnings, under its name

# the defaults are the registry's (server/variables.py)
DEFAULT_ADDR = default_str("TAGURU_ADDR")
DEFAULT_DATA_DIR = default_str("TAGURU_DATA_DIR")
DEFAULT_MAX_BODY_BYTES = default_int("TAGURU_MAX_BODY_BYTES")
DEFAULT_MCP_MAX_RESULT_BYTES = default_int("TAGURU_MCP_MAX_RESULT_BYTES")
DEFAULT_EMBED_TIMEOUT_SECS = default_int("TAGURU_EMBED_TIMEOUT_SECS")
DEFAULT_FLUSH_SECS = default_int("TAGURU_FLUSH_SECS")
DEFAULT_PASSAGE_VECTOR_LIMIT = default_int("TAGURU_PASSAGE_VECTOR_LIMIT")
DEFAULT_SEMANTIC_FLOOR = float(np.float32(default_float("TAGURU_SEMANTIC_FLOOR")))


# the stdio bridge's (taguru mcp: server/mcp/stdio.py)
DEFAULT_URL = default_str("TAGURU_URL")
DEFAULT_TIMEOUT_SECS = default_float("TAGURU_MCP_TIMEOUT_SECS")
DEFAULT_MAX_LINE_BYTES = default_int("TAGURU_MCP_MAX_LINE_BYTES")
DEFAULT_MAX_CONCURRENT_TOOLS = default_int("TAGURU_MCP_MAX_CONCURRENT_TOOLS")


class ConfigError(Exception):
    """A configuration the server refuses to boot with."""


@attrs.frozen
class KeyScope:
    role: str
    contexts: frozenset[str] | None  # None: every context


@attrs.frozen
class Settings:
    addr: str = DEFAULT_ADDR
    data_dir: str = DEFAULT_DATA_DIR
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    mcp_max_result_bytes: int = DEFAULT_MCP_MAX_RESULT_BYTES
    request_timeout_secs: int = default_int("TAGURU_REQUEST_TIMEOUT_SECS")
    header_timeout_secs: int = default_int("TAGURU_HEADER_TIMEOUT_SECS")
    min_body_rate: int = default_int("TAGURU_MIN_BODY_RATE")
    workers: int = default_int("TAGURU_WORKERS")
    database_url: str | None = None  # postgresql://… selects the shared PostgreSQL store
    read_consistency: str = default_str("TAGURU_READ_CONSISTENCY")  # or "eventual": no per-read catch-up check
    max_concurrent_requests: int = default_int("TAGURU_MAX_CONCURRENT_REQUESTS")
    auth_fail_limit_per_min: int = default_int("TAGURU_AUTH_FAIL_LIMIT_PER_MIN")
    rate_limit_per_min: int = default_int("TAGURU_RATE_LIMIT_PER_MIN")
    tokens: dict[str, str] = attrs.field(factory=dict)  # token -> key name
    scopes: dict[str, KeyScope] = attrs.field(factory=dict)
    # the optional embedding provider (docs/embeddings.md); none of these can fail the boot
    embed_url: str | None = None  # the full endpoint; "local" (any case) selects the in-process model
    embed_model: str | None = None  # the vector identity; the HTTP provider needs it
    embed_api_key: str | None = None  # sent verbatim as `Bearer {key}` when set, even to ""
    embed_timeout_secs: int = DEFAULT_EMBED_TIMEOUT_SECS  # one attempt's ceiling
    embed_auto: bool = False
    flush_secs: int = DEFAULT_FLUSH_SECS  # TAGURU_FLUSH_SECS: the auto-embed and housekeeping tickers' cadence
    embed_passages: bool = False
    embed_parallel: int = 1
    passage_vector_limit: int = DEFAULT_PASSAGE_VECTOR_LIMIT
    semantic_floor: float = DEFAULT_SEMANTIC_FLOOR  # an f32 value, held widened
    semantic_cache_threshold: float | None = None  # an f32 value; None: the semantic cache is off
    retrieval_cache_bytes: int = default_int("TAGURU_RETRIEVAL_CACHE_BYTES")  # 0: the exact-match cache is off
    log_searches: bool = False  # TAGURU_LOG_SEARCHES: one redacted `search.served` line per served retrieval
    auto_compact: bool = True  # TAGURU_AUTO_COMPACT: compact the context with the most dead edges per tick
    auto_compact_ratio: float = default_float("TAGURU_AUTO_COMPACT_RATIO")  # the dead-edge ratio it must pass
    quotas: dict[str, Quota] = attrs.field(factory=dict)  # TAGURU_CONTEXT_QUOTAS: context name → its ceilings
    log_format: str | None = None  # TAGURU_LOG_FORMAT: json or console; None: json unless stderr is a TTY
    log_level: str = default_str("TAGURU_LOG_LEVEL")
    preload: str | tuple[str, ...] = default_str("TAGURU_PRELOAD")  # all, pinned, none, or these context names
    worker_start: str = default_str("TAGURU_WORKER_START")  # fork (share the supervisor's load) or exec (each loads)
    index_dir: str | None = None  # TAGURU_INDEX_DIR: None is the default place (see `index_dir_for`), "off" none
    # TAGURU_STRICT_TENANCY: keys with a context list see only the groups wholly inside their grant, and
    # refusals never name a context outside it (a departure from the reference, opt-in; docs/operations.md)
    strict_tenancy: bool = False
    # TAGURU_EVIDENCE_GRAPH_PASSAGES: an evidence request without `include_graph_passages` runs the mode
    evidence_graph_passages: bool = False
    # TAGURU_PUBLIC_URL without its trailing `/`: the OAuth issuer (server/oauth/); None: OAuth is not mounted
    public_url: str | None = None

    @property
    def logging(self) -> LogSettings:
        """The logging part: TAGURU_LOG_FORMAT and TAGURU_LOG_LEVEL as the boot checked them."""
        return LogSettings(self.log_format, self.log_level)

    @property
    def auth_enabled(self) -> bool:
        return bool(self.tokens)

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.addr.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)


def _int(env: Mapping[str, str], key: str, zero_means: int | None = None) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        return default_int(key)
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{key} must be a whole number, got a value that does not parse") from None
    if value < 0:
        raise ConfigError(f"{key} must not be negative")
    if value == 0 and zero_means is not None:
        return zero_means
    return value


def _flush_secs(env: Mapping[str, str]) -> int:
    raw = env.get("TAGURU_FLUSH_SECS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_FLUSH_SECS


def _database_url(env: Mapping[str, str]) -> str | None:
    raw = env.get("TAGURU_DATABASE_URL", "").strip()
    if not raw:
        return None
    if not raw.startswith(("postgresql://", "postgres://")):
        raise ConfigError("TAGURU_DATABASE_URL must be a postgresql:// URL (leave it unset for the SQLite store)")
    return raw


def _consistency(env: Mapping[str, str]) -> str:
    raw = env.get("TAGURU_READ_CONSISTENCY", "").strip() or default_str("TAGURU_READ_CONSISTENCY")
    if raw not in ("strong", "eventual"):
        raise ConfigError("TAGURU_READ_CONSISTENCY must be 'strong' or 'eventual'")
    return raw


def _log_settings(env: Mapping[str, str]) -> dict[str, Any]:
    try:
        return {
            "log_format": parse_log_format(env.get("TAGURU_LOG_FORMAT")),
            "log_level": parse_log_level(env.get("TAGURU_LOG_LEVEL")) or default_str("TAGURU_LOG_LEVEL"),
        }
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _preload(env: Mapping[str, str]) -> str | tuple[str, ...]:
    """TAGURU_PRELOAD: `all` (default), `pinned`, `none`, or a comma-separated list of context names."""
    raw = env.get("TAGURU_PRELOAD", "").strip()
    if not raw:
        return default_str("TAGURU_PRELOAD")
    if raw.lower() in ("all", "pinned", "none"):
        return raw.lower()
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    if not names:
        raise ConfigError("TAGURU_PRELOAD must be all, pinned, none, or a comma-separated list of context names")
    return names


def _worker_start(env: Mapping[str, str]) -> str:
    raw = env.get("TAGURU_WORKER_START", "").strip().lower() or default_str("TAGURU_WORKER_START")
    if raw not in ("fork", "exec"):
        raise ConfigError("TAGURU_WORKER_START must be 'fork' or 'exec'")
    return raw


def index_dir_for(settings: Settings) -> Path | None:
    """Where the persisted derived indexes live: TAGURU_INDEX_DIR, else `indexes/` in the SQLite data dir;
    none with PostgreSQL unless the variable names a directory (each host keeps its own), or when it is `off`."""
    if settings.index_dir is not None:
        return None if settings.index_dir.lower() == "off" else Path(settings.index_dir)
    return None if settings.database_url else Path(settings.data_dir) / "indexes"


@attrs.frozen
class BridgeSettings:
    """The bridge's configuration, read once from the environment the command passes."""

    url: str = DEFAULT_URL
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT_SECS
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_concurrent: int = DEFAULT_MAX_CONCURRENT_TOOLS


def _positive(env: Mapping[str, str], key: str, default: float, kind: type = int) -> Any:
    """A positive number variable of `kind`; unset, unparseable or not positive: `default` (the latter two warn)."""
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        bridge_log.warning("bridge.config_ignored", variable=key, reason="not a number; using the default")
        return default
    if not 0 < value < float("inf"):
        bridge_log.warning("bridge.config_ignored", variable=key, reason="must be positive; using the default")
        return default
    return value


def bridge_settings(env: Mapping[str, str]) -> BridgeSettings:
    """The bridge's settings; a TAGURU_MCP_* value that is not a positive number warns and keeps its default."""
    token = env.get("TAGURU_API_TOKEN", "").strip() or None
    return BridgeSettings(
        url=(env.get("TAGURU_URL", "").strip() or DEFAULT_URL).rstrip("/"),
        token=token,
        timeout=float(_positive(env, "TAGURU_MCP_TIMEOUT_SECS", DEFAULT_TIMEOUT_SECS, float)),
        max_line_bytes=int(_positive(env, "TAGURU_MCP_MAX_LINE_BYTES", DEFAULT_MAX_LINE_BYTES)),
        max_concurrent=int(_positive(env, "TAGURU_MCP_MAX_CONCURRENT_TOOLS", DEFAULT_MAX_CONCURRENT_TOOLS)),
    )


@attrs.frozen
class Configuration:
    """Every command's settings, from one environment mapping and the settings file merged once.

    `environ` is the process environment as the command read it (the tracing switches and child
    processes take it as it is); `values` is `environ` over the `--config` file (a variable set in
    the environment wins). Each part is built when a command takes it, so a command checks (and
    warns about, or refuses) only the variables it uses: `server()` (the server's `Settings`),
    `rerank()`, `chat()` (the summary provider of `taguru communities`), `bridge()` (`taguru mcp`)."""

    environ: Mapping[str, str]
    values: Mapping[str, str]

    @classmethod
    def without_file(cls, environ: Mapping[str, str]) -> Configuration:
        """The settings of a command that reads no settings file (`taguru mcp`)."""
        return cls(dict(environ), dict(environ))

    def server(self) -> Settings:
        """The server's settings; ConfigError for a value that refuses the boot."""
        return _server_settings(self.values)

    def rerank(self) -> RerankSettings | None:
        """The evidence reranker (TAGURU_RERANK_*), None when it is off."""
        from taguru_server.server.providers.reranker import rerank_settings

        return rerank_settings(self.values)

    def chat(self) -> ProviderConfig | None:
        """The chat provider of community summaries (TAGURU_EXTRACT_*), None when unset; ChatConfigError
        when half set or its timeout does not parse."""
        from taguru_server.server.providers.chat import ProviderConfig

        return ProviderConfig.from_env(self.values)

    def bridge(self) -> BridgeSettings:
        """The stdio bridge's settings (TAGURU_URL, TAGURU_API_TOKEN, TAGURU_MCP_*)."""
        return bridge_settings(self.values)


def load_configuration(environ: Mapping[str, str] | None = None, config_file: str | None = None) -> Configuration:
    """The settings tree of a command: `environ` (the process environment when None) over the settings
    file (`config_file`, else TAGURU_CONFIG). OSError or UnicodeDecodeError when the file cannot be read."""
    env = dict(process_environment() if environ is None else environ)
    return Configuration(env, with_config_file(env, config_file))


def load_settings(env: Mapping[str, str] | None = None, config_file: str | None = None) -> Settings:
    """The server's settings; the real environment wins over the config file."""
    return load_configuration(env, config_file).server()


PUBLIC_URL_BLANK = (
    "TAGURU_PUBLIC_URL is set but empty: treating OAuth as disabled — unset the variable entirely if that's intended"
)
PUBLIC_URL_WITHOUT_KEYS = (
    "TAGURU_PUBLIC_URL is set but no API key is: the OAuth consent step delegates an EXISTING key, so configure "
    "TAGURU_API_TOKEN(S) first"
)


def _public_url(env: Mapping[str, str], keyed: bool) -> str | None:
    """TAGURU_PUBLIC_URL as the OAuth issuer (trailing `/` removed); blank warns and leaves OAuth off, and
    without an API key the boot is refused (the consent step delegates an existing key)."""
    raw = env.get("TAGURU_PUBLIC_URL")
    if raw is None:
        return None
    if not raw.strip():
        log.warning(PUBLIC_URL_BLANK)
        return None
    if not keyed:
        raise ConfigError(PUBLIC_URL_WITHOUT_KEYS)
    return raw.rstrip("/")


def _server_settings(env: Mapping[str, str]) -> Settings:
    """The server's settings from the merged variables."""
    tokens = parse_tokens(env)
    scopes = parse_scopes(env.get("TAGURU_KEY_SCOPES", ""), set(tokens.values()))
    return Settings(
        addr=env.get("TAGURU_ADDR", "").strip() or DEFAULT_ADDR,
        data_dir=env.get("TAGURU_DATA_DIR", "").strip() or DEFAULT_DATA_DIR,
        max_body_bytes=_int(env, "TAGURU_MAX_BODY_BYTES", zero_means=DEFAULT_MAX_BODY_BYTES),
        mcp_max_result_bytes=_int(env, "TAGURU_MCP_MAX_RESULT_BYTES", zero_means=DEFAULT_MCP_MAX_RESULT_BYTES),
        request_timeout_secs=_int(env, "TAGURU_REQUEST_TIMEOUT_SECS", zero_means=1),
        header_timeout_secs=_int(env, "TAGURU_HEADER_TIMEOUT_SECS"),
        min_body_rate=_int(env, "TAGURU_MIN_BODY_RATE"),
        workers=_int(env, "TAGURU_WORKERS", zero_means=1),
        database_url=_database_url(env),
        read_consistency=_consistency(env),
        max_concurrent_requests=_int(env, "TAGURU_MAX_CONCURRENT_REQUESTS"),
        auth_fail_limit_per_min=_int(env, "TAGURU_AUTH_FAIL_LIMIT_PER_MIN"),
        rate_limit_per_min=_int(env, "TAGURU_RATE_LIMIT_PER_MIN"),
        tokens=tokens,
        scopes=scopes,
        preload=_preload(env),
        index_dir=env.get("TAGURU_INDEX_DIR", "").strip() or None,
        worker_start=_worker_start(env),
        strict_tenancy=_flag(env, "TAGURU_STRICT_TENANCY", refuse=True),
        evidence_graph_passages=_flag(env, "TAGURU_EVIDENCE_GRAPH_PASSAGES"),
        public_url=_public_url(env, bool(tokens)),
        **_log_settings(env),
        **embedding_settings(env),
        **cache_settings(env),
    )


def _unsigned(env: Mapping[str, str], key: str) -> int | None:
    """An unsigned integer variable: None when unset/empty or unparseable (the latter with a warning)."""
    return parsed(env, key, unsigned, lambda _text: f"{key} is not an unsigned integer; using the default")


def _unit_f32(env: Mapping[str, str], key: str) -> float | None:
    """An f32 in [0, 1]: None when unset/empty, or (with a warning) unparseable, NaN or out of range."""
    return parsed(env, key, unit_f32, lambda _text: f"{key} must be a number between 0 and 1; keeping the default")


def _flag(env: Mapping[str, str], key: str, default: bool = False, refuse: bool = False) -> bool:
    """A boolean variable: 1/true and 0/false (any case); anything else warns and keeps the default,
    or with `refuse` (a security switch, which must not silently stay off) refuses the boot."""
    text = env.get(key, "").strip()
    if not text:
        return default
    value = boolean(text)
    if value is not None:
        return value
    if refuse:
        raise ConfigError(f"{key} must be 1, true, 0 or false")
    log.warning(f"{key} is not a boolean (1, true, 0 or false); keeping the default")
    return default


def embedding_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The TAGURU_EMBED_* and semantic variables as Settings fields; a bad value warns and keeps its default."""
    timeout = _unsigned(env, "TAGURU_EMBED_TIMEOUT_SECS")
    parallel = _unsigned(env, "TAGURU_EMBED_PARALLEL")
    if parallel == 0:
        log.warning("TAGURU_EMBED_PARALLEL must be at least 1; using 1")
    limit = _unsigned(env, "TAGURU_PASSAGE_VECTOR_LIMIT")
    floor = _unit_f32(env, "TAGURU_SEMANTIC_FLOOR")
    return {
        "embed_url": env.get("TAGURU_EMBED_URL"),
        "embed_model": env.get("TAGURU_EMBED_MODEL"),
        "embed_api_key": env.get("TAGURU_EMBED_API_KEY"),
        "embed_timeout_secs": DEFAULT_EMBED_TIMEOUT_SECS if timeout is None else max(1, timeout),
        "embed_auto": _flag(env, "TAGURU_EMBED_AUTO"),
        "flush_secs": _flush_secs(env),
        "embed_passages": _flag(env, "TAGURU_EMBED_PASSAGES"),
        "embed_parallel": parallel or 1,
        "passage_vector_limit": DEFAULT_PASSAGE_VECTOR_LIMIT if limit is None else limit,
        "semantic_floor": DEFAULT_SEMANTIC_FLOOR if floor is None else floor,
        "semantic_cache_threshold": semantic_threshold(env),
    }


SCOPES_SHAPE = 'TAGURU_KEY_SCOPES is not the documented JSON shape ({"name": "role" | {"role": …, "contexts": […]}})'


def parse_tokens(env: Mapping[str, str]) -> dict[str, str]:
    """TAGURU_API_TOKEN (the key `default`) and TAGURU_API_TOKENS (`name:token,…`) as token → key name;
    ConfigError names a bad entry by position or by key name, never by token. Blank variables are unset."""
    tokens: dict[str, str] = {}
    names: set[str] = set()

    def add(name: str, token: str) -> None:
        if "@" in name:
            raise ConfigError(f"key name '{name}' must not contain '@' (reserved for OAuth delegation, 'key@client')")
        if name in names:
            raise ConfigError(f"key name '{name}' is configured twice")
        if token in tokens:
            raise ConfigError(f"key name '{name}' reuses the token of key name '{tokens[token]}'")
        names.add(name)
        tokens[token] = name

    single = env.get("TAGURU_API_TOKEN", "").strip()
    if single:
        add("default", single)
    for position, entry in enumerate(env.get("TAGURU_API_TOKENS", "").split(","), 1):
        entry = entry.strip()
        if not entry:
            continue  # a trailing comma
        name, sep, token = entry.partition(":")
        if not sep:
            raise ConfigError(f"TAGURU_API_TOKENS entry #{position} is not name:token")
        name, token = name.strip(), token.strip()
        if not name or not token:
            raise ConfigError(f"TAGURU_API_TOKENS entry #{position} has an empty name or token")
        add(name, token)
    return tokens


def parse_scopes(raw: str, key_names: set[str]) -> dict[str, KeyScope]:
    """TAGURU_KEY_SCOPES (key name → role, or {role, contexts}) over the configured key names; blank is none."""
    if not raw.strip():
        return {}
    data = json_object(raw, lambda why: ConfigError(f"{SCOPES_SHAPE}: {why}"), "an object")
    scopes: dict[str, KeyScope] = {}
    for name, spec in data.items():
        if name not in key_names:
            raise ConfigError(f"TAGURU_KEY_SCOPES names '{name}', which is no configured key")
        role, contexts = _scope_spec(name, spec)
        if role not in ROLES:
            raise ConfigError(f"TAGURU_KEY_SCOPES key '{name}': unknown role '{role}' (read, write, or admin)")
        if contexts is not None and not contexts:
            raise ConfigError(
                f"TAGURU_KEY_SCOPES key '{name}': an empty contexts list grants nothing — "
                "omit the field to grant every context"
            )
        scopes[name] = KeyScope(role, None if contexts is None else frozenset(contexts))
    return scopes


def _scope_spec(name: str, spec: object) -> tuple[str, list[str] | None]:
    """One scope entry as (role, contexts or None); a value of another shape is ConfigError."""
    if isinstance(spec, str):
        return spec, None
    if isinstance(spec, dict):
        role = spec.get("role", "admin")
        ctxs = spec.get("contexts")
        if isinstance(role, str) and (
            ctxs is None or (isinstance(ctxs, list) and all(isinstance(c, str) for c in ctxs))
        ):
            return role, ctxs
    raise ConfigError(f"{SCOPES_SHAPE}: key '{name}' maps to neither a role nor {{role, contexts}}")
