"""Where a refused typed body went wrong: the 422 text with the reference's line/column position.

Positions are looked up only once a body is refused (`decode.py` raises `Refusal` while decoding).
"""

from __future__ import annotations

import json
import re

from taguru_server.server.errors import malformed
from taguru_server.store.errors import ApiError

PREFIX = "Failed to deserialize the JSON body into the target type: "
Path = tuple[str, ...]


class Refusal(Exception):
    """A 422 found while decoding: the dotted path it names, the detail, where its position points."""

    def __init__(self, path: tuple[str, ...], detail: str, anchor: str = "end") -> None:
        super().__init__(detail)
        self.path = path
        self.detail = detail
        self.anchor = anchor  # "end": the value's last byte; "close": the struct's closing brace; "eof"


def report(raw: bytes, refusal: Refusal) -> ApiError:
    label = ".".join(refusal.path)
    prefix = f"{label}: " if label else ""
    offset = None if refusal.anchor == "eof" else _Locator(raw, refusal.path).offset(refusal.anchor == "close")
    return malformed(f"{PREFIX}{prefix}{refusal.detail} at {_position(raw, offset)}")


def _position(raw: bytes, end: int | None) -> str:
    if end is None:
        end = len(raw)
    before = raw[:end]
    line = before.count(b"\n") + 1
    col = end - (before.rfind(b"\n") + 1)
    return f"line {line} column {col}"


_WS = re.compile(r"[ \t\n\r]*")
_SCAN = json.JSONDecoder().raw_decode  # the body already parsed, so this only measures values


class _Locator:
    """Where the value at one path of a parsed body ends, walking only the members on that path.

    An object at the path (the last one, if its key repeats) gives both its closing brace and its
    end; otherwise the first value reached through an object key gives its end, and nothing closes.
    """

    def __init__(self, raw: bytes, target: Path) -> None:
        self.text = raw.decode("utf-8")
        self.target = target
        self.end: int | None = None
        self.close: int | None = None
        self._visit(self._ws(0), (), keyed=False)

    def offset(self, close: bool) -> int | None:
        at = self.close if close else self.end
        return None if at is None else len(self.text[:at].encode("utf-8", "surrogatepass"))

    def _ws(self, i: int) -> int:
        match = _WS.match(self.text, i)
        return i if match is None else match.end()

    def _visit(self, i: int, path: Path, keyed: bool) -> int:
        """Walk the value starting at `i` (its path a prefix of the target); returns where it ends."""
        text, target = self.text, self.target
        if path == target:
            end = _SCAN(text, i)[1]
            if text[i] == "{":
                self.end = self.close = end
            elif keyed and self.end is None:
                self.end = end
            return end
        if text[i] == "{":
            i = self._ws(i + 1)
            while text[i] != "}":
                key, i = _SCAN(text, i)
                i = self._ws(self._ws(i) + 1)  # past ':'
                inner = path + (key,)
                i = self._ws(self._visit(i, inner, True) if target[: len(inner)] == inner else _SCAN(text, i)[1])
                if text[i] == ",":
                    i = self._ws(i + 1)
            return i + 1
        if text[i] == "[":
            i, k = self._ws(i + 1), 0
            while text[i] != "]":
                inner = path + (str(k),)
                i = self._ws(self._visit(i, inner, False) if target[: len(inner)] == inner else _SCAN(text, i)[1])
                k += 1
                if text[i] == ",":
                    i = self._ws(i + 1)
            return i + 1
        return _SCAN(text, i)[1]
