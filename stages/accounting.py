"""Byte and token accounting of items and citations (docs/evidence.md, "Budgets"), on the wire serializer itself."""

from __future__ import annotations

from typing import Any

from taguru_server.store.wire import dumps


def cost(value: Any) -> tuple[int, int]:
    """(UTF-8 bytes, token quarters) of a value's compact wire JSON."""
    return measure(dumps(value))


def measure(text: str) -> tuple[int, int]:
    """(UTF-8 bytes, token quarters) of JSON text already serialized."""
    if text.isascii():
        return len(text), len(text)
    ascii_count = len(text.encode("ascii", "ignore"))
    return len(text.encode("utf-8")), ascii_count + 4 * (len(text) - ascii_count)


def tokens(quarters: int) -> int:
    """The contract's estimate: a quarter token per ASCII code point, one per other, rounded up."""
    return (quarters + 3) // 4


def overhead(n: int) -> int:
    """Bytes (and quarters) of a JSON array's brackets and commas around n elements."""
    return 2 if n == 0 else n + 1
