"""Response (and request) schemas of the audit and promote routes (docs/audits.md), merged into the document."""

from __future__ import annotations

from typing import Any

from taguru_server.server.routes.audits import SPECS as AUDIT_SPECS
from taguru_server.server.routes.promote import PROMOTE

INT = {"type": "integer", "minimum": 0}
NUM = {"type": "number"}
STR = {"type": "string"}
STRS = {"type": "array", "items": STR}
NULL_STR = {"type": ["string", "null"]}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
    }


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


COMPONENTS: dict[str, Any] = {}
_TWIN = _obj({"a": STR, "b": STR, "score": NUM})
_TWINS = {"type": "array", "items": _TWIN}
_FACTS = {"type": "array", "items": _obj({"direction": {"enum": ["out", "in"]}, "label": STR, "other": STR})}
_MERGE = _obj(
    {
        "a": STR,
        "b": STR,
        "tier": {"enum": ["lexical", "semantic"]},
        "name_score": NUM,
        "overlap": NUM,
        "shared_total": INT,
        "only_a_total": INT,
        "only_b_total": INT,
        "shared": _FACTS,
        "only_a": _FACTS,
        "only_b": _FACTS,
        "fingerprint": STR,
    }
)
_OBJECT_ROW = _obj(
    {"object": STR, "weight": NUM, "count": INT, "sources": STRS, "latest": INT},
    ["object", "weight", "count", "sources"],
)
_CONTRADICTION = {
    "oneOf": [
        _obj(
            {
                "kind": {"const": "objects"},
                "subject": STR,
                "label": STR,
                "functional_tendency": NUM,
                "objects": {"type": "array", "items": _OBJECT_ROW},
                "fingerprint": STR,
            }
        ),
        _obj(
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
_STALE = _obj(
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
COMPONENTS["VocabularyAudit"] = _obj(
    {
        "lexical_concepts": _TWINS,
        "lexical_labels": _TWINS,
        "semantic_concepts": _TWINS,
        "semantic_labels": _TWINS,
        "semantic_note": NULL_STR,
    }
)
COMPONENTS["DriftAudit"] = _obj(
    {
        "total": INT,
        "unsourced": {
            "type": "array",
            "items": _obj({"unsourced_weight": NUM, "unsourced_count": INT, "association": ref("AssociationOut")}),
        },
        "dead_concept_aliases": {"type": "object", "additionalProperties": STR},
        "dead_label_aliases": {"type": "object", "additionalProperties": STR},
        "twins": {"oneOf": [ref("VocabularyAudit"), {"type": "null"}]},
    }
)
COMPONENTS["ConsolidationAudit"] = _obj(
    {
        "detector": {"const": "consolidation/1"},
        "merge": _obj(
            {"total": INT, "candidates": {"type": "array", "items": _MERGE}, "semantic_note": STR},
            ["total", "candidates"],
        ),
        "contradiction": _obj({"total": INT, "candidates": {"type": "array", "items": _CONTRADICTION}}),
        "staleness": _obj({"total": INT, "undatable": INT, "candidates": {"type": "array", "items": _STALE}}),
    },
    ["detector"],
)
COMPONENTS["Promotion"] = _obj(
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
for _spec in (*AUDIT_SPECS, PROMOTE):
    COMPONENTS[_spec.component_name] = _spec.json_schema()

ROUTE_SHAPES: dict[tuple[str, str], tuple[str | None, str]] = {
    ("POST", "/contexts/{name}/vocabulary/audit"): ("VocabularyAuditRequest", "VocabularyAudit"),
    ("POST", "/contexts/{name}/drift/audit"): ("DriftAuditRequest", "DriftAudit"),
    ("POST", "/contexts/{name}/consolidation/audit"): ("ConsolidationAuditRequest", "ConsolidationAudit"),
    ("POST", "/contexts/{name}/promote"): ("PromoteRequest", "Promotion"),
}
