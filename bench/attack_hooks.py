"""Schemathesis hooks for the attack run: how generated bodies go on the wire.

- `POST /import` bodies (the array of a JSONL stream's records) go as JSONL: one record per line.
- A whole number up to 2**53 that the generator holds as a float (`2.0`) is written as the integer
  it is (`2`). JSON Schema cannot tell the two spellings apart, and the contract can: an unsigned
  field refuses `2.0` with a 422, as serde does (evidence spec §3.4: "`2.5` or `2.0` → invalid
  type: floating point"). Only the spelling changes; the value, and so the case's validity under
  the document, stay the same.
- A positive case (one the document says is valid) is brought within what the document can only
  say in words: a `maxLength` is a byte cap (the server counts UTF-8 bytes, JSON Schema counts
  characters), so its strings are cut to that many bytes; and the rules between two values of one
  body (`RULES`, each naming the operation, the rule and the refusal it avoids). A case stays
  valid under the document. Negative cases are sent as generated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import schemathesis

EXACT = 2**53
MAX_U64 = 2**64 - 1


def integral(value: Any) -> Any:
    """`value` with every whole float of at most 2**53 in magnitude as an int."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= EXACT:
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


def window(body: Any) -> Any:
    """`since` before `until` when both are given (else 400: "since … is not before until …")."""
    if isinstance(body, dict):
        since, until = body.get("since"), body.get("until")
        if type(since) is int and type(until) is int and since >= until:
            low, high = min(since, until), max(since, until)
            if low == high:
                low, high = (low, high + 1) if high < MAX_U64 else (low - 1, high)
            body = {**body, "since": low, "until": high}
    return body


def distinct_tags(body: Any) -> Any:
    """At most 32 distinct filter tags (else 400 over_limit)."""
    if isinstance(body, dict) and isinstance(body.get("tags"), list):
        tags = body["tags"]
        kept = list(dict.fromkeys(tags))[:32]
        body = {**body, "tags": [t for t in tags if t in kept]}
    return body


def source_filter(body: Any) -> Any:
    return distinct_tags(window(body))


MARKER_MAPS = ("questions", "sections", "locators", "tags", "dates")


def passage_references(body: Any) -> Any:
    """Per-source maps name only this request's passages, and a paragraph carries at most 8 questions
    (else 400 `unknown_reference` / `over_limit` issues)."""
    if not isinstance(body, dict) or not isinstance(body.get("passages"), dict):
        return body
    sources = body["passages"]
    out = dict(body)
    for key in MARKER_MAPS:
        if isinstance(body.get(key), dict):
            out[key] = {src: v for src, v in body[key].items() if src in sources}
    if isinstance(out.get("questions"), dict):
        out["questions"] = {src: _eight_per_paragraph(v) for src, v in out["questions"].items()}
    return out


def _eight_per_paragraph(markers: Any) -> Any:
    if not isinstance(markers, list):
        return markers
    seen: dict[Any, int] = {}
    kept = []
    for m in markers:
        p = m.get("paragraph") if isinstance(m, dict) else None
        seen[p] = seen.get(p, 0) + 1
        if seen[p] <= 8:
            kept.append(m)
    return kept


def fit(text: str, cap: int) -> str:
    """`text` cut to at most `cap` UTF-8 bytes at a character boundary (never to nothing)."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= cap:
        return text
    return raw[:cap].decode("utf-8", "ignore") or text[:1]


def byte_caps(value: Any, schema: Any, doc: dict[str, Any]) -> Any:
    """`value` with every string cut to its schema's `maxLength` counted in UTF-8 bytes, as the server
    counts it (property names by `propertyNames`; every branch of a combination is applied)."""
    while isinstance(schema, dict) and "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    if not isinstance(schema, dict):
        return value
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(key, ()):
            value = byte_caps(value, branch, doc)
    cap = schema.get("maxLength")
    if isinstance(value, str) and isinstance(cap, int):
        return fit(value, cap)
    if isinstance(value, dict):
        props, extra, names = (
            schema.get("properties", {}),
            schema.get("additionalProperties"),
            schema.get("propertyNames"),
        )
        return {byte_caps(k, names, doc): byte_caps(v, props.get(k, extra), doc) for k, v in value.items()}
    if isinstance(value, list):
        prefix, items = schema.get("prefixItems", []), schema.get("items")
        return [byte_caps(v, prefix[i] if i < len(prefix) else items, doc) for i, v in enumerate(value)]
    return value


MARKERS = ("question", "section", "locator")


def _kind(record: dict[str, Any]) -> str:
    """The importer's classification of a line (`store/transfer/importer.py`: header, group, then the op-line keys)."""
    for key in ("taguru_batch", "taguru_group", "subject", "alias", "passage", "question", "section", "locator"):
        if key in record:
            return key
    return ""


class _Batch:
    def __init__(self, header: dict[str, Any]) -> None:
        self.lines = [header]
        self.passage = False
        self.aliases: set[tuple[Any, Any]] = set()
        self.questions: dict[Any, int] = {}

    def admit(self, record: dict[str, Any], kind: str) -> bool:
        if kind == "passage":
            if self.passage:
                return False
            self.passage = True
        elif kind == "alias":
            key = (record.get("kind"), record.get("alias"))
            if key in self.aliases:
                return False
            self.aliases.add(key)
        elif kind == "question":
            p = record.get("paragraph")
            self.questions[p] = self.questions.get(p, 0) + 1
            if self.questions[p] > 8:
                return False
        self.lines.append(record)
        return True

    def records(self) -> list[dict[str, Any]]:
        """Its lines; without a passage line, none that references a paragraph."""
        if self.passage:
            return self.lines
        kept = []
        for record in self.lines:
            kind = _kind(record)
            if kind in MARKERS:
                continue
            if kind == "subject" and record.get("paragraph") is not None:
                record = {k: v for k, v in record.items() if k != "paragraph"}
            kept.append(record)
        return kept


def import_stream(body: Any) -> Any:
    """The rules between a stream's lines (refused with a 400 naming the line), kept by dropping lines:
    op lines outside a batch, a (context, source) or group stated twice, a second passage line or alias
    statement in a batch, a ninth question on a paragraph; and paragraph references in a batch without
    a passage line. A group record loses itself as a child (a cycle)."""
    if not isinstance(body, list):
        return body
    parts: list[_Batch | dict[str, Any]] = []
    headers: set[tuple[Any, Any]] = set()
    names: set[Any] = set()
    batch: _Batch | None = None
    for record in body:
        if not isinstance(record, dict):
            return body  # not a stream the document describes
        kind = _kind(record)
        if kind == "taguru_batch":
            key = (record.get("context"), record.get("source"))
            batch = None if key in headers else _Batch(record)
            if batch is not None:
                headers.add(key)
                parts.append(batch)
        elif kind == "taguru_group":
            batch = None
            if record.get("name") not in names:
                names.add(record.get("name"))
                if isinstance(record.get("groups"), list):
                    record = {**record, "groups": [g for g in record["groups"] if g != record.get("name")]}
                parts.append(record)
        elif batch is not None:
            batch.admit(record, kind)
    return [line for part in parts for line in (part.records() if isinstance(part, _Batch) else [part])]


def acyclic_types(document: Any) -> Any:
    """A schema document whose `is_a` parents are declared-later-free: each type may only name types that
    sort before it or are undeclared, and no chain is deeper than 8 (else 400: a cycle, a deep chain)."""
    if not isinstance(document, dict) or not isinstance(document.get("types"), dict):
        return document
    types = document["types"]
    depth: dict[str, int] = {}
    kept: dict[str, Any] = {}
    for name in sorted(types):
        entry = types[name]
        if not isinstance(entry, dict) or not isinstance(entry.get("is_a"), list):
            kept[name] = entry
            depth[name] = 1
            continue
        parents = [p for p in entry["is_a"] if not (isinstance(p, str) and p in types and (p >= name or depth[p] >= 8))]
        depth[name] = 1 + max((depth[p] for p in parents if isinstance(p, str) and p in depth), default=0)
        kept[name] = {**entry, "is_a": parents}
    return {**document, "types": kept}


def validated_document(body: Any) -> Any:
    if isinstance(body, dict) and "document" in body:
        return {**body, "document": acyclic_types(body["document"])}
    return body


RULES: dict[str, Callable[[Any], Any]] = {
    "PUT /contexts/{name}/schema": acyclic_types,
    "POST /contexts/{name}/schema/validate": validated_document,
    "POST /import": import_stream,
    "POST /contexts/{name}/sources/search": source_filter,
    "POST /contexts/{name}/recall": window,
    "POST /contexts/{name}/query": window,
    "POST /contexts/{name}/activate": window,
    "POST /contexts/{name}/explore": window,
    "POST /contexts/{name}/sources/search/explain": source_filter,
    "POST /sources/search": source_filter,
    "POST /contexts/{name}/sources": passage_references,
}


def _prepared(ctx: Any, value: Any, media_type: str) -> Any:
    case = ctx.case
    value = integral(value)
    if case.meta is not None and case.meta.generation.mode.is_positive:
        operation = case.operation
        schema = operation.definition.raw["requestBody"]["content"][media_type]["schema"]
        value = byte_caps(value, schema, operation.schema.raw_schema)
        rule = RULES.get(operation.label)
        if rule is not None:
            value = rule(value)
    return value


@schemathesis.serializer("application/json")
def json_body(ctx: Any, value: Any) -> bytes:
    if isinstance(value, bytes):  # a raw body (an explicit example, or a deliberately broken one)
        return value
    return json.dumps(_prepared(ctx, value, "application/json")).encode("utf-8")


@schemathesis.serializer("application/x-ndjson")
def jsonl_body(ctx: Any, value: Any) -> bytes:
    """An array as one JSON line per item; anything else (a negative case) as its one JSON line."""
    if isinstance(value, bytes):
        return value
    value = _prepared(ctx, value, "application/x-ndjson")
    lines = value if isinstance(value, list) else [value]
    return "".join(json.dumps(line) + "\n" for line in lines).encode("utf-8")
