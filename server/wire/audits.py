"""The wire shapes of the audit and promote routes (docs/audits.md): their request bodies and results."""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import Field, Spec
from taguru_server.server.wire.json_schema import INT, NULL_STR, NUM, STR, STRS, obj, ref
from taguru_server.server.wire.specs import CURSOR
from taguru_server.store.derive import consolidation
from taguru_server.store.transfer import promote as moves

MAX_CHECKS = 1000
MAX_LIMIT = 1000

VOCABULARY_AUDIT = Spec(
    "VocabularyAuditRequest",
    (
        # not optional on the wire: a null is refused like a wrong type
        Field("dice_floor", "f64", "lexical twin floor, default 0.6, clamped to [0, 1]", null_is_absent=False),
        Field("cosine_floor", "f32", "semantic twin floor, default 0.6, clamped to [0, 1]", null_is_absent=False),
    ),
    description="optional body: an empty body means every default",
)
DRIFT_AUDIT = Spec(
    "DriftAuditRequest",
    (
        Field("unsourced_floor", "f64", "keep edges whose |unsourced weight| reaches |floor| (default 0)"),
        Field("limit", "usize", "unsourced page size", default=100, ceiling=MAX_LIMIT),
        Field("after", "struct", "keyset cursor (the last entry's unsourced_weight and names)", nested=CURSOR),
        Field("include_twins", "bool", "also run the vocabulary audit", default=False, null_is_absent=False),
        Field("dice_floor", "f64", "lexical twin floor, default 0.6"),
        Field("cosine_floor", "f32", "semantic twin floor, default 0.6"),
    ),
    description="optional body: an empty body means every default",
)
CONSOLIDATION_AUDIT = Spec(
    "ConsolidationAuditRequest",
    (
        Field(
            "checks",
            "strings",
            "any of merge, contradiction, staleness",
            True,
            max_items=MAX_CHECKS,
            rules={"minItems": 1, "items": {"enum": list(consolidation.CHECKS)}},
        ),
        Field("limit", "usize", "per-section candidate ceiling", default=100, ceiling=MAX_LIMIT),
        Field("evidence_cap", "usize", "per-list merge evidence ceiling", default=20, ceiling=MAX_LIMIT),
        Field("dice_floor", "f64", "merge: lexical floor, default 0.6"),
        Field("cosine_floor", "f32", "merge: semantic floor, default 0.6"),
        Field("floor_secs", "u64", "staleness: minimum gap in seconds", default=0),
    ),
)
MAX_SOURCES = 1000

PROMOTE = Spec(
    "PromoteRequest",
    (
        Field("into", "string", "the established context the sources move into", True),
        Field(
            "sources",
            "strings",
            "source ids to promote (never one of export's reserved ids)",
            True,
            max_items=MAX_SOURCES,
            rules={"minItems": 1, "items": {"type": "string", "not": {"enum": list(moves.RESERVED)}}},
        ),
        Field("audit", "bool", "run the consolidation audit on the destination afterwards (null means true)"),
    ),
)

# the query parameter of promote
DRY_RUN: dict[str, Any] = {
    "name": "dry_run",
    "in": "query",
    "required": False,
    "schema": {"type": "boolean", "default": False},
    "description": "report what would be promoted and write nothing (`true` or `false`)",
}

COMPONENTS: dict[str, Any] = {}
_TWIN = obj({"a": STR, "b": STR, "score": NUM})
_TWINS = {"type": "array", "items": _TWIN}
_FACTS = {"type": "array", "items": obj({"direction": {"enum": ["out", "in"]}, "label": STR, "other": STR})}
_MERGE = obj(
    {
        "a": STR,
        "b": STR,
        "tier": {"enum": ["lexical", "semantic"]},
        "name_score": NUM,
        "types_a": STRS,
        "types_b": STRS,
        "overlap": NUM,
        "shared_total": INT,
        "only_a_total": INT,
        "only_b_total": INT,
        "shared": _FACTS,
        "only_a": _FACTS,
        "only_b": _FACTS,
        "fingerprint": STR,
    },
    [
        "a",
        "b",
        "tier",
        "name_score",
        "overlap",
        "shared_total",
        "only_a_total",
        "only_b_total",
        "shared",
        "only_a",
        "only_b",
        "fingerprint",
    ],
)
_OBJECT_ROW = obj(
    {"object": STR, "weight": NUM, "count": INT, "sources": STRS, "latest": INT},
    ["object", "weight", "count", "sources"],
)
_CONTRADICTION = {
    "oneOf": [
        obj(
            {
                "kind": {"const": "objects"},
                "subject": STR,
                "label": STR,
                "functional_tendency": NUM,
                "objects": {"type": "array", "items": _OBJECT_ROW},
                "fingerprint": STR,
            }
        ),
        obj(
            {
                "kind": {"const": "contested"},
                "subject": STR,
                "label": STR,
                "object": STR,
                "weight": NUM,
                "count": INT,
                "supporting_sources": STRS,
                "disputing_sources": STRS,
                "fingerprint": STR,
            }
        ),
    ]
}
_STALE = obj(
    {
        "subject": STR,
        "label": STR,
        "object": STR,
        "latest": INT,
        "neighborhood_latest": INT,
        "gap": INT,
        "sources": STRS,
        "fingerprint": STR,
    }
)
COMPONENTS["VocabularyAudit"] = obj(
    {
        "lexical_concepts": _TWINS,
        "lexical_labels": _TWINS,
        "semantic_concepts": _TWINS,
        "semantic_labels": _TWINS,
        "semantic_note": NULL_STR,
    }
)
COMPONENTS["DriftAudit"] = obj(
    {
        "total": INT,
        "unsourced": {
            "type": "array",
            "items": obj({"unsourced_weight": NUM, "unsourced_count": INT, "association": ref("AssociationOut")}),
        },
        "dead_concept_aliases": {"type": "object", "additionalProperties": STR},
        "dead_label_aliases": {"type": "object", "additionalProperties": STR},
        "twins": {"oneOf": [ref("VocabularyAudit"), {"type": "null"}]},
    }
)
COMPONENTS["ConsolidationAudit"] = obj(
    {
        "detector": {"const": "consolidation/1"},
        "merge": obj(
            {"total": INT, "candidates": {"type": "array", "items": _MERGE}, "semantic_note": STR},
            ["total", "candidates"],
        ),
        "contradiction": obj({"total": INT, "candidates": {"type": "array", "items": _CONTRADICTION}}),
        "staleness": obj({"total": INT, "undatable": INT, "candidates": {"type": "array", "items": _STALE}}),
    },
    ["detector"],
)
COMPONENTS["Promotion"] = obj(
    {
        "batches": {"type": "array", "items": ref("ImportOutcome")},
        "aliases_dropped": INT,
        "audit": ref("ConsolidationAudit"),
        "audit_skipped": {
            "enum": ["overloaded", "deadline_exceeded", "no_context", "metadata_unreadable", "unavailable"]
        },
    },
    ["batches", "aliases_dropped"],
)
