"""The wire shapes of the schema routes: the document (closed at every level), validate's and audit's bodies."""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import Field, Spec
from taguru_server.server.wire.json_schema import INT, STR, STRS, obj, ref
from taguru_server.server.wire.specs import CURSOR
from taguru_server.store.model.schema import (
    MAX_NAME_BYTES,
    MAX_RELATION_TYPES,
    MAX_SCHEMA_RELATIONS,
    MAX_SCHEMA_TYPES,
    MODES,
    SCHEMA_TYPE,
)

# The install checks as published keywords (a cycle or an is_a chain deeper than 8 is refused too, which
# JSON Schema cannot say). A `maxLength` is the handler's cap in UTF-8 bytes.
_NAME = {"maxLength": MAX_NAME_BYTES}
_TYPE_NAMES = {"items": {"type": "string", **_NAME}}
TYPE_ENTRY = Spec(
    "TypeDecl",
    (
        Field(
            "is_a",
            "strings",
            "the types this one is (a subtype of)",
            default=[],
            null_is_absent=False,
            rules=_TYPE_NAMES,
        ),
    ),
    closed=True,
)
_SIDE = {**_TYPE_NAMES, "maxItems": MAX_RELATION_TYPES}
RELATION_ENTRY = Spec(
    "RelationDecl",
    (
        Field(
            "domain",
            "strings",
            "types the subject must meet (or a subtype); empty: any",
            default=[],
            null_is_absent=False,
            rules=_SIDE,
        ),
        Field(
            "range",
            "strings",
            "types the object must meet (or a subtype); empty: any",
            default=[],
            null_is_absent=False,
            rules=_SIDE,
        ),
    ),
    closed=True,
)
DOCUMENT_FIELDS = (
    Field("schema", "u64", "the document format; 1 is the only one", True, null_is_absent=False, rules={"const": 1}),
    Field("mode", "variant", "off, warn or strict", True, null_is_absent=False, choices=MODES),
    Field("closed_labels", "bool", "refuse labels with no relation entry", True, null_is_absent=False),
    Field(
        "types",
        "struct_map",
        "type name → its is_a (no cycle, chains at most 8 deep)",
        True,
        nested=TYPE_ENTRY,
        null_is_absent=False,
        rules={"maxProperties": MAX_SCHEMA_TYPES, "propertyNames": _NAME},
    ),
    Field(
        "relations",
        "struct_map",
        "label → domain and range",
        True,
        nested=RELATION_ENTRY,
        null_is_absent=False,
        rules={
            "maxProperties": MAX_SCHEMA_RELATIONS,
            "propertyNames": {**_NAME, "not": {"const": SCHEMA_TYPE}},
        },
    ),
)
SCHEMA_DOCUMENT = Spec(
    "SchemaDocument",
    DOCUMENT_FIELDS,
    closed=True,
    refuse_duplicates=True,
    description="a context's schema document (closed at every level)",
)
SCHEMA_VALIDATE = Spec(
    "SchemaValidateRequest",
    (
        Field("document", "struct", "the proposed document", True, nested=SCHEMA_DOCUMENT, null_is_absent=False),
        Field("limit", "usize", "violations page size, default 100, ceiling 1000", default=100, ceiling=1000),
        Field("after", "struct", "keyset cursor", nested=CURSOR),
    ),
    closed=True,
)
SCHEMA_AUDIT = Spec(
    "SchemaAuditRequest",
    (
        Field("limit", "usize", "violations page size, default 100, ceiling 1000", default=100, ceiling=1000),
        Field("after", "struct", "keyset cursor", nested=CURSOR),
    ),
    closed=True,
    description="optional body: an empty body means every default",
)


_ISSUE = obj({"path": STR, "kind": STR, "expected": STR, "actual": STR})
_NAMES = obj({"total": INT, "names": STRS})
COMPONENTS: dict[str, Any] = {
    "Schema": SCHEMA_DOCUMENT.json_schema(),
    "SchemaAudit": obj(
        {
            "total": INT,
            "violations": {
                "type": "array",
                "items": obj({"association": ref("AssociationOut"), "issues": {"type": "array", "items": _ISSUE}}),
            },
            "untyped_concepts": _NAMES,
            "undeclared_types": _NAMES,
            "unknown_labels": _NAMES,
            "reserved_alias_conflicts": obj(
                {"total": INT, "aliases": {"type": "object", "additionalProperties": {"const": "schema:type"}}}
            ),
        }
    ),
}
