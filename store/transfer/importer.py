"""JSONL batch import: parse a whole stream first, then apply batch by batch (docs/operations.md, "Backup")."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from taguru_server.store.errors import ApiError, Code, Issue, timed_out
from taguru_server.store.json_depth import parse_bounded
from taguru_server.store.model.context import CONCEPT, LABEL, Context, Meta
from taguru_server.store.persist.registry import Registry
from taguru_server.store.persist.writer import collector_paused
from taguru_server.store.text import WHITE_SPACE, split_paragraphs, utf8_len
from taguru_server.store.transfer.group_import import GroupLine, GroupParseError, parse_group_line
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
_CREATE_KEYS = {"description", "pinned", "dice_floor", "semantic_floor"}
_CLASSIFY = ("subject", "alias", "passage", "question", "section", "locator")
# The association-line shortcuts below only ever accept what the full checks accept, with
# the same values; tests/test_scale_equivalence.py compares both ways (this switch off).
FAST_PATHS = True
_ASSOC_KEYS = frozenset(_KEYS["association"])
# An association line in the common layout, with plain strings (no escapes, no control
# characters) and a JSON number: when it matches, json.loads would return exactly these
# values, so the line is taken without running the JSON decoder. Anything else is decoded.
_WS = "[ \t\n\r]*"
_NAME = r'"([^"\\\x00-\x1f]{1,256})"'  # 1 to 256 characters: never over the 1024-byte cap
_FLOAT = "(-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+))"  # a float literal


def _member(key: str, value: str) -> str:
    return f'"{key}"{_WS}:{_WS}{value}{_WS}'


_ASSOC_LINE = re.compile(
    f"[ \t\r]*\\{{{_WS}"
    + f",{_WS}".join(_member(k, _NAME) for k in ("subject", "label", "object"))
    + f",{_WS}{_member('weight', _FLOAT)}"
    + f"(?:,{_WS}{_member('paragraph', '(0|[1-9][0-9]{0,9})')})?\\}}[ \t\r]*"
)
_FAST_RAW_CHARS = 4096
_FAST_NAME_CHARS = MAX_NAME_BYTES // 4  # a name this short cannot exceed the byte cap
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
    if not v:
        raise ParseError(f"line {n}: {label} must not be empty")
    size = utf8_len(v)
    if size > cap:
        raise ParseError(f"line {n}: {label} of {size} bytes exceeds the {cap}-byte cap")
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


class Stream(list[Batch]):
    """A parsed stream: its batches in order, and its `taguru_group` records (applied after every batch)."""

    groups: list[GroupLine]


def parse_stream(data: bytes | str) -> Stream:
    """Validate a whole JSONL stream into batches (and group records), or raise ParseError naming the line."""
    text = data.decode("utf-8", errors="strict") if isinstance(data, bytes) else data
    if text.startswith("\ufeff"):
        text = text[1:]
    batches = parse_lines(text, 1, set(), set())
    _check_paragraph_references(batches, bool(batches.groups))
    return batches


def parse_lines(text: str, first_line: int, seen: set[tuple[str, str]], group_names: set[str]) -> Stream:
    """The batches (and group records) of one stretch of a stream that starts at a batch header (or the
    stream's start), its first line numbered `first_line`; `seen` holds the (context, source) pairs and
    `group_names` the group records of the earlier stretches. A stream parsed stretch by stretch,
    followed by `check_batches` over the stretches' batches in order, is refused exactly where
    `parse_stream` refuses it whole."""
    batches = Stream()
    batches.groups = []
    current: Batch | None = None
    alias_seen: set[tuple[int, str]] = set()
    decode = _DECODER.decode
    fast_line = _ASSOC_LINE.fullmatch
    fast = FAST_PATHS
    # The regex shortcut stays inline: it runs once per association line on the import hot path.
    for n, raw in enumerate(text.split("\n"), start=first_line):
        if fast and current is not None and len(raw) <= _FAST_RAW_CHARS:
            m = fast_line(raw)
            if m is not None:
                s, lab, o, w_text, p_text = m.groups()
                w = float(w_text)
                if -MAX_WEIGHT <= w <= MAX_WEIGHT:
                    if p_text is None:
                        current.last_line = n
                        current.associations.append((s, lab, o, w, None))
                        continue
                    p = int(p_text)
                    if p <= MAX_U32:
                        current.last_line = n
                        if current.needs_passage_line is None:
                            current.needs_passage_line = n
                        current.associations.append((s, lab, o, w, p))
                        continue
        line = raw.strip(WHITE_SPACE)
        if not line:
            continue
        rec = _decode_line(n, line, decode)
        if fast and current is not None and _took_plain_association(n, line, rec, current):
            continue
        if "taguru_batch" in rec:
            current = _open_batch(n, rec, seen)
            alias_seen = set()
            batches.append(current)
            continue
        if "taguru_group" in rec:  # a group record closes the batch before it
            current = None
            try:
                batches.groups.append(parse_group_line(n, rec, group_names))
            except GroupParseError as exc:
                raise ParseError(str(exc)) from None
            continue
        _parse_op_line(n, rec, current, alias_seen)
    return batches


def _decode_line(n: int, line: str, decode: Callable[[str], Any]) -> dict[str, Any]:
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


def _took_plain_association(n: int, line: str, rec: dict[str, Any], current: Batch) -> bool:
    """Append a common, plainly valid association line to the batch; False leaves it to the full checks."""
    if "subject" not in rec or not rec.keys() <= _ASSOC_KEYS or "\\ud" in line or "\\uD" in line:
        return False  # surrogate escapes take the full checks, which also word any refusal
    s = rec.get("subject")
    lab = rec.get("label")
    o = rec.get("object")
    w = rec.get("weight")
    p = rec.get("paragraph")
    short = _FAST_NAME_CHARS
    if not (
        type(s) is str
        and type(lab) is str
        and type(o) is str
        and 0 < len(s) <= short
        and 0 < len(lab) <= short
        and 0 < len(o) <= short
        and type(w) is float
        and -MAX_WEIGHT <= w <= MAX_WEIGHT
        and (p is None or (type(p) is int and 0 <= p <= MAX_U32))
    ):
        return False
    current.last_line = n
    if p is not None and current.needs_passage_line is None:
        current.needs_passage_line = n
    current.associations.append((s, lab, o, w, p))
    return True


def _open_batch(n: int, rec: dict[str, Any], seen: set[tuple[str, str]]) -> Batch:
    """A new batch from its header line, refusing a source stated twice in the stream."""
    batch = _header(n, rec)
    key = (batch.context, batch.source)
    if key in seen:
        raise ParseError(
            f"line {n}: source '{batch.source}' in context '{batch.context}' is already stated by an "
            "earlier batch of this stream — one batch owns one source's truth"
        )
    seen.add(key)
    return batch


def _parse_op_line(n: int, rec: dict[str, Any], current: Batch | None, alias_seen: set[tuple[int, str]]) -> None:
    """Classify one non-header line and add it to the current batch."""
    if "taguru_schema" in rec:  # (group records are read by `parse_stream` before this)
        raise ParseError(f"line {n}: schema records are not supported by this server")
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


def check_batches(batches: list[Batch], has_groups: bool = False) -> None:
    """The whole-stream checks `parse_stream` ends with (paragraph references, an empty stream)."""
    _check_paragraph_references(batches, has_groups)


def _check_paragraph_references(batches: list[Batch], has_groups: bool = False) -> None:
    """Refuse a batch that cites paragraphs without a passage, and an empty stream."""
    for b in batches:
        if b.needs_passage_line is not None and b.passage is None:
            raise ParseError(
                f"line {b.needs_passage_line}: a paragraph reference needs a passage line in the same batch"
            )
    if not batches and not has_groups:
        raise ParseError("empty file: expected a batch header, schema record, or group record line")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range")
    return value


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _display(w: int | float) -> str:
    if isinstance(w, int):
        return str(w)
    if w != w or w in (float("inf"), float("-inf")):
        return "NaN" if w != w else ("inf" if w > 0 else "-inf")  # Rust's Display
    if w == int(w):
        # Rust's Display: shortest round-trip digits written positionally, no fraction
        return str(int(w)) if abs(w) < 2**53 else np.format_float_positional(w, unique=True, trim="-")
    return format_number(w)


def _header(n: int, rec: dict[str, Any]) -> Batch:
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
    def floor(v: Any) -> float | None:
        return None if v is None else min(max(float(v), 0.0), 1.0)

    return Meta(
        description=create.get("description", ""),
        pinned=bool(create.get("pinned", False)),
        dice_floor=floor(create.get("dice_floor")),
        semantic_floor=floor(create.get("semantic_floor")),
    )


# ----- apply -----------------------------------------------------------------------


def _alias_refusal(ctx: Context | None, batch: Batch, index: int) -> ApiError | None:
    """Step 1: refuse the batch before anything is written if an alias cannot land."""
    if not batch.aliases:
        return None
    used_sets: list[tuple[set[str], set[str]]] = []

    def used(kind: int) -> set[str]:
        if not used_sets:
            used_sets.append(
                (
                    {s for s, _l, _o, _w, _p in batch.associations} | {o for _s, _l, o, _w, _p in batch.associations},
                    {lab for _s, lab, _o, _w, _p in batch.associations},
                )
            )
        return used_sets[0][kind]

    pending: tuple[dict[str, str], dict[str, str]] = ({}, {})
    for kind in (CONCEPT, LABEL):
        for _k, alias, canonical in sorted(a for a in batch.aliases if a[0] == kind):
            word = "concept" if kind == CONCEPT else "label"
            path = f"batches[{index}].{word}s['{alias}']"
            find = None if ctx is None else (ctx.find_concept if kind == CONCEPT else ctx.find_label)
            target_known = (
                (find is not None and find(canonical) is not None)
                or canonical in used(kind)
                or canonical in pending[kind]
            )
            if not target_known:
                return ApiError(
                    Code.CONFLICT,
                    f"{word} alias '{alias}' → '{canonical}': the canonical spelling is not interned; "
                    "nothing was applied",
                    issues=[
                        Issue(
                            path,
                            "unknown_reference",
                            f"'{canonical}' already interned as a concept or label this batch's associations use",
                            "not present in this request",
                        )
                    ],
                    retryable=True,
                )
            root = pending[kind].get(canonical, canonical)
            current_alias = find(alias) if find is not None else None
            current_root = find(root) if find is not None else None
            clash = False
            if current_alias is not None:
                clash = current_root is None or current_alias != current_root
            elif alias in used(kind) or alias in pending[kind].values():
                clash = alias != root
            if clash:
                return ApiError(
                    Code.CONFLICT,
                    f"{word} alias '{alias}' → '{canonical}': the alias already resolves to a different record; "
                    "nothing was applied",
                    issues=[
                        Issue(path, "conflict", f"resolves to '{canonical}'", "already resolves to a different record")
                    ],
                    retryable=True,
                )
            pending[kind][alias] = root
    return None


def _outcome(batch: Batch, created: bool) -> dict[str, Any]:
    return {
        "context": batch.context,
        "source": batch.source,
        "created": created,
        "retracted": 0,
        "associations": 0,
        "aliases": 0,
        "passage_stored": False,
        "passage_dropped": False,
        "questions_stored": 0,
        "questions_dropped": 0,
        "sections_stored": 0,
        "sections_dropped": 0,
        "locators_stored": 0,
        "locators_dropped": 0,
        "association_paragraphs_dropped": 0,
        "schema_violations": 0,
    }


def predict(ctx: Context | None, batch: Batch, created: bool) -> dict[str, Any]:
    """What applying the batch would report, computed without writing."""
    out = _outcome(batch, created)
    sid = ctx.find_source(batch.source) if ctx is not None else None
    if ctx is not None and sid is not None:
        out["retracted"] = len(ctx.source_edges.get(sid, ()))
        out["passage_dropped"] = batch.passage is None and sid in ctx.passages
    n = len(split_paragraphs(batch.passage)) if batch.passage is not None else 0
    if batch.passage is not None:
        out["passage_stored"] = True
        kept_q = sum(1 for p, _q in batch.questions if p < n)
        out["questions_stored"], out["questions_dropped"] = kept_q, len(batch.questions) - kept_q
        for key, markers in (("sections", batch.sections), ("locators", batch.locators)):
            kept = {m[0] for m in markers if m[0] < n}
            out[f"{key}_stored"], out[f"{key}_dropped"] = len(kept), len(markers) - len(kept)
    out["associations"] = len(batch.associations)
    seen_records: set[tuple[str, str, str]] = set()
    dropped = 0
    for s, lab, o, _w, p in batch.associations:
        if (s, lab, o) in seen_records:
            continue
        seen_records.add((s, lab, o))
        if p is not None and p >= n:
            dropped += 1
    out["association_paragraphs_dropped"] = dropped
    out["aliases"] = len(batch.aliases)
    return out


FEED_CHUNK = 10_000
"""Associations per `associations_added` change-feed event of an import batch."""


def apply_batch(ctx: Context, batch: Batch, created: bool, now: int) -> dict[str, Any]:
    """Steps 3-6 of one batch on a context that exists (or was just created)."""
    out = _outcome(batch, created)
    sid = ctx.find_source(batch.source)
    if sid is not None:
        had_passage = sid in ctx.passages
        touched, _removed = ctx.retract_source(batch.source)
        out["retracted"] = touched
        out["passage_dropped"] = had_passage and batch.passage is None
    if batch.passage is not None:
        counts = ctx.store_passage(
            batch.source,
            batch.passage,
            batch.questions,
            batch.sections,
            batch.locators,
            batch.tags,
            batch.stored_at if batch.stored_at is not None else now,
            batch.date,
        )
        out["passage_stored"] = True
        out["questions_stored"] = counts.questions_stored
        out["questions_dropped"] = counts.questions_dropped
        out["sections_stored"] = counts.sections_stored
        out["sections_dropped"] = counts.sections_dropped
        out["locators_stored"] = counts.locators_stored
        out["locators_dropped"] = counts.locators_dropped
    dropped = 0
    for start in range(0, len(batch.associations), FEED_CHUNK):  # one feed event per chunk, as the reference
        chunk = batch.associations[start : start + FEED_CHUNK]
        dropped += ctx.assert_many(chunk, batch.source)
        ctx.emit("associations_added", count=len(chunk))
    out["associations"] = len(batch.associations)
    out["association_paragraphs_dropped"] = dropped
    for kind in (CONCEPT, LABEL):
        for _k, alias, canonical in sorted(a for a in batch.aliases if a[0] == kind):
            ctx.add_alias(kind, alias, canonical)
    if batch.aliases:
        ctx.emit("aliases_added", count=len(batch.aliases))
    out["aliases"] = len(batch.aliases)
    if batch.associations or batch.aliases or batch.passage is not None or out["retracted"] or out["passage_dropped"]:
        ctx.meta.record_write()
    return out


def run_import(
    registry: Registry,
    batches: list[Batch],
    *,
    dry_run: bool = False,
    commit_every: int = 512,
    deadline: float | None = None,
    timeout_secs: int = 30,
    on_commit: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Apply batches in order, committing in groups; a refusal keeps the landed prefix."""
    # A bulk load creates millions of long-lived objects and no reference cycles worth
    # collecting meanwhile; the cyclic collector would re-scan them over and over.
    with collector_paused():
        return _run_import(
            registry,
            batches,
            dry_run=dry_run,
            commit_every=commit_every,
            deadline=deadline,
            timeout_secs=timeout_secs,
            on_commit=on_commit,
        )


def _run_import(
    registry: Registry,
    batches: list[Batch],
    *,
    dry_run: bool,
    commit_every: int,
    deadline: float | None,
    timeout_secs: int,
    on_commit: Callable[[int], None] | None,
) -> list[dict[str, Any]]:
    outcomes: list[dict[str, Any]] = []
    pending: list[Context] = []
    will_exist: set[str] = set()
    total = len(batches)
    now = int(time.time())
    landed = 0

    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    def refuse_late() -> ApiError:
        # past the budget nothing more is committed: what is not durable yet is undone, and the
        # refusal names the durable prefix (a write is never answered 200 after its deadline)
        registry.rollback(pending)
        return _prefixed(timed_out(timeout_secs), landed, total, batches[landed], dry_run)

    def flush() -> None:
        nonlocal landed, pending
        if pending:
            if late():
                raise refuse_late()
            registry.commit(pending)
            pending = []
        landed = len(outcomes)
        if on_commit is not None:
            on_commit(landed)

    for i, batch in enumerate(batches):
        if late():
            if dry_run:
                raise _prefixed(timed_out(timeout_secs), i, total, batch, dry_run)
            raise refuse_late()
        ctx = registry.get(batch.context)
        exists = ctx is not None or (dry_run and batch.context in will_exist)
        refusal = _alias_refusal(ctx, batch, i)
        if refusal is None and not exists and batch.create is None:
            refusal = ApiError(
                Code.NO_CONTEXT,
                f"context '{batch.context}' does not exist and the batch brought no create block",
                issues=[
                    Issue(
                        f"batches[{i}].create",
                        "missing",
                        "a create block, since the named context does not exist yet",
                        "absent",
                    )
                ],
                retryable=True,
            )
        if refusal is not None:
            if not dry_run:
                flush()
            raise _prefixed(refusal, i, total, batch, dry_run)
        if dry_run:
            created = not exists
            will_exist.add(batch.context)
            outcomes.append(predict(ctx, batch, created))
            continue
        created = ctx is None
        if ctx is None:
            assert batch.create is not None
            ctx = registry.create(batch.context, meta_from_create(batch.create))
        try:
            outcomes.append(apply_batch(ctx, batch, created, now))
        except Exception:
            registry.rollback(pending + [ctx])
            raise
        pending.append(ctx)
        if (i + 1) % commit_every == 0:
            flush()
    if not dry_run:
        flush()
    return outcomes


def _prefixed(err: ApiError, i: int, total: int, batch: Batch, dry_run: bool) -> ApiError:
    if total > 1:
        if dry_run:
            prefix = (
                f"batch {i + 1} of {total} (context '{batch.context}', source '{batch.source}') would be refused — "
                f"the {i} batch(es) before it previewed clean (dry_run=true; nothing is written); fixing the stream "
                "and re-running the preview is exact: "
            )
        else:
            prefix = (
                f"batch {i + 1} of {total} (context '{batch.context}', source '{batch.source}') refused — the {i} "
                "batch(es) before it landed durably; fixing the stream and re-POSTing it whole is exact (each batch "
                "replaces its own source): "
            )
        err.message = prefix + err.message
        err.args = (err.message,)
    if i >= 1 and not dry_run:
        err.integrity = "durable_prefix"
        err.durable_batches = i
    else:
        err.integrity = "nothing_written"
    return err
