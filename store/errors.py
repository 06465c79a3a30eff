"""The error vocabulary: the codes with their statuses, and the domain error carried to the envelope."""

from __future__ import annotations

import enum

import attrs

MAX_LISTED_ISSUES = 20


class Code(enum.StrEnum):
    """Every error code of the envelope, with its HTTP status and what it means: the one table.

    A member is its wire spelling, its name in lower case (`Code.NO_CONTEXT == "no_context"`);
    `.status` is the status the code answers with unless the refusal carries its own
    (`server/errors.py: HttpError`), `.doc` one line on when it is answered."""

    status: int
    doc: str

    def __new__(cls, wire: str, status: int, doc: str) -> Code:
        member = str.__new__(cls, wire)
        member._value_ = wire
        member.status = status
        member.doc = doc
        return member

    MALFORMED_REQUEST = enum.auto(), 400, "the body is not JSON, or not the shape the route decodes"
    INVALID_ARGUMENT = enum.auto(), 400, "the request decoded but a value is refused (empty, too long, out of range)"
    OVER_LIMIT = enum.auto(), 400, "the request asks for more than a per-request ceiling allows"
    UNAUTHORIZED = enum.auto(), 401, "no bearer token, or one no key matches"
    FORBIDDEN = enum.auto(), 403, "the key lacks the route's role or a grant on the context"
    READ_ONLY_REPLICA = (
        enum.auto(),
        403,
        "a write reached a read-only replica (a reference deployment's; every replica here writes)",
    )
    NO_CONTEXT = enum.auto(), 404, "the named context does not exist"
    NO_SOURCE = enum.auto(), 404, "the named source is not in the context"
    NO_PARAGRAPH = enum.auto(), 404, "the named paragraph is not in the context"
    NO_GROUP = enum.auto(), 404, "the named group does not exist"
    NO_SCHEMA = enum.auto(), 404, "the context has no schema"
    UNKNOWN_PATH = enum.auto(), 404, "no route matches the path"
    METHOD_NOT_ALLOWED = enum.auto(), 405, "the path exists but not with that method"
    TIMEOUT = enum.auto(), 408, "the request's time budget (TAGURU_REQUEST_TIMEOUT_SECS) is spent"
    ALREADY_EXISTS = enum.auto(), 409, "a create names something that already exists"
    CONFLICT = enum.auto(), 409, "the write contradicts the standing state (or an earlier batch of its stream)"
    STALE_CURSOR = enum.auto(), 410, "a change-feed cursor points before what the log still holds"
    PAYLOAD_TOO_LARGE = enum.auto(), 413, "the body is over the body cap"
    RATE_LIMITED = enum.auto(), 429, "the key, or failed authentication from the peer, is over its rate"
    INTERNAL = enum.auto(), 500, "an unexpected failure; logged by type and frames only"
    EMBEDDINGS_UNCONFIGURED = enum.auto(), 501, "an embedding operation with no embedding provider set"
    EMBEDDINGS_FAILED = enum.auto(), 502, "the embedding provider failed or answered badly"
    SHARD_UNREACHABLE = (
        enum.auto(),
        502,
        "a shard a routed request needs did not answer (a sharded reference deployment's)",
    )
    OVERLOADED = enum.auto(), 503, "the in-flight ceiling is reached (answered with Retry-After)"
    UNHEALTHY = enum.auto(), 503, "the store cannot make writes durable (read-only or failing disk)"
    MAINTENANCE = enum.auto(), 503, "a maintenance compaction sweep is running (answered with Retry-After)"
    STORAGE_FULL = enum.auto(), 507, "the disk is full; the write was not made durable"


@attrs.frozen
class Issue:
    """One validation finding: where, what kind, what was expected, what was found."""

    path: str
    kind: str
    expected: str | None = None
    actual: str | None = None


class ApiError(Exception):
    """A refusal with a code that becomes the error envelope; never carries user text beyond names."""

    def __init__(
        self,
        code: Code,
        message: str,
        *,
        issues: list[Issue] | None = None,
        integrity: str | None = None,
        durable_batches: int | None = None,
        retryable: bool | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(code, Code):
            raise TypeError(f"an error code is a Code member, not {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.issues = issues
        self.integrity = integrity
        self.durable_batches = durable_batches
        self.retryable = retryable
        self.headers = headers or {}


class StoreRefused(Exception):
    """The store cannot be served (missing identity, newer format, damage, unwritable); one line naming the file."""


class StorageFailed(Exception):
    """The backend could not make a write durable: `storage_full` or `unavailable` (read-only or failing disk)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind


def timed_out(timeout_secs: int) -> ApiError:
    """408: the request's TAGURU_REQUEST_TIMEOUT_SECS budget is spent."""
    return ApiError(
        Code.TIMEOUT,
        f"request exceeded the {timeout_secs}s budget; narrow the query (TAGURU_REQUEST_TIMEOUT_SECS tunes this)",
    )


# the two deadline texts of a handler: the budget was spent before it started, or inside a scan
BEFORE_START = (
    "request exceeded its budget before this operation could start; narrow the query or raise "
    "TAGURU_REQUEST_TIMEOUT_SECS"
)
MID_SCAN = "request exceeded its budget; narrow the query (TAGURU_REQUEST_TIMEOUT_SECS tunes this)"


def budget_spent_before() -> ApiError:
    """408: the request's budget was spent before this operation could start."""
    return ApiError(Code.TIMEOUT, BEFORE_START)


def budget_spent() -> ApiError:
    """408: the request's budget ran out inside a scan that checks it."""
    return ApiError(Code.TIMEOUT, MID_SCAN)


def no_context(name: str) -> ApiError:
    return ApiError(Code.NO_CONTEXT, f"context '{name}' not found")


def collected(what: str, issues: list[Issue]) -> ApiError:
    """The collected-validation refusal: every issue listed (up to 20), nothing applied."""
    lines = [f"{what} refused {len(issues)} issue(s):"]
    for issue in issues[:MAX_LISTED_ISSUES]:
        lines.append(f"\n- {issue.path}: expected {issue.expected}, got {issue.actual}")
    if len(issues) > MAX_LISTED_ISSUES:
        lines.append(f"\n… and {len(issues) - MAX_LISTED_ISSUES} more issue(s)")
    lines.append("; nothing was applied")
    return ApiError(
        Code.INVALID_ARGUMENT,
        "".join(lines),
        issues=issues,
        integrity="nothing_written",
        retryable=True,
    )


def too_many_items(field: str, n: int) -> ApiError:
    return ApiError(
        Code.OVER_LIMIT, f"{field} carries {n} items, past the per-request limit of 1000; split the request"
    )
