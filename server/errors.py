"""HTTP side of the error vocabulary: the status an error answers with and the error envelope."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from taguru_server.store.errors import MAX_LISTED_ISSUES, ApiError, Code, Issue
from taguru_server.store.wire import dumps_bytes

# the status of each code, from its one table (`store/errors.py: Code`), by wire spelling
STATUS_OF_CODE: dict[str, int] = {code.value: code.status for code in Code}


class HttpError(ApiError):
    """A request refusal whose HTTP status is not its code's usual one (e.g. 415, or 422 for a typed body)."""

    def __init__(self, code: Code, message: str, *, status: int, **fields: Any) -> None:
        super().__init__(code, message, **fields)
        self.status = status


def at_ceiling(ceiling: str, reached: str, variable: str) -> ApiError:
    """503 `overloaded` at a concurrency ceiling (`reached` says how much is running), naming the variable
    that tunes it; the client may retry after a second."""
    return ApiError(
        Code.OVERLOADED,
        f"server is at its {ceiling} ceiling ({reached}) — retry shortly ({variable} tunes this)",
        headers={"Retry-After": "1"},
    )


def status_of(err: ApiError) -> int:
    """The HTTP status an error answers with."""
    return err.status if isinstance(err, HttpError) else err.code.status


def malformed(message: str, status: int = 422) -> HttpError:
    """A typed-body rejection: keeps the framework status, code malformed_request."""
    return HttpError(Code.MALFORMED_REQUEST, message, status=status)


def issue_out(issue: Issue) -> dict[str, Any]:
    """The wire issue: its fields in order (path, kind, expected, actual)."""
    return {"path": issue.path, "kind": issue.kind, "expected": issue.expected, "actual": issue.actual}


def error_body(err: ApiError, elapsed: float) -> dict[str, Any]:
    """The error envelope, in wire order."""
    out: dict[str, Any] = {"status": "error", "code": err.code.value, "error": err.message, "time": elapsed}
    if err.issues is not None:
        out["issues"] = [issue_out(i) for i in err.issues[:MAX_LISTED_ISSUES]]
        out["issues_total"] = len(err.issues)
    if err.integrity is not None:
        out["integrity"] = err.integrity
    if err.durable_batches is not None:
        out["durable_batches"] = err.durable_batches
    if err.retryable is not None:
        out["retryable_after_correction"] = err.retryable
    return out


def error_response(err: ApiError, started: float) -> web.Response:
    """The error envelope as an HTTP response, with the error's extra headers."""
    return web.Response(
        body=dumps_bytes(error_body(err, time.perf_counter() - started)),
        status=status_of(err),
        content_type="application/json",
        charset="utf-8",
        headers=err.headers or None,
    )
