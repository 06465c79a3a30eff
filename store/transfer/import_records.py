"""The records of a batch stream, one line at a time: the batch a header opens, and every op line's checks.

A line is checked on its own (its fields, their types and caps) and added to the batch it belongs
to; `store/importer.py` reads a stream into batches with these checks (and its fast path for the
common association line) and applies them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from taguru_server.store.json_depth import parse_bounded
from taguru_server.store.model.context import CONCEPT, LABEL, Meta
from taguru_server.store.text import name_problem, utf8_len
from taguru_server.store.wire import format_number, has_lone_surrogate

MAX_LINE_BYTES = 16 * 1024 * 1024


MAX_PASSAGE_BYTES = 8 * 1024 * 1024


MAX_NAME_BYTES = 1024


MAX_CONTEXT_NAME_BYTES = 64


MAX_DESCRIPTION_BYTES = 4096


MAX_QUESTION_BYTES = 512


MAX_QUESTIONS_PER_PARAGRAPH = 8


MAX_SECTION_BYTES = 512


MAX_LOCATOR_KIND_BYTES = 64


MAX_LOCATOR_VALUE_BYTES = 512


MAX_TAG_BYTES = 128


MAX_TAGS = 32


MAX_WEIGHT = 1e6


MAX_U32 = 2**32 - 1


MAX_U64 = 2**64 - 1


_KEYS = {
    "header": {"taguru_batch", "context", "source", "create"},
    "association": {"subject", "label", "object", "weight", "paragraph"},
    "alias": {"alias", "canonical", "kind"},
    "passage": {"passage", "stored_at", "date", "tags"},
    "question": {"paragraph", "question"},
    "section": {"paragraph", "section"},
    "locator": {"paragraph", "locator"},
}


ASSOCIATION_KEYS = frozenset(_KEYS["association"])
_CREATE_KEYS = {"description", "pinned", "dice_floor", "semantic_floor"}


_CLASSIFY = ("subject", "alias", "passage", "question", "section", "locator")


_FAST_LINE_CHARS = MAX_LINE_BYTES // 4


_CLASS_OF = {
    "subject": "association",
    "alias": "alias",
    "passage": "passage",
    "question": "question",
    "section": "section",
    "locator": "locator",
}


class ParseError(Exception):
    """A stream that cannot be imported; the message is the wire text."""


@attrs.define
class Batch:
    """One source's complete truth for one context."""

    context: str
    source: str
    create: dict[str, Any] | None
    first_line: int
    last_line: int = 0
    associations: list[tuple[str, str, str, float, int | None]] = attrs.field(factory=list)
    aliases: list[tuple[int, str, str]] = attrs.field(factory=list)
    passage: str | None = None
    stored_at: int | None = None
    date: int | None = None
    tags: list[str] = attrs.field(factory=list)
    questions: list[tuple[int, str]] = attrs.field(factory=list)
    sections: list[tuple[int, str]] = attrs.field(factory=list)
    locators: list[tuple[int, str, str]] = attrs.field(factory=list)
    needs_passage_line: int | None = None


def _name(n: int, rec: dict[str, Any], field: str, cap: int = MAX_NAME_BYTES, label: str | None = None) -> str:
    label = label or field
    v = rec.get(field)
    if v is None:
        raise ParseError(f"line {n}: missing field '{field}'")
    if not isinstance(v, str):
        raise ParseError(f"line {n}: {label} must be a string")
    problem = name_problem(label, v, cap)
    if problem is not None:
        raise ParseError(f"line {n}: {problem}")
    return v


def _uint(n: int, rec: dict[str, Any], field: str, top: int, required: bool) -> int | None:
    v = rec.get(field)
    if v is None:
        if required:
            raise ParseError(f"line {n}: missing field '{field}'")
        return None
    if type(v) is not int or v < 0 or v > top:
        raise ParseError(f"line {n}: {field} must be a non-negative integer")
    return v


def decode_line(n: int, line: str, decode: Callable[[str], Any]) -> dict[str, Any]:
    """The JSON object on one stripped, non-empty line."""
    if len(line) > _FAST_LINE_CHARS and utf8_len(line) > MAX_LINE_BYTES:
        raise ParseError(f"line {n}: the line exceeds the {MAX_LINE_BYTES}-byte cap")
    try:
        # json.loads(line, parse_constant=...) without building a decoder per line; a
        # leading BOM keeps json.loads' own refusal text
        rec = parse_bounded(
            decode
            if line[0] != "\ufeff"
            else lambda t: json.loads(t, parse_constant=_no_constant, parse_float=_finite_float),
            line,
        )
        if "\\u" in line and has_lone_surrogate(line, rec):
            raise ValueError("lone leading surrogate in hex escape")
    except ValueError as exc:
        raise ParseError(f"line {n}: not JSON: {exc}") from None
    if not isinstance(rec, dict):
        raise ParseError(f"line {n}: expected a JSON object")
    return rec


def parse_op_line(n: int, rec: dict[str, Any], current: Batch | None, alias_seen: set[tuple[int, str]]) -> None:
    """Classify one op line (not a header, schema or group record) and add it to the current batch."""
    kind = next((_CLASS_OF[k] for k in _CLASSIFY if k in rec), None)
    if kind is None:
        raise ParseError(f"line {n}: unrecognized record: expected a batch header or an op line")
    if current is None:
        raise ParseError(f"line {n}: an op line before any batch header")
    if kind == "association" and "source" in rec:
        raise ParseError(f"line {n}: an association line must not carry 'source' — the batch header names it")
    unknown = sorted(set(rec) - _KEYS[kind])
    if unknown:
        raise ParseError(f"line {n}: unknown field '{unknown[0]}' in a {kind} line")
    current.last_line = n
    if kind == "association":
        _add_association(n, rec, current)
    elif kind == "alias":
        _add_alias(n, rec, current, alias_seen)
    elif kind == "passage":
        _set_passage(n, rec, current)
    else:
        _add_paragraph_marker(n, rec, current, kind)


def _add_association(n: int, rec: dict[str, Any], current: Batch) -> None:
    """Validate an association line fully and append it."""
    s = _name(n, rec, "subject")
    lab = _name(n, rec, "label")
    o = _name(n, rec, "object")
    w = rec.get("weight")
    if w is None:
        raise ParseError(f"line {n}: missing field 'weight'")
    if isinstance(w, bool) or not isinstance(w, (int, float)):
        raise ParseError(f"line {n}: weight must be a number")
    if not (abs(w) <= MAX_WEIGHT):
        raise ParseError(f"line {n}: weight {_display(w)} is outside the accepted range (finite, |weight| <= 1000000)")
    p = _uint(n, rec, "paragraph", MAX_U32, False)
    if p is not None and current.needs_passage_line is None:
        current.needs_passage_line = n
    current.associations.append((s, lab, o, float(w), p))


def _add_alias(n: int, rec: dict[str, Any], current: Batch, alias_seen: set[tuple[int, str]]) -> None:
    """Validate an alias line and append it, refusing an alias stated twice in the batch."""
    a = _name(n, rec, "alias")
    c = _name(n, rec, "canonical")
    k = rec.get("kind")
    if k not in ("concept", "label"):
        raise ParseError(f'line {n}: kind must be "concept" or "label"')
    ki = CONCEPT if k == "concept" else LABEL
    if (ki, a) in alias_seen:
        raise ParseError(f"line {n}: {k} alias '{a}' appears twice in this batch")
    alias_seen.add((ki, a))
    current.aliases.append((ki, a, c))


def _set_passage(n: int, rec: dict[str, Any], current: Batch) -> None:
    """Validate the batch's one passage line and store it with its dates and tags."""
    if current.passage is not None:
        raise ParseError(f"line {n}: a batch carries at most one passage line")
    t = rec.get("passage")
    if not isinstance(t, str):
        raise ParseError(f"line {n}: passage must be a string")
    size = utf8_len(t)
    if size > MAX_PASSAGE_BYTES:
        raise ParseError(f"line {n}: passage of {size} bytes exceeds the {MAX_PASSAGE_BYTES}-byte cap")
    current.passage = t
    current.stored_at = _uint(n, rec, "stored_at", MAX_U64, False)
    current.date = _uint(n, rec, "date", MAX_U64, False)
    tags = rec.get("tags")
    if tags is not None:
        current.tags = _tags(n, tags)


def _tags(n: int, tags: Any) -> list[str]:
    """A passage line's tags, checked against the count and size caps."""
    if not isinstance(tags, list):
        raise ParseError(f"line {n}: tags must be an array of strings")
    if len(tags) > MAX_TAGS:
        raise ParseError(f"line {n}: {len(tags)} tags where at most {MAX_TAGS} may be given")
    for tag in tags:
        if not isinstance(tag, str):
            raise ParseError(f"line {n}: tags must be an array of strings")
        if not tag:
            raise ParseError(f"line {n}: tag must not be empty")
        if utf8_len(tag) > MAX_TAG_BYTES:
            raise ParseError(f"line {n}: tag of {utf8_len(tag)} bytes exceeds the {MAX_TAG_BYTES}-byte cap")
    return list(tags)


def _add_paragraph_marker(n: int, rec: dict[str, Any], current: Batch, kind: str) -> None:
    """Validate a question, section or locator line and append it to the batch."""
    p = _uint(n, rec, "paragraph", MAX_U32, True)
    assert p is not None
    if current.needs_passage_line is None:
        current.needs_passage_line = n
    if kind == "question":
        q = _name(n, rec, "question", MAX_QUESTION_BYTES)
        if (p, q) not in current.questions:
            if sum(1 for pp, _q in current.questions if pp == p) >= MAX_QUESTIONS_PER_PARAGRAPH:
                raise ParseError(f"line {n}: paragraph {p} already has {MAX_QUESTIONS_PER_PARAGRAPH} questions")
            current.questions.append((p, q))
    elif kind == "section":
        current.sections.append((p, _name(n, rec, "section", MAX_SECTION_BYTES)))
    else:
        loc = rec.get("locator")
        if not isinstance(loc, dict) or set(loc) - {"kind", "value"}:
            raise ParseError(f"line {n}: locator must be an object {{kind, value}}")
        lk = _name(n, loc, "kind", MAX_LOCATOR_KIND_BYTES, "locator kind")
        lv = _name(n, loc, "value", MAX_LOCATOR_VALUE_BYTES, "locator value")
        current.locators.append((p, lk, lv))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range")
    return value


DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _display(w: int | float) -> str:
    if isinstance(w, int):
        return str(w)
    if w != w or w in (float("inf"), float("-inf")):
        return "NaN" if w != w else ("inf" if w > 0 else "-inf")  # Rust's Display
    if w == int(w):
        # Rust's Display: shortest round-trip digits written positionally, no fraction
        return str(int(w)) if abs(w) < 2**53 else np.format_float_positional(w, unique=True, trim="-")
    return format_number(w)


def read_header(n: int, rec: dict[str, Any]) -> Batch:
    unknown = sorted(set(rec) - _KEYS["header"])
    if unknown:
        raise ParseError(f"line {n}: unknown field '{unknown[0]}' in a batch header")
    version = rec.get("taguru_batch")
    if version != 1 or type(version) is not int:
        raise ParseError(f"line {n}: taguru_batch must be 1 (the only batch format this server reads)")
    context = _name(n, rec, "context", MAX_CONTEXT_NAME_BYTES)
    source = _name(n, rec, "source")
    create = rec.get("create")
    if create is not None:
        if not isinstance(create, dict):
            raise ParseError(f"line {n}: create must be an object")
        bad = sorted(set(create) - _CREATE_KEYS)
        if bad:
            raise ParseError(f"line {n}: unknown field '{bad[0]}' in create")
        desc = create.get("description", "")
        if not isinstance(desc, str):
            raise ParseError(f"line {n}: description must be a string")
        if utf8_len(desc) > MAX_DESCRIPTION_BYTES:
            raise ParseError(
                f"line {n}: description of {utf8_len(desc)} bytes exceeds the {MAX_DESCRIPTION_BYTES}-byte cap"
            )
        if "pinned" in create and not isinstance(create["pinned"], bool):
            raise ParseError(f"line {n}: pinned must be a boolean")
        for f in ("dice_floor", "semantic_floor"):
            v = create.get(f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ParseError(f"line {n}: {f} must be a number")
    return Batch(context=context, source=source, create=create, first_line=n, last_line=n)


def meta_from_create(create: dict[str, Any]) -> Meta:
    """A new context's metadata from a header's create block (the floors clamped to [0, 1])."""

    def floor(v: Any) -> float | None:
        return None if v is None else min(max(float(v), 0.0), 1.0)

    return Meta(
        description=create.get("description", ""),
        pinned=bool(create.get("pinned", False)),
        dice_floor=floor(create.get("dice_floor")),
        semantic_floor=floor(create.get("semantic_floor")),
    )
