"""Byte and token accounting of items and citations (§7.5), on the wire serializer itself."""

from __future__ import annotations

from typing import Any

from store.wire import dumps


def cost(value: Any) -> tuple[int, int]:
    """(UTF-8 bytes, token quarters) of a value's compact wire JSON."""
    text = dumps(value)
    if text.isascii():
        return len(text), len(text)
    data = text.encode("utf-8")
    non_ascii = sum(1 for ch in text if ord(ch) >= 0x80)
    return len(data), len(text) + 3 * non_ascii


def tokens(quarters: int) -> int:
    """The contract's estimate: a quarter token per ASCII code point, one per other, rounded up."""
    return (quarters + 3) // 4


def overhead(n: int) -> int:
    """Bytes (and quarters) of a JSON array's brackets and commas around n elements."""
    return 2 if n == 0 else n + 1
