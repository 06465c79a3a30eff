"""JSON-RPC 2.0 framing shared by `POST /mcp` and the stdio bridge: id and shape checks, reply and error frames."""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
SERVER_ERROR = -32000

NO_METHOD = "not a JSON-RPC message (no method)"
BAD_ID = "id must be a string, a number, or null"
NOT_2_0 = 'not a JSON-RPC 2.0 message (jsonrpc must be "2.0")'


def batch_refused(unit: str) -> str:
    """The refusal text for a batch array, per message `unit` (request, line)."""
    return f"batch messages are not part of MCP; send one message per {unit}"


def valid_id(rid: Any) -> bool:
    """A JSON-RPC id: a string, a number (not a boolean), or null."""
    return rid is None or isinstance(rid, str) or (isinstance(rid, (int, float)) and not isinstance(rid, bool))


def shape_problem(value: Any, replies: bool = False) -> tuple[str, Any] | None:
    """The shape checks in order: (message, id to answer with) for a refused message, else None.

    With `replies`, a message carrying `result` or `error` (a reply to our own request) passes without a method.
    """
    if not isinstance(value, dict):
        return NO_METHOD, None
    rid = value.get("id")
    if not valid_id(rid):
        return BAD_ID, None
    if value.get("jsonrpc") != "2.0":
        return NOT_2_0, rid
    if not isinstance(value.get("method"), str) and not (replies and ("result" in value or "error" in value)):
        return NO_METHOD, rid
    return None


def reply_frame(rid: Any, result: Any) -> dict[str, Any]:
    """A success frame."""
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def error_frame(code: int, message: str, rid: Any = None, data: Any = None) -> dict[str, Any]:
    """An error frame; `data` only when given."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


class RpcError(Exception):
    """A JSON-RPC error to answer with, and the HTTP status it travels under."""

    def __init__(self, code: int, message: str, status: int = 200, data: Any = None, rid: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.data = data
        self.rid = rid

    def frame(self) -> dict[str, Any]:
        return error_frame(self.code, self.message, self.rid, self.data)
