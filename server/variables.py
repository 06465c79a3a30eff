"""Every variable the project reads: the one registry, and the one place the process environment is read.

Each `Variable` names a setting, its type, its default (None: unset), a one-line doc and what a bad value
does (`Policy`). `docs/operations.md` lists the same variables with the same defaults
(`tests/test_operations_doc.py` holds the two together) and `taguru` warns about a `TAGURU_*` name that is
not registered here (`cli/envcheck.py`).

The rest of the code never reads `os.environ`: `taguru` takes the environment from `process_environment()`
once, and each command builds its settings tree from it (server/config.py: `load_configuration`, the one
merge with the `--config` file where a command has one) and passes its parts down.
"""

from __future__ import annotations

import enum
import os

import attrs


class Policy(enum.Enum):
    """What a value that does not parse does (docs/operations.md, "A bad value")."""

    REFUSE = "refuse"  # the boot (or the command) is refused with one line naming the variable
    WARN = "warn"  # one warning naming the variable, and the default is kept
    IGNORE = "ignore"  # silently the default (tuning knobs whose only values are numbers or one flag)
    ANY = "any"  # free text: every value is taken as given (names, paths, URLs, tokens)


@attrs.frozen
class Variable:
    name: str
    kind: type
    default: object  # None: unset
    doc: str
    policy: Policy
    note: str = ""  # what the default means, shown in parentheses after it
    shown: str = ""  # the default as the doc's table words it, where the rendering below does not fit

    @property
    def default_text(self) -> str:
        """The default as the variables table of docs/operations.md shows it."""
        if self.shown:
            return self.shown
        if self.default is None:
            text = "unset"
        elif isinstance(self.default, bool):
            text = "true" if self.default else "false"
        elif isinstance(self.default, int | float):
            text = str(self.default)
        else:
            text = f"`{self.default}`"
        return f"{text} ({self.note})" if self.note else text


def _v(name: str, kind: type, default: object, doc: str, policy: Policy, **extra: str) -> Variable:
    """One registered variable."""
    return Variable(name, kind, default, doc, policy, **extra)


def _unset(name: str, doc: str, policy: Policy, note: str, kind: type = str) -> Variable:
    """A variable with no default (text, unless `kind` says otherwise); `note` says what leaving it unset means."""
    return Variable(name, kind, None, doc, policy, note=note)


R, W, IG, A = Policy.REFUSE, Policy.WARN, Policy.IGNORE, Policy.ANY

REGISTRY: tuple[Variable, ...] = (
    # the server (server/config.py: Configuration.server)
    _v("TAGURU_ADDR", str, "127.0.0.1:8248", "address to listen on (HOST:PORT)", R),
    _v("TAGURU_DATA_DIR", str, "data", "the SQLite store's directory", A),
    _unset("TAGURU_DATABASE_URL", "postgresql://…: the shared PostgreSQL store", R, "SQLite"),
    _v("TAGURU_READ_CONSISTENCY", str, "strong", "strong or eventual", R),
    _v("TAGURU_WORKERS", int, 1, "worker processes of taguru serve; 0 means 1", R),
    _v("TAGURU_WORKER_START", str, "fork", "fork or exec: how workers start", R),
    _v("TAGURU_PRELOAD", str, "all", "all, pinned, none, or context names", R),
    _v(
        "TAGURU_INDEX_DIR",
        str,
        None,
        "where the persisted BM25 indexes are kept; off: none",
        A,
        shown="`indexes/` in the data dir (SQLite); none (PostgreSQL)",
    ),
    _v("TAGURU_LOG_FORMAT", str, None, "json or console", R, shown="`json`, or `console` when stderr is a TTY"),
    _v("TAGURU_LOG_LEVEL", str, "info", "debug, info, warning or error", R),
    _v("TAGURU_MAX_BODY_BYTES", int, 8 * 1024 * 1024, "413 above it; 0 means the default", R),
    _v("TAGURU_MCP_MAX_RESULT_BYTES", int, 8 * 1024 * 1024, "one MCP tool result's ceiling; 0 means the default", R),
    _v("TAGURU_REQUEST_TIMEOUT_SECS", int, 30, "a request's budget; 0 means 1", R),
    _v("TAGURU_HEADER_TIMEOUT_SECS", int, 10, "request headers must be in within it; 0 disables", R),
    _v("TAGURU_MIN_BODY_RATE", int, 1024, "bytes per second a body must average after 5 s; 0 disables", R),
    _v("TAGURU_MAX_CONCURRENT_REQUESTS", int, 256, "in-flight ceiling; 0 disables", R),
    _v("TAGURU_MAX_CONCURRENT_HEAVY_OPS", int, 2, "concurrent heavy operations; 0 disables", IG),
    _v("TAGURU_RATE_LIMIT_PER_MIN", int, 0, "requests per named key per minute", R, note="off"),
    _v("TAGURU_AUTH_FAIL_LIMIT_PER_MIN", int, 10, "failed authentications per address per minute", R),
    _unset("TAGURU_API_TOKEN", "Bearer token of the key default", R, "auth off"),
    _v("TAGURU_API_TOKENS", str, None, "name:token,…: named keys", R),
    _unset(
        "TAGURU_KEY_SCOPES", "JSON object: key name → role or {role, contexts}", R, "every key admin on every context"
    ),
    _v(
        "TAGURU_STRICT_TENANCY",
        bool,
        False,
        "scoped keys see only the groups inside their grant",
        R,
        shown="0 (off: the reference's behaviour)",
    ),
    _unset("TAGURU_PUBLIC_URL", "the public base URL: mounts OAuth for remote MCP clients", A, "OAuth off"),
    _v("TAGURU_CONFIG", str, None, "a KEY=VALUE file of these variables; the environment wins", R),
    # the embedding provider (server/config.py: embedding_settings)
    _unset("TAGURU_EMBED_URL", "the embedding endpoint; local: the in-process model", A, "no embedding provider"),
    _v("TAGURU_EMBED_MODEL", str, None, "the embedding model name", A),
    _v("TAGURU_EMBED_API_KEY", str, None, "the embedding provider's Bearer token", A),
    _v("TAGURU_EMBED_TIMEOUT_SECS", int, 60, "one provider attempt's ceiling", W),
    _v("TAGURU_EMBED_AUTO", bool, False, "refresh stale vectors in the background", W),
    _v("TAGURU_EMBED_PASSAGES", bool, False, "embed passages too", W),
    _v("TAGURU_EMBED_PARALLEL", int, 1, "concurrent refresh calls", W),
    _v("TAGURU_PASSAGE_VECTOR_LIMIT", int, 20000, "passage vector rows per context", W),
    _v("TAGURU_FLUSH_SECS", int, 5, "the cadence of the auto-embed and the housekeeping tickers", IG),
    _v("TAGURU_SEMANTIC_FLOOR", float, 0.35, "cosine floor of semantic resolve and the vector lanes", W),
    _unset(
        "TAGURU_SEMANTIC_CACHE_THRESHOLD",
        "cosine at which passage search's paraphrase tier serves a cached answer",
        W,
        "off",
        float,
    ),
    # the retrieval cache, the search log, auto-compaction and quotas (server/config.py: cache_settings)
    _v("TAGURU_RETRIEVAL_CACHE_BYTES", int, 33554432, "the exact-match retrieval cache's budget; 0 disables", W),
    _v("TAGURU_LOG_SEARCHES", bool, False, "one redacted search.served line per served retrieval", W),
    _v("TAGURU_AUTO_COMPACT", bool, True, "compact the context with the most dead edges every flush tick", W),
    _v("TAGURU_AUTO_COMPACT_RATIO", float, 0.5, "the dead-edge ratio a context must pass to be auto-compacted", W),
    _unset("TAGURU_CONTEXT_QUOTAS", "JSON object: context → {storage_bytes, cache_bytes}", R, "no quotas"),
    # evidence assembly (server/evidence.py: the request's default for `include_graph_passages`)
    _v("TAGURU_EVIDENCE_GRAPH_PASSAGES", bool, False, "evidence's graph-passages mode by default", W),
    # the providers (server/providers/reranker.py, chat.py)
    _unset("TAGURU_RERANK_URL", "the reranker endpoint", W, "no reranker"),
    _v("TAGURU_RERANK_MODEL", str, None, "the reranker's model name", W),
    _v("TAGURU_RERANK_API_KEY", str, None, "the reranker's Bearer token", A),
    _v("TAGURU_RERANK_TIMEOUT_SECS", int, 5, "one rerank attempt's ceiling", W),
    _unset("TAGURU_EXTRACT_URL", "a chat-completions endpoint for community summaries", R, "extractive summaries"),
    _v("TAGURU_EXTRACT_MODEL", str, None, "the chat model name", R),
    _v("TAGURU_EXTRACT_API_KEY", str, None, "the chat provider's Bearer token", A),
    _v("TAGURU_EXTRACT_TIMEOUT_SECS", float, 60, "one chat attempt's ceiling", R),
    # the stdio bridge (server/config.py: Configuration.bridge)
    _v("TAGURU_URL", str, "http://127.0.0.1:8248", "taguru mcp: the server to forward to", R),
    _v("TAGURU_MCP_TIMEOUT_SECS", float, 75, "taguru mcp: per forwarded call", W),
    _v("TAGURU_MCP_MAX_LINE_BYTES", int, 64 * 1024 * 1024, "taguru mcp: the longest stdin line", W),
    _v("TAGURU_MCP_MAX_CONCURRENT_TOOLS", int, 8, "taguru mcp: concurrent tool calls", W),
    # the stage executor (pipeline/executor.py: check_contracts, switched on by the command at start-up)
    _v("TAGURU_CHECK_CONTRACTS", bool, False, "1: check every stage's declared output types", IG, shown="0"),
    # /metrics (server/routes/admin.py: per_context_rows)
    _unset("TAGURU_METRICS_PER_CONTEXT", "per-context metric rows: 1 or all, or N (the N largest)", IG, "none"),
    # tracing (server/tracing.py: wanted); the OpenTelemetry SDK reads the rest of OTEL_* itself
    _v("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", str, None, "the OTLP traces endpoint: tracing on", A),
    _v("OTEL_EXPORTER_OTLP_ENDPOINT", str, None, "the OTLP endpoint: tracing on", A),
    _v("OTEL_SDK_DISABLED", str, None, "true: tracing off", A),
    # `serve --workers N` (server/metrics_shared.py): set by the supervisor for its workers, never by hand
    _v("PROMETHEUS_MULTIPROC_DIR", str, None, "the workers' shared metric files (set by the supervisor)", A),
)
del R, W, IG, A

BY_NAME: dict[str, Variable] = {v.name: v for v in REGISTRY}
PREFIX = "TAGURU_"


def process_environment() -> dict[str, str]:
    """A copy of the process environment (the only read of it in the packages)."""
    return dict(os.environ)


def current(name: str) -> str | None:
    """A variable's value now, for the one setting read at each use rather than at start-up: the
    heavy-operation ceiling (server/routes/common.py: heavy_limit; the tests turn it between requests)."""
    return os.environ.get(name)


def child_environment(**overrides: str) -> dict[str, str]:
    """The environment of a child process: this one's, with `overrides`."""
    return {**os.environ, **overrides}


def export(name: str, value: str) -> None:
    """Set a variable of this process (a forked worker takes the address its supervisor gives it)."""
    os.environ[name] = value


def check_contracts_requested(env: dict[str, str]) -> bool:
    """TAGURU_CHECK_CONTRACTS=1 (anything else is off)."""
    return env.get("TAGURU_CHECK_CONTRACTS") == "1"


def default_int(name: str) -> int:
    """A registered integer variable's default."""
    value = BY_NAME[name].default
    assert isinstance(value, int) and not isinstance(value, bool), name
    return value


def default_float(name: str) -> float:
    """A registered number variable's default."""
    value = BY_NAME[name].default
    assert isinstance(value, int | float) and not isinstance(value, bool), name
    return float(value)


def default_str(name: str) -> str:
    """A registered text variable's default (one that has one)."""
    value = BY_NAME[name].default
    assert isinstance(value, str), name
    return value
