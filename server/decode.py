"""Request decoding: the engine that reads a typed body against its `Spec` (the specs are in `wire/`).

A typed body keeps the reference's statuses: 415 for a non-JSON content type, 400 for a body that
is not JSON, 422 (serde's wording, with a line/column position) for a wrong shape. Positions are
looked up only once a body is refused. The collected-validation bodies (associations, passage
store) answer 400 issue lists instead; their shared pieces live here too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import attrs

from taguru_server.server.errors import malformed
from taguru_server.server.positions import PREFIX as PREFIX  # re-exported: the 422 prefix
from taguru_server.server.positions import Path, Refusal, report
from taguru_server.store.errors import ApiError, Code, Issue, too_many_items
from taguru_server.store.json_depth import parse_bounded
from taguru_server.store.text import utf8_len
from taguru_server.store.wire import describe_value, has_lone_surrogate

MAX_U32 = 2**32 - 1
MAX_U64 = 2**64 - 1
MAX_NAME_BYTES = 1024
NON_EMPTY = "a non-empty string"

# ----- content type and JSON parse (415, 400) ----------------------------------------


def is_json_content_type(value: str | None) -> bool:
    if not value:
        return False
    mime = value.split(";", 1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def require_json(content_type: str | None, raw: bytes) -> Any:
    """An any-JSON body: JSON content type (415), valid JSON (400)."""
    if not is_json_content_type(content_type):
        raise malformed("Expected request with `Content-Type: application/json`", status=415)
    return parse_json(raw)


def parse_json(raw: bytes, checked: frozenset[str] = frozenset()) -> Any:
    """Parse a JSON body or raise the 400; a repeated key named in `checked` is then the 422."""
    repeated: list[str] = []
    hook = _pairs_hook(checked, repeated) if checked else None
    try:
        text = raw.decode("utf-8")
        value = parse_bounded(
            lambda t: json.loads(
                t, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_json_int, object_pairs_hook=hook
            ),
            text,
        )
        if has_lone_surrogate(raw, value):
            raise ValueError("lone leading surrogate in hex escape")
    except (UnicodeDecodeError, ValueError) as exc:
        raise malformed(f"Failed to parse the request body as JSON: {exc}", status=400) from None
    if repeated:
        raise report(raw, Refusal((), f"duplicate field `{repeated[0]}`", "eof"))
    return value


def _pairs_hook(checked: frozenset[str], repeated: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """Objects as dicts (the last of a repeated key wins), noting the first repeat of a checked key."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs) and not repeated:
            seen: set[str] = set()
            for key, _value in pairs:
                if key in seen and key in checked:
                    repeated.append(key)
                    break
                seen.add(key)
        return out

    return hook


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


# ----- field kinds ---------------------------------------------------------------------

_Path = Path


def _string(v: Any, path: _Path, f: Field) -> str:
    if not isinstance(v, str):
        raise Refusal(path, f"invalid type: {describe_value(v)}, expected a string")
    return v


_UINT_TOP = {"usize": MAX_U64, "u32": MAX_U32, "u64": MAX_U64}  # usize is 64-bit on the reference's targets


def _uint(v: Any, path: _Path, f: Field) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise Refusal(path, f"invalid type: {describe_value(v)}, expected {f.kind}")
    if v < 0 or v > _UINT_TOP[f.kind]:
        raise Refusal(path, f"invalid value: integer `{v}`, expected {f.kind}")
    return v if f.ceiling is None else min(v, f.ceiling)


def _number(v: Any, path: _Path, f: Field) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Refusal(path, f"invalid type: {describe_value(v)}, expected {f.kind}")
    if isinstance(v, float) and math.isinf(v):
        raise Refusal(path, "number out of range")
    return float(v)


def _boolean(v: Any, path: _Path, f: Field) -> bool:
    if not isinstance(v, bool):
        raise Refusal(path, f"invalid type: {describe_value(v)}, expected a boolean")
    return v


def _strings(v: Any, path: _Path, f: Field) -> list[str]:
    if not isinstance(v, list):
        raise Refusal(path, f"invalid type: {describe_value(v)}, expected a sequence")
    if not all(isinstance(item, str) for item in v):
        i, item = next((i, item) for i, item in enumerate(v) if not isinstance(item, str))
        raise Refusal(path + (str(i),), f"invalid type: {describe_value(item)}, expected a string")
    return v


def _one_or_many(v: Any, path: _Path, f: Field) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(item, str) for item in v):
        return v
    raise Refusal(path, "data did not match any variant of untagged enum OneOrMany")


def _string_map(v: Any, path: _Path, f: Field) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        raise Refusal(path, f"invalid type: {describe_value(v)}, expected a map")
    return v


def _struct(v: Any, path: _Path, f: Field) -> dict[str, Any]:
    assert f.nested is not None
    return f.nested.decode_at(v, path)


def _struct_map(v: Any, path: _Path, f: Field) -> dict[str, Any]:
    assert f.nested is not None
    if not isinstance(v, dict):
        raise Refusal(path, f"invalid type: {describe_value(v)}, expected a map")
    return {key: f.nested.decode_at(item, path + (key,)) for key, item in v.items()}


def _variant(v: Any, path: _Path, f: Field) -> str:
    assert f.choices is not None
    if not isinstance(v, str):
        raise Refusal(path, f"invalid type: {describe_value(v)}, expected {f.note or 'a string'}")
    if v not in f.choices:
        expected = ", ".join(f"`{c}`" for c in f.choices)
        raise Refusal(path, f"unknown variant `{v}`, expected one of {expected}")
    return v


_KINDS: dict[str, tuple[Callable[[Any, _Path, Field], Any], dict[str, Any]]] = {  # decoder, JSON Schema
    "string": (_string, {"type": "string"}),
    "usize": (_uint, {"type": "integer", "minimum": 0, "maximum": MAX_U64}),  # 64-bit on the reference's targets
    "u32": (_uint, {"type": "integer", "minimum": 0, "maximum": MAX_U32}),
    "u64": (_uint, {"type": "integer", "minimum": 0, "maximum": MAX_U64}),
    "f64": (_number, {"type": "number"}),
    "f32": (_number, {"type": "number"}),
    "bool": (_boolean, {"type": "boolean"}),
    "strings": (_strings, {"type": "array", "items": {"type": "string"}}),
    "one_or_many": (_one_or_many, {"type": ["string", "array"], "items": {"type": "string"}}),
    "string_map": (_string_map, {"type": "object", "additionalProperties": {"type": "string"}}),
    "struct": (_struct, {}),
    "struct_map": (_struct_map, {"type": "object"}),
    "variant": (_variant, {"type": "string"}),
}
_NUMERIC = frozenset({"usize", "u32", "u64", "f64", "f32"})


# ----- specs -----------------------------------------------------------------------------


@attrs.frozen
class Field:
    """One request field: wire name, kind, meaning, and the rules the engine applies to it.

    `default` is what an absent (or null) field decodes to; `ceiling` silently clamps an unsigned
    value; `max_items` caps a top-level list (400 over_limit, checked once the whole body has decoded);
    `null_is_absent=False` makes a null an ordinary (wrong-typed) value; `alias_of` names the field
    this one is a deprecated spelling of (both given is a duplicate). `rules` are JSON Schema keywords
    the document adds for what the handler refuses after decoding (e.g. `minLength` for a name that
    must not be empty): published only, each one matching a refusal of the handler.
    """

    name: str
    kind: str
    note: str = ""
    required: bool = False
    nested: Spec | None = None
    default: Any = None
    ceiling: int | None = None
    max_items: int | None = None
    null_is_absent: bool = True
    alias_of: str | None = None
    rules: dict[str, Any] | None = attrs.field(default=None, eq=False)
    choices: tuple[str, ...] | None = None  # a `variant`'s spellings

    @property
    def description(self) -> str:
        """The published text: the note, the item cap, the default and ceiling."""
        text = self.note if self.max_items is None else f"{self.note} (at most {self.max_items})"
        if self.kind not in _NUMERIC or (self.default is None and self.ceiling is None):
            return text
        if self.default == self.ceiling:
            limits = f"default and ceiling {self.default}"
        else:
            parts = [f"default {self.default}"] if self.default is not None else []
            limits = ", ".join(parts + ([f"ceiling {self.ceiling}"] if self.ceiling is not None else []))
        return f"{text}, {limits}" if text else limits


@attrs.frozen
class Spec:
    """A typed request body: published as a JSON Schema, decoded into a dict of fields or refused."""

    struct: str  # the name a 422 gives ("expected struct …")
    fields: tuple[Field, ...]
    description: str = ""
    closed: bool = False
    component: str | None = None  # the `/openapi.json` component name, when not `struct`
    refuse_duplicates: bool = False  # a repeated key naming one of its fields (any depth) is a 422
    rules: tuple[dict[str, Any], ...] = attrs.field(default=(), eq=False)  # whole-body refusals of the handler
    _aliased: tuple[str, ...] = attrs.field(init=False, repr=False, eq=False)
    _checked: frozenset[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_aliased", tuple(f.alias_of for f in self.fields if f.alias_of))
        object.__setattr__(self, "_checked", self.field_names() if self.refuse_duplicates else frozenset())

    @property
    def component_name(self) -> str:
        return self.component or self.struct

    def read(self, content_type: str | None, raw: bytes) -> dict[str, Any]:
        """The whole typed-body path: content type (415), JSON (400), shape (422), item caps (400)."""
        if not is_json_content_type(content_type):
            raise malformed("Expected request with `Content-Type: application/json`", status=415)
        return self.decode(parse_json(raw, self._checked), raw)

    def decode(self, value: Any, raw: bytes) -> dict[str, Any]:
        """Decode a parsed body (`raw` is only read to place a refusal)."""
        try:
            out = self.decode_at(value, ())
        except Refusal as refusal:
            raise report(raw, refusal) from None
        for f in self.fields:
            if f.max_items is not None and out[f.name] is not None and len(out[f.name]) > f.max_items:
                raise too_many_items(f.name, len(out[f.name]))
        return out

    def decode_at(self, value: Any, path: _Path) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise Refusal(path, f"invalid type: {describe_value(value)}, expected struct {self.struct}")
        if self.closed:
            names = [f.name for f in self.fields]
            unknown = sorted(set(value) - set(names))
            if unknown:
                expected = ", ".join(f"`{n}`" for n in names)
                raise Refusal(path + (unknown[0],), f"unknown field `{unknown[0]}`, expected one of {expected}")
        aliased = self._aliased
        out: dict[str, Any] = {}
        for f in self.fields:
            v = value.get(f.name)
            if v is None and (f.null_is_absent or f.name not in value):
                if f.required and f.name not in aliased:
                    raise Refusal(path, f"missing field `{f.name}`", "close")
                out[f.name] = f.default
            else:
                out[f.name] = _KINDS[f.kind][0](v, path + (f.name,), f)
        for f in self.fields:
            if f.alias_of and out[f.name] is not None:
                if out[f.alias_of] is not None:
                    raise Refusal(path + (f.name,), f"duplicate field `{f.alias_of}`")
                out[f.alias_of] = out[f.name]
        for name in aliased:
            if out[name] is None and any(f.required for f in self.fields if f.name == name):
                raise Refusal(path, f"missing field `{name}`", "close")
        return out

    def field_names(self) -> frozenset[str]:
        """Every field name of this spec and of the structs nested in it."""
        names = {f.name for f in self.fields}
        for f in self.fields:
            if f.nested is not None:
                names |= f.nested.field_names()
        return frozenset(names)

    def json_schema(self) -> dict[str, Any]:
        """What `decode` accepts, as JSON Schema: a null is allowed wherever it reads as absent, a
        deprecated alias excludes its field, and the handler's own refusals come as `rules`."""
        aliased = self._aliased
        props = {f.name: _field_schema(f, f.name not in aliased) for f in self.fields}
        out: dict[str, Any] = {"type": "object", "properties": props}
        if self.closed:
            out["additionalProperties"] = False
        required = [f.name for f in self.fields if f.required and f.name not in aliased]
        if required:
            out["required"] = required
        rules = [*self._alias_rules(), *self.rules]
        if rules:
            out["allOf"] = rules
        if self.description:
            out["description"] = self.description
        return out

    def _alias_rules(self) -> list[dict[str, Any]]:
        """A field and its alias are not both given (non-null); a required field is given under one of them."""
        rules: list[dict[str, Any]] = []
        for f in self.fields:
            if f.alias_of is None:
                continue
            rules.append({"not": given(f.alias_of, f.name)})
            if any(g.required for g in self.fields if g.name == f.alias_of):
                rules.append({"anyOf": [given(f.alias_of), given(f.name)]})
        return rules


def _field_schema(f: Field, own_requirement: bool) -> dict[str, Any]:
    """One field as published: its kind, item cap and rules; null allowed where it decodes as absent
    (a required field that is null is missing, unless an alias may stand in for it)."""
    schema: dict[str, Any]
    if f.kind == "struct_map" and f.nested is not None:
        schema = {"type": "object", "additionalProperties": f.nested.json_schema()}
    elif f.nested is not None:
        schema = f.nested.json_schema()
    else:
        schema = dict(_KINDS[f.kind][1])
    if f.choices is not None:
        schema["enum"] = list(f.choices)
    if f.max_items is not None:
        schema["maxItems"] = f.max_items
    if f.rules:
        schema.update(f.rules)
    if f.description:
        schema["description"] = f.description
    if f.null_is_absent and not (f.required and own_requirement):
        schema = nullable(schema)
    return schema


NOT_NULL: dict[str, Any] = {"not": {"type": "null"}}


def given(*names: str, **schemas: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema for "every one of `names` is present and not null" (and matches `schemas[name]`, if given)."""
    return {"required": list(names), "properties": {n: {**NOT_NULL, **schemas.get(n, {})} for n in names}}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null."""
    kind = schema.get("type")
    if kind is not None and "enum" not in schema and "const" not in schema:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        return {**schema, "type": [*kinds, "null"]} if "null" not in kinds else schema
    return {"anyOf": [schema, {"type": "null"}]}


# ----- collected validation (400 issue lists) ----------------------------------------------


def json_type(v: Any) -> str:
    """How a collected-validation issue names a JSON value's type."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def is_u32(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_U32


def name_issue(path: str, value: Any, optional: bool = False) -> Issue | None:
    """The issue with a name-like value (absent, not a string, empty, over the byte cap), if any."""
    if value is None:
        return None if optional else Issue(path, "missing", NON_EMPTY, "absent")
    if not isinstance(value, str):
        return Issue(path, "type", "a string" if optional else NON_EMPTY, json_type(value))
    if not value:
        return Issue(path, "empty", NON_EMPTY, "an empty string")
    size = utf8_len(value)
    if size > MAX_NAME_BYTES:
        return Issue(path, "too_long", f"at most {MAX_NAME_BYTES} bytes", f"{size} bytes")
    return None


def check_name(value: str, what: str, cap: int = MAX_NAME_BYTES) -> None:
    """The standard empty-then-size 400s for a name-like field."""
    if not value:
        raise ApiError(Code.INVALID_ARGUMENT, f"{what} must not be empty; nothing was applied")
    size = len(value.encode("utf-8"))
    if size > cap:
        raise ApiError(Code.INVALID_ARGUMENT, f"{what} is {size} bytes, over the {cap}-byte cap; nothing was applied")
