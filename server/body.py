"""Request-body decoding with the reference's typed-body statuses (400/415/422)."""

from __future__ import annotations

import json
import math
from typing import Any

from taguru_server.server.errors import malformed
from taguru_server.store.errors import ApiError
from taguru_server.store.wire import has_lone_surrogate

PREFIX = "Failed to deserialize the JSON body into the target type: "
MAX_U32 = 2**32 - 1
MAX_U64 = 2**64 - 1


def is_json_content_type(value: str | None) -> bool:
    if not value:
        return False
    mime = value.split(";", 1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def parse_json(raw: bytes) -> Any:
    """Parse a JSON body or raise the 400 malformed_request rejection."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_json_int)
        _check_depth(value)
        if has_lone_surrogate(raw, value):
            raise ValueError("lone leading surrogate in hex escape")
        return value
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise malformed(f"Failed to parse the request body as JSON: {exc}", status=400) from None


MAX_DEPTH = 128  # serde_json's recursion limit


def _check_depth(value: Any) -> None:
    """Refuse nesting past serde_json's limit (a syntax error there, so 400), iteratively."""
    if not isinstance(value, (dict, list)):
        return
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError("recursion limit exceeded")
        items = v.values() if isinstance(v, dict) else v
        for child in items:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    """serde_json refuses a number outside the f64 range while parsing (a syntax error, so 400)."""
    value = float(text)
    if math.isinf(value):
        raise ValueError("number out of range")
    return value


def _json_int(text: str) -> int | float:
    """Integers past i64/u64 are read as f64, as serde_json does; past the f64 range they are refused."""
    value = int(text)
    if -(2**63) <= value <= MAX_U64:
        return value
    try:
        return float(value)
    except OverflowError:
        raise ValueError("number out of range") from None


def require_json(content_type: str | None, raw: bytes) -> Any:
    """A typed body: JSON content type (415), valid JSON (400)."""
    if not is_json_content_type(content_type):
        raise malformed("Expected request with `Content-Type: application/json`", status=415)
    return parse_json(raw)


def describe_value(v: Any) -> str:
    """How serde names an unexpected JSON value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{_serde_float(v)}`"
    if isinstance(v, str):
        return "string " + json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "sequence"
    return "map"


def _serde_float(v: float) -> str:
    r = repr(v)
    return r if ("." in r or "e" in r or "inf" in r or "nan" in r) else r + ".0"


class Spans:
    """Byte offsets of values in the raw body, for serde-style line/column positions."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.ends: dict[tuple[str, ...], int] = {}
        self.closes: dict[tuple[str, ...], int] = {}
        try:
            self._value(self._ws(0), ())
        except (IndexError, ValueError):
            pass

    def _ws(self, i: int) -> int:
        raw = self.raw
        while i < len(raw) and raw[i] in b" \t\r\n":
            i += 1
        return i

    def _string(self, i: int) -> tuple[str, int]:
        raw = self.raw
        j = i + 1
        while raw[j] != 0x22:
            j += 2 if raw[j] == 0x5C else 1
        return json.loads(raw[i : j + 1].decode("utf-8")), j + 1

    def _value(self, i: int, path: tuple[str, ...]) -> int:
        raw = self.raw
        c = raw[i]
        if c == 0x7B:  # {
            i = self._ws(i + 1)
            if raw[i] == 0x7D:
                self.closes[path] = i + 1
                self.ends[path] = i + 1
                return i + 1
            while True:
                key, i = self._string(self._ws(i))
                i = self._ws(i)
                i = self._ws(i + 1)  # ':'
                end = self._value(i, path + (key,))
                self.ends.setdefault(path + (key,), end)
                i = self._ws(end)
                if raw[i] == 0x2C:
                    i += 1
                    continue
                self.closes[path] = i + 1
                self.ends[path] = i + 1
                return i + 1
        if c == 0x5B:  # [
            i = self._ws(i + 1)
            if raw[i] == 0x5D:
                return i + 1
            k = 0
            while True:
                end = self._value(self._ws(i), path + (str(k),))
                i = self._ws(end)
                k += 1
                if raw[i] == 0x2C:
                    i += 1
                    continue
                return i + 1
        if c == 0x22:
            return self._string(i)[1]
        j = i
        while j < len(raw) and raw[j] not in b",]} \t\r\n":
            j += 1
        return j

    def position(self, end: int | None) -> str:
        if end is None:
            end = len(self.raw)
        before = self.raw[:end]
        line = before.count(b"\n") + 1
        col = end - (before.rfind(b"\n") + 1)
        return f"line {line} column {col}"


class Typed:
    """Typed field access over a decoded JSON object, raising serde-style 422s."""

    def __init__(self, value: Any, raw: bytes, struct: str, path: tuple[str, ...] = (), spans: Spans | None = None):
        self.raw = raw
        self.spans = spans or Spans(raw)
        self.path = path
        if not isinstance(value, dict):
            raise self._error(None, f"invalid type: {describe_value(value)}, expected struct {struct}", path)
        self.obj: dict[str, Any] = value

    def _error(self, key: str | None, message: str, at: tuple[str, ...] | None = None) -> ApiError:
        where = at if at is not None else self.path + ((key,) if key is not None else ())
        end = self.spans.ends.get(where)
        label = ".".join(where)
        prefix = f"{label}: " if label else ""
        return malformed(f"{PREFIX}{prefix}{message} at {self.spans.position(end)}")

    def missing(self, key: str) -> ApiError:
        end = self.spans.closes.get(self.path)
        label = ".".join(self.path)
        prefix = f"{label}: " if label else ""
        return malformed(f"{PREFIX}{prefix}missing field `{key}` at {self.spans.position(end)}")

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def string(self, key: str, required: bool = False) -> str | None:
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.missing(key)
            return None
        if not isinstance(v, str):
            raise self._error(key, f"invalid type: {describe_value(v)}, expected a string")
        return v

    def uint(self, key: str, top: int | None = None, name: str = "u32", required: bool = False) -> int | None:
        if top is None:
            top = MAX_U32 if name == "u32" else MAX_U64  # usize is 64-bit on the reference's targets
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.missing(key)
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._error(key, f"invalid type: {describe_value(v)}, expected {name}")
        if v < 0 or v > top:
            raise self._error(key, f"invalid value: integer `{v}`, expected {name}")
        return v

    def number(self, key: str, name: str = "f64") -> float | None:
        v = self.obj.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self._error(key, f"invalid type: {describe_value(v)}, expected {name}")
        return float(v)

    def boolean(self, key: str) -> bool | None:
        v = self.obj.get(key)
        if v is None:
            return None
        if not isinstance(v, bool):
            raise self._error(key, f"invalid type: {describe_value(v)}, expected a boolean")
        return v

    def strings(self, key: str, required: bool = False) -> list[str] | None:
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.missing(key)
            return None
        if not isinstance(v, list):
            raise self._error(key, f"invalid type: {describe_value(v)}, expected a sequence")
        for i, item in enumerate(v):
            if not isinstance(item, str):
                raise self._error(
                    None, f"invalid type: {describe_value(item)}, expected a string", self.path + (key, str(i))
                )
        return v

    def string_or_list(self, key: str, required: bool = False) -> list[str] | None:
        v = self.obj.get(key)
        if v is None:
            if required:
                raise self.missing(key)
            return None
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            return v
        raise self._error(key, "data did not match any variant of untagged enum OneOrMany")

    def nested(self, key: str, struct: str) -> Typed | None:
        v = self.obj.get(key)
        if v is None:
            return None
        return Typed(v, self.raw, struct, self.path + (key,), self.spans)

    def raw_value(self, key: str) -> Any:
        return self.obj.get(key)

    def reject(self, key: str, message: str) -> ApiError:
        return self._error(key, message)


def check_name(value: str, what: str, cap: int = 1024) -> None:
    """The standard empty-then-size 400s for a name-like field."""
    if not value:
        raise ApiError("invalid_argument", f"{what} must not be empty; nothing was applied")
    size = len(value.encode("utf-8"))
    if size > cap:
        raise ApiError("invalid_argument", f"{what} is {size} bytes, over the {cap}-byte cap; nothing was applied")
