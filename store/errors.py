"""The error vocabulary: codes and the domain error carried to the envelope (server/ maps codes to HTTP)."""

from __future__ import annotations

from typing import Any

import attrs

MAX_LISTED_ISSUES = 20


@attrs.frozen
class Issue:
    """One validation finding: where, what kind, what was expected, what was found."""

    path: str
    kind: str
    expected: str | None = None
    actual: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "expected": self.expected, "actual": self.actual}


class ApiError(Exception):
    """A refusal with a code that becomes the error envelope; never carries user text beyond names."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        issues: list[Issue] | None = None,
        integrity: str | None = None,
        durable_batches: int | None = None,
        retryable: bool | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
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
        "timeout",
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
    return ApiError("timeout", BEFORE_START)


def budget_spent() -> ApiError:
    """408: the request's budget ran out inside a scan that checks it."""
    return ApiError("timeout", MID_SCAN)


def no_context(name: str) -> ApiError:
    return ApiError("no_context", f"context '{name}' not found")


def collected(what: str, issues: list[Issue]) -> ApiError:
    """The collected-validation refusal: every issue listed (up to 20), nothing applied."""
    lines = [f"{what} refused {len(issues)} issue(s):"]
    for issue in issues[:MAX_LISTED_ISSUES]:
        lines.append(f"\n- {issue.path}: expected {issue.expected}, got {issue.actual}")
    if len(issues) > MAX_LISTED_ISSUES:
        lines.append(f"\n… and {len(issues) - MAX_LISTED_ISSUES} more issue(s)")
    lines.append("; nothing was applied")
    return ApiError(
        "invalid_argument",
        "".join(lines),
        issues=issues,
        integrity="nothing_written",
        retryable=True,
    )


def too_many_items(field: str, n: int) -> ApiError:
    return ApiError("over_limit", f"{field} carries {n} items, past the per-request limit of 1000; split the request")
