"""The error vocabulary: codes, their statuses, and the error carried to the envelope."""

from __future__ import annotations

from typing import Any

import attrs

STATUS_OF_CODE: dict[str, int] = {
    "malformed_request": 400,
    "invalid_argument": 400,
    "over_limit": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "read_only_replica": 403,
    "no_context": 404,
    "no_source": 404,
    "no_paragraph": 404,
    "no_group": 404,
    "no_schema": 404,
    "unknown_path": 404,
    "method_not_allowed": 405,
    "timeout": 408,
    "already_exists": 409,
    "conflict": 409,
    "stale_cursor": 410,
    "payload_too_large": 413,
    "rate_limited": 429,
    "internal": 500,
    "embeddings_unconfigured": 501,
    "embeddings_failed": 502,
    "shard_unreachable": 502,
    "overloaded": 503,
    "unhealthy": 503,
    "maintenance": 503,
    "storage_full": 507,
}

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
    """An error that becomes the error envelope; never carries user text beyond names."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        issues: list[Issue] | None = None,
        integrity: str | None = None,
        durable_batches: int | None = None,
        retryable: bool | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status if status is not None else STATUS_OF_CODE[code]
        self.issues = issues
        self.integrity = integrity
        self.durable_batches = durable_batches
        self.retryable = retryable
        self.headers = headers or {}

    def body(self, time: float) -> dict[str, Any]:
        out: dict[str, Any] = {"status": "error", "code": self.code, "error": self.message, "time": time}
        if self.issues is not None:
            out["issues"] = [i.to_wire() for i in self.issues[:MAX_LISTED_ISSUES]]
            out["issues_total"] = len(self.issues)
        if self.integrity is not None:
            out["integrity"] = self.integrity
        if self.durable_batches is not None:
            out["durable_batches"] = self.durable_batches
        if self.retryable is not None:
            out["retryable_after_correction"] = self.retryable
        return out


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


def malformed(message: str, status: int = 422) -> ApiError:
    """A typed-body rejection: keeps the framework status, code malformed_request."""
    return ApiError("malformed_request", message, status=status)
