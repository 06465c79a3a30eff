"""JSON encoding with the reference's float layout (f32 and f64 shortest round-trip)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

import numpy as np
import orjson

F32_T = np.float32


class F32(float):
    """A float that is an f32 on the wire: printed with f32 shortest digits."""

    __slots__ = ()

    def __new__(cls, value: float) -> F32:
        return float.__new__(cls, float(np.float32(value)))


def _layout(v: Any, single: bool) -> str:
    if v == 0:
        return "-0.0" if math.copysign(1.0, float(v)) < 0 else "0.0"
    mant, exp_s = np.format_float_scientific(v, unique=True, trim="-").split("e")
    exp = int(exp_s)
    sign = "-" if mant[0] == "-" else ""
    digits = mant.lstrip("-").replace(".", "")
    lo, hi = (-6, 12) if single else (-5, 15)
    if lo <= exp <= hi:
        if exp >= len(digits) - 1:
            return sign + digits + "0" * (exp - len(digits) + 1) + ".0"
        if exp >= 0:
            return sign + digits[: exp + 1] + "." + digits[exp + 1 :]
        return sign + "0." + "0" * (-exp - 1) + digits
    rest = "." + digits[1:] if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{rest}e{'+' if exp >= 0 else '-'}{abs(exp)}"


def format_f64(v: float) -> str:
    """Print an f64 as the reference does."""
    a = abs(v)
    if 1e-4 <= a < 1e16:
        return repr(float(v))
    if math.isnan(v) or math.isinf(v):
        return "null"
    return _layout(float(v), single=False)


def format_f32(v: float) -> str:
    """Print an f32 as the reference does."""
    if math.isnan(v) or math.isinf(v):
        return "null"
    return _layout(F32_T(v), single=True)


def format_number(v: Any) -> str:
    """Re-print a JSON number: integers stay integers, floats use the f64 layout."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return format_f64(v)


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


class RawJSON(str):
    """Already-serialized JSON text, emitted verbatim by the encoder."""

    __slots__ = ()


class EncodedDict(dict):
    """A dict whose compact JSON is already known: the encoder emits `json` verbatim.

    For read results that are cached and served many times; the text must be `dumps` of the
    very same contents (the dict must not change after `json` is set)."""

    __slots__ = ("json",)

    json: str


def encoded(value: dict[str, Any]) -> EncodedDict:
    """A copy of `value` that carries its own compact JSON text."""
    out = EncodedDict(value)
    out.json = dumps(value)
    return out


class Encoded:
    """A value's compact JSON as UTF-8 bytes, encoded ahead (in a worker thread): the encoders emit it verbatim."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


_VERBATIM: dict[type, Callable[[Any], str]] = {
    RawJSON: str.__str__,
    EncodedDict: lambda o: str(o.json),
    Encoded: lambda o: str(o.data.decode("utf-8")),
}


def _enc(o: Any, out: list[str]) -> None:
    t = type(o)
    if t is str:
        out.append(encode_basestring(o))
    elif t in _VERBATIM:
        out.append(_VERBATIM[t](o))
    elif t is dict:
        if not o:
            out.append("{}")
            return
        out.append("{")
        first = True
        for k, v in o.items():
            if first:
                first = False
            else:
                out.append(",")
            out.append(encode_basestring(k))
            out.append(":")
            _enc(v, out)
        out.append("}")
    elif t is list or t is tuple:
        if not o:
            out.append("[]")
            return
        out.append("[")
        first = True
        for v in o:
            if first:
                first = False
            else:
                out.append(",")
            _enc(v, out)
        out.append("]")
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif t is int:
        out.append(str(o))
    elif t is float:
        out.append(format_f64(o))
    elif t is F32:
        out.append(format_f32(o))
    elif isinstance(o, np.floating):
        out.append(format_f32(float(o)) if o.dtype == np.float32 else format_f64(float(o)))
    elif isinstance(o, np.integer):
        out.append(str(int(o)))
    elif isinstance(o, dict):
        _enc(dict(o), out)
    elif isinstance(o, int):
        out.append(str(int(o)))
    elif isinstance(o, float):
        out.append(format_f64(float(o)))
    else:
        raise TypeError(f"cannot encode {t.__name__} as JSON")


def plain_dumps(o: Any) -> str:
    """Compact JSON text, non-ASCII raw, reference float layout (the plain Python writer)."""
    out: list[str] = []
    _enc(o, out)
    return "".join(out)


def _special(o: Any) -> orjson.Fragment:
    """What the compiled encoder hands back: every value it does not print itself as we do."""
    t = type(o)
    if t is RawJSON:
        return orjson.Fragment(str.__str__(o))
    if t is EncodedDict:
        return orjson.Fragment(o.json)
    if t is F32:
        return orjson.Fragment(format_f32(o))
    if t is Encoded:
        return orjson.Fragment(o.data)
    return orjson.Fragment(plain_dumps(o))  # numpy scalars, other subclasses, or the plain writer's TypeError


_COMPILED = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def dumps_bytes(o: Any) -> bytes:
    """Compact JSON as UTF-8 bytes.

    orjson prints str, int, bool, None, list, tuple and dict exactly as the plain writer does,
    and a plain float in the same shortest round-trip layout (`format_f64`: `1e16`, `5e-324`,
    `-0.0`, non-finite as null; checked on random floats in tests/test_scale_equivalence.py).
    Every subclass (F32, RawJSON, EncodedDict, numpy scalars) is passed to `_special`; anything
    orjson refuses (an int past 64 bits, a lone surrogate, a non-string key, deep nesting) goes
    through the plain writer, which prints it or raises as before."""
    try:
        return orjson.dumps(o, default=_special, option=_COMPILED)
    except orjson.JSONEncodeError:
        return plain_dumps(o).encode("utf-8")


def dumps(o: Any) -> str:
    """Compact JSON text, non-ASCII raw, reference float layout."""
    try:
        return orjson.dumps(o, default=_special, option=_COMPILED).decode("utf-8")
    except orjson.JSONEncodeError:
        return plain_dumps(o)


def encode_in_pieces(o: Any, piece: int = 1024) -> Encoded:
    """`dumps_bytes(o)`, encoded a list slice at a time, for results of tens of MB made in a worker thread.

    The compiled encoder holds the interpreter lock for a whole call, so one call over such a result
    stalls every other thread (the event loop included) for as long; between pieces a worker thread
    lets the others run. Dict values that are `Encoded` already are spliced in as they are."""
    return Encoded(_pieces(o, piece))


def _pieces(o: Any, piece: int) -> bytes:
    t = type(o)
    if t is Encoded:
        data: bytes = o.data
        return data
    if t is dict and o:
        return b"{" + b",".join(dumps_bytes(k) + b":" + _pieces(v, piece) for k, v in o.items()) + b"}"
    if (t is list or t is tuple) and len(o) > piece:
        slices = (dumps_bytes(list(o[i : i + piece]))[1:-1] for i in range(0, len(o), piece))
        return b"[" + b",".join(slices) + b"]"
    return dumps_bytes(o)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(data: str | bytes) -> Any:
    """Strict JSON parse: no NaN/Infinity literals."""
    return json.loads(data, parse_constant=_reject_constant)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def has_lone_surrogate(raw: bytes | str, value: Any) -> bool:
    """Did a `\\uD8xx`-style escape decode to a lone surrogate (which UTF-8 cannot carry)?"""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if not _SURROGATE_ESCAPE.search(data):
        return False
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False
