"""The nesting limit of every JSON request, in one place (a body, an MCP message, an import line)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_JSON_DEPTH = 128
"""The nesting limit of every JSON request (a body, an MCP message, an import line): serde_json's
recursion limit, so nesting past it is a parse error as in the reference (400 on a typed body,
-32700 on `POST /mcp`, a line refusal on `POST /import`)."""
TOO_DEEP = f"recursion limit exceeded (more than {MAX_JSON_DEPTH} nested arrays and objects)"


def parse_bounded(parse: Callable[[str], Any], text: str) -> Any:
    """`parse(text)` (a JSON parser), refusing nesting past MAX_JSON_DEPTH with ValueError `TOO_DEEP`.

    The parser itself gives up near the interpreter's recursion limit (RecursionError, whatever
    the depth of the stack it runs on); nesting past the limit but short of that is found by an
    iterative walk, taken only when the text holds enough brackets to nest that deep.
    """
    try:
        value = parse(text)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
    if isinstance(value, (dict, list)) and text.count("[") + text.count("{") > MAX_JSON_DEPTH and _too_deep(value):
        raise ValueError(TOO_DEEP)
    return value


def _too_deep(value: dict[str, Any] | list[Any]) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        for child in v.values() if isinstance(v, dict) else v:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False
