"""A context's schema document: its normalized form, the install checks, and the `is_a` closures.

A context holds at most one document. It is stored normalized (lists deduplicated and sorted,
maps sorted by key) as the compact JSON of its serialized form, with the context's metadata, so
"the same document" is the same text. The write-time check and the type reads are in
`schema_check.py`; the typed request shapes in `server/wire/schema.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from taguru_server.store.text import utf8_len

SCHEMA_VERSION = 1
SCHEMA_TYPE = "schema:type"  # the reserved label of type assertions
MODES = ("off", "warn", "strict")
MAX_SCHEMA_TYPES = 500
MAX_SCHEMA_RELATIONS = 500
MAX_RELATION_TYPES = 64
MAX_TYPE_DEPTH = 8
MAX_NAME_BYTES = 1024
MAX_ISSUE_TYPE_NAMES = 8
MAX_AUDIT_NAMES = 100
RESERVED_WHY = "the relation label reserved for type assertions (ADR 0009 \u00a76.3)"  # as the wire spells it


class SchemaRefused(Exception):
    """An install check failed; the message is the whole refusal text."""


@attrs.frozen
class Relation:
    """The types a label's subject (`domain`) and object (`range`) must meet, or a subtype; empty is no rule."""

    domain: frozenset[str]
    range: frozenset[str]


@attrs.frozen
class Schema:
    """An installed (or proposed) document, normalized, with every declared type's ancestors."""

    mode: str
    closed_labels: bool
    types: Mapping[str, tuple[str, ...]]  # type name → its sorted `is_a`
    relations: Mapping[str, Relation]
    ancestors: Mapping[str, frozenset[str]]  # declared type → every type it `is_a`, transitively

    def closure(self, type_name: str) -> frozenset[str]:
        """The type and everything it is (an undeclared type is just itself)."""
        return self.ancestors.get(type_name, frozenset()) | {type_name}

    def document(self) -> dict[str, Any]:
        """The serialized form: fixed key order, maps by key, lists sorted, empty lists included."""
        return {
            "schema": SCHEMA_VERSION,
            "mode": self.mode,
            "closed_labels": self.closed_labels,
            "types": {name: {"is_a": list(is_a)} for name, is_a in self.types.items()},
            "relations": {
                label: {"domain": sorted(r.domain), "range": sorted(r.range)} for label, r in self.relations.items()
            },
        }

    def text(self) -> str:
        """The compact JSON of the serialized form: what is stored, and what "identical" compares."""
        return json.dumps(self.document(), ensure_ascii=False, separators=(",", ":"))

    def with_mode(self, mode: str) -> Schema:
        return attrs.evolve(self, mode=mode)


def install(
    version: int,
    mode: str,
    closed_labels: bool,
    types: Mapping[str, Sequence[str]],
    relations: Mapping[str, tuple[Sequence[str], Sequence[str]]],
) -> Schema:
    """A decoded document, normalized and checked as an install checks it (first failure wins)."""
    norm_types = {name: tuple(sorted(set(types[name]))) for name in sorted(types)}
    norm_relations = {
        label: Relation(frozenset(relations[label][0]), frozenset(relations[label][1])) for label in sorted(relations)
    }
    if version != SCHEMA_VERSION:
        raise SchemaRefused(f"schema version {version} is not 1, the only version this binary reads")
    if len(norm_types) > MAX_SCHEMA_TYPES:
        raise SchemaRefused(f"{len(norm_types)} types is over the 500-type cap")
    if len(norm_relations) > MAX_SCHEMA_RELATIONS:
        raise SchemaRefused(f"{len(norm_relations)} relations is over the 500-relation cap")
    if SCHEMA_TYPE in norm_relations:
        raise SchemaRefused("relation 'schema:type' is reserved for type assertions — rename it")
    _check_name_sizes(norm_types, norm_relations)
    for label, rel in norm_relations.items():
        for side, names in (("domain", rel.domain), ("range", rel.range)):
            if len(names) > MAX_RELATION_TYPES:
                raise SchemaRefused(
                    f"relation '{label}' names {len(names)} {side} types, over the {MAX_RELATION_TYPES}-type cap"
                )
    ancestors = type_ancestors({name: set(is_a) for name, is_a in norm_types.items()})
    return Schema(mode, closed_labels, norm_types, norm_relations, ancestors)


def _check_name_sizes(types: Mapping[str, tuple[str, ...]], relations: Mapping[str, Relation]) -> None:
    names: list[str] = [*types, *relations]
    for is_a in types.values():
        names.extend(is_a)
    for rel in relations.values():
        names.extend(sorted(rel.domain))
        names.extend(sorted(rel.range))
    for name in names:
        if utf8_len(name) > MAX_NAME_BYTES:
            raise SchemaRefused(f"'{name}' is over the {MAX_NAME_BYTES}-byte name cap")


class _Cycle(Exception):
    pass


class _TooDeep(Exception):
    pass


def type_ancestors(types: Mapping[str, set[str]]) -> dict[str, frozenset[str]]:
    """Every declared type's ancestors, by one memoized walk in name order; a cycle or a chain deeper
    than MAX_TYPE_DEPTH is refused naming the type the walk blames (the top of the chain it was walking)."""
    settled: dict[str, tuple[int, frozenset[str]]] = {}
    visiting: list[str] = []

    def walk(name: str) -> tuple[int, frozenset[str]]:
        if name in settled:
            return settled[name]
        if name in visiting:
            raise _Cycle(name)
        if len(visiting) >= MAX_TYPE_DEPTH:
            raise _TooDeep(visiting[0])
        visiting.append(name)
        depth, found = 1, set()
        for parent in sorted(types[name]):
            found.add(parent)
            if parent in types:  # an undeclared parent is a leaf: added, not walked
                p_depth, p_found = walk(parent)
                depth = max(depth, p_depth + 1)
                found |= p_found
        visiting.pop()
        if depth > MAX_TYPE_DEPTH:
            raise _TooDeep(visiting[0] if visiting else name)
        settled[name] = (depth, frozenset(found))
        return settled[name]

    try:
        for name in sorted(types):
            walk(name)
    except _Cycle as cycle:
        raise SchemaRefused(f"type '{cycle.args[0]}' is_a reaches itself through a cycle") from None
    except _TooDeep as deep:
        raise SchemaRefused(
            f"the is_a chain under type '{deep.args[0]}' stacks more than {MAX_TYPE_DEPTH} types"
        ) from None
    return {name: found for name, (_depth, found) in settled.items()}


def from_document(doc: Mapping[str, Any]) -> Schema:
    """A schema from a decoded document (`server/wire/schema.py`'s shape, or a stored text's)."""
    return install(
        doc["schema"],
        doc["mode"],
        doc["closed_labels"],
        {name: (entry.get("is_a") or []) for name, entry in doc["types"].items()},
        {label: (entry.get("domain") or [], entry.get("range") or []) for label, entry in doc["relations"].items()},
    )


_LOADED: dict[str, Schema] = {}


def stored(text: str) -> Schema:
    """The schema a stored text holds (memoized by text: contexts share identical documents)."""
    got = _LOADED.get(text)
    if got is None:
        if len(_LOADED) > 256:
            _LOADED.clear()
        got = _LOADED[text] = from_document(json.loads(text))
    return got


def join_capped(names: Sequence[str]) -> str:
    """Sorted names for an issue text: at most MAX_ISSUE_TYPE_NAMES, then how many more."""
    if len(names) <= MAX_ISSUE_TYPE_NAMES:
        return ", ".join(names)
    rest = len(names) - MAX_ISSUE_TYPE_NAMES
    return ", ".join(names[:MAX_ISSUE_TYPE_NAMES]) + f", … (+{rest} more)"
