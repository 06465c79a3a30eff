"""`taguru_schema` stream records: one context's schema document on one line, read and written.

A record is closed (six keys, each required) and installs after every batch of its stream (before
the group records), onto a context that must exist by then; one record owns one context's schema
per stream. Export writes one as the first line of a context whose schema mode is not `off`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import attrs

from taguru_server.store.errors import ApiError, Code, Issue
from taguru_server.store.model.context import Context
from taguru_server.store.model.operations import install_schema
from taguru_server.store.model.schema import MODES, RESERVED_WHY, SCHEMA_TYPE, Schema, SchemaRefused, from_document
from taguru_server.store.model.schema_check import label_alias_canonicals
from taguru_server.store.persist.registry import Registry
from taguru_server.store.text import name_problem
from taguru_server.store.transfer.import_records import ParseError

RECORD_KEYS = ("taguru_schema", "context", "mode", "closed_labels", "types", "relations")
MAX_CONTEXT_BYTES = 64


@attrs.frozen
class SchemaRecord:
    """One parsed record: its line, the context it names and the checked document."""

    line: int
    context: str
    schema: Schema


def _shape_problem(rec: dict[str, Any]) -> str | None:
    """Why `rec` is not the record's shape (the wording is this server's own), or None."""
    unknown = sorted(set(rec) - set(RECORD_KEYS))
    if unknown:
        return f"unknown field `{unknown[0]}`"
    for key in RECORD_KEYS:
        if rec.get(key) is None:
            return f"missing field `{key}`"
    version = rec["taguru_schema"]
    if type(version) is not int or version < 0:
        return "taguru_schema must be a non-negative integer"
    if not isinstance(rec["context"], str):
        return "context must be a string"
    if rec["mode"] not in MODES or not isinstance(rec["mode"], str):
        return "mode must be one of off, warn, strict"
    if type(rec["closed_labels"]) is not bool:
        return "closed_labels must be a boolean"
    return _entries_problem(rec["types"], ("is_a",), "types") or _entries_problem(
        rec["relations"], ("domain", "range"), "relations"
    )


def _entries_problem(value: Any, fields: tuple[str, ...], what: str) -> str | None:
    if not isinstance(value, dict):
        return f"{what} must be an object"
    for name, entry in value.items():
        if not isinstance(entry, dict):
            return f"{what} entry '{name}' must be an object"
        extra = sorted(set(entry) - set(fields))
        if extra:
            return f"unknown field `{extra[0]}` in {what} entry '{name}'"
        for field in fields:
            items = entry.get(field, [])
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                return f"{what} entry '{name}': {field} must be an array of strings"
    return None


def parse_schema_record(n: int, rec: dict[str, Any], stated: set[str]) -> SchemaRecord:
    """A `taguru_schema` line, checked in the record's order; `stated` holds the contexts earlier records named."""
    problem = _shape_problem(rec)
    if problem is not None:
        raise ParseError(f"line {n}: not a schema record: {problem}")
    if rec["taguru_schema"] != 1:
        raise ParseError(
            f"line {n}: taguru_schema {rec['taguru_schema']} is not a version this taguru reads (it reads 1)"
        )
    context = rec["context"]
    problem = name_problem("context", context, MAX_CONTEXT_BYTES)
    if problem is not None:
        raise ParseError(f"line {n}: {problem}")
    try:
        schema = from_document({**rec, "schema": 1})
    except SchemaRefused as exc:
        raise ParseError(f"line {n}: {exc}") from None
    if context in stated:
        raise ParseError(
            f"line {n}: context '{context}' schema is already stated by an earlier record of this stream — one "
            "record owns one context's schema"
        )
    stated.add(context)
    return SchemaRecord(n, context, schema)


def record_line(context: str, schema: Schema) -> str:
    """The compact record line export writes (keys in the record's order)."""
    doc = schema.document()
    record = {
        "taguru_schema": 1,
        "context": context,
        "mode": doc["mode"],
        "closed_labels": doc["closed_labels"],
        "types": doc["types"],
        "relations": doc["relations"],
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


@attrs.frozen
class SchemaOutcome:
    """One installed record: its context, mode and how many types and relations its document declares."""

    context: str
    mode: str
    types: int
    relations: int


def reserved_alias(ctx: Context) -> str | None:
    """The first persisted label alias (registration order) whose canonical is `schema:type`."""
    return next((a for a, c in label_alias_canonicals(ctx).items() if c == SCHEMA_TYPE), None)


def _landed(err: ApiError, batches: int, installed: int) -> ApiError:
    """Integrity of a record's refusal: nothing written only when no batch and no earlier record landed."""
    err.integrity = "nothing_written" if batches == 0 and installed == 0 else "durable_prefix"
    err.durable_batches = batches or None
    return err


def install_records(
    registry: Registry,
    records: list[SchemaRecord],
    batches: int,
    deadline: float | None = None,
    on_commit: Callable[[], None] | None = None,
) -> list[SchemaOutcome]:
    """Install each record in stream order, each a PUT of its document (an identical one changes nothing);
    the first refusal stops the rest (the records before it stay installed)."""
    out: list[SchemaOutcome] = []
    for i, rec in enumerate(records):
        if deadline is not None and time.monotonic() > deadline:
            raise _landed(
                ApiError(
                    Code.TIMEOUT,
                    f"schema record {i + 1} of {len(records)} (context '{rec.context}') not attempted — request "
                    "exceeded its budget partway through a multi-record schema install (TAGURU_REQUEST_TIMEOUT_SECS "
                    "tunes this); every batch and schema record before it is durable",
                ),
                batches,
                i,
            )
        ctx = registry.get(rec.context)
        if ctx is None:
            raise _landed(missing_context(rec.context), batches, i)
        alias = reserved_alias(ctx)
        if alias is not None:
            raise _landed(
                ApiError(
                    Code.INVALID_ARGUMENT,
                    f"schema record: context '{rec.context}' {reserved_alias_text(alias)} — nothing past this point "
                    "was applied",
                    retryable=True,
                ),
                batches,
                i,
            )
        out.append(_install(registry, ctx, rec, on_commit))
    return out


def _install(
    registry: Registry, ctx: Context, rec: SchemaRecord, on_commit: Callable[[], None] | None
) -> SchemaOutcome:
    if install_schema(ctx, rec.schema):
        registry.commit([ctx])
        if on_commit is not None:
            on_commit()
    return SchemaOutcome(rec.context, rec.schema.mode, len(rec.schema.types), len(rec.schema.relations))


def install_one(registry: Registry, rec: SchemaRecord) -> SchemaOutcome | str:
    """One record, on its own (the offline import: a failure does not stop the next): the outcome, or why not."""
    ctx = registry.get(rec.context)
    if ctx is None:
        return f"does not exist — {MUST_EXIST}"
    alias = reserved_alias(ctx)
    if alias is not None:
        return reserved_alias_text(alias)
    return _install(registry, ctx, rec, None)


def missing_context(context: str) -> ApiError:
    return ApiError(
        Code.NO_CONTEXT,
        f"schema record: context '{context}' does not exist — {MUST_EXIST} — nothing past this point was applied",
        issues=[
            Issue(
                f"context '{context}'",
                "missing",
                "an earlier batch of this stream (or a previous request) creating it, since a schema record's "
                "context must already exist",
                "absent",
            )
        ],
        retryable=True,
    )


MUST_EXIST = (
    "a schema record's context must already exist (created by an earlier batch of the same stream, or previously) "
    "before its schema can install"
)


def reserved_alias_text(alias: str) -> str:
    return (
        f"label alias '{alias}' resolves to 'schema:type', {RESERVED_WHY} — rename the alias before installing "
        "this schema"
    )
