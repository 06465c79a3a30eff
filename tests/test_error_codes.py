"""The error codes: one enum, each with its status and a doc line, matching the contract's table."""

from __future__ import annotations

import ast

from test_architecture import modules

from taguru_server.server.errors import HttpError, error_body, status_of
from taguru_server.store.errors import ApiError, Code

# the contract's table of codes and statuses (substrate.md §1.3 "Codes and statuses"), copied here
# so the suite runs without the contract
CONTRACT_CODES: dict[int, tuple[str, ...]] = {
    400: ("malformed_request", "invalid_argument", "over_limit"),
    401: ("unauthorized",),
    403: ("forbidden", "read_only_replica"),
    404: ("no_context", "no_source", "no_paragraph", "no_group", "no_schema", "unknown_path"),
    405: ("method_not_allowed",),
    408: ("timeout",),
    409: ("already_exists", "conflict"),
    410: ("stale_cursor",),
    413: ("payload_too_large",),
    429: ("rate_limited",),
    500: ("internal",),
    501: ("embeddings_unconfigured",),
    502: ("embeddings_failed", "shard_unreachable"),
    503: ("overloaded", "unhealthy", "maintenance"),
    507: ("storage_full",),
}

ERROR_CLASSES = {"ApiError", "HttpError"}


def test_every_code_has_a_status_and_a_doc_line() -> None:
    for code in Code:
        assert isinstance(code.status, int) and 400 <= code.status <= 599, code
        assert code.doc.strip() and "\n" not in code.doc, code
        assert code.value == code.name.lower(), code


def test_the_table_is_the_contracts() -> None:
    ours = {code.value: code.status for code in Code}
    theirs = {wire: status for status, wires in CONTRACT_CODES.items() for wire in wires}
    assert ours == theirs


def test_the_envelope_carries_the_wire_spelling_and_the_tables_status() -> None:
    err = ApiError(Code.NO_CONTEXT, "context 'x' not found")
    body = error_body(err, 0.0)
    assert type(body["code"]) is str and body["code"] == "no_context"
    assert status_of(err) == 404
    assert status_of(HttpError(Code.MALFORMED_REQUEST, "no", status=415)) == 415


def _constructed_code(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "code"), None)


def test_no_module_builds_an_error_from_a_string_code() -> None:
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            code = _constructed_code(node) if called in ERROR_CLASSES else None
            if isinstance(code, ast.Constant | ast.JoinedStr):
                found.append(f"{name}:{node.lineno}")
    assert not found, f"error codes are `Code` members, never strings: {found}"
