"""Wire schemas: the response definitions and the components of `GET /openapi.json`.

Typed request bodies are published from the specs the routes name in their records (the same
ones every handler decodes with), in route-table order; `components` places them among the
rest. Response shapes are JSON Schemas that the test suite checks every response against.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from taguru_server.server.decode import MAX_U32, MAX_U64, Spec
from taguru_server.server.wire import audits, explain, groups, imports, maintenance, schema, walks
from taguru_server.server.wire.json_schema import (
    ASSOCIATION,
    BOOL,
    INT,
    NULL_STR,
    NUM,
    PASSAGE_HIT,
    STR,
    STRS,
    obj,
    ref,
)
from taguru_server.stages.lanes import GRAPH_PLAN_NAMES, PLAN_NAMES

# ----- response schemas --------------------------------------------------------------

LANE_PLAN = obj({"ran": BOOL, "reason": STR, "floor": NUM}, ["ran"])

SHARED: dict[str, Any] = {
    "Error": obj(
        {
            "status": {"const": "error"},
            "code": STR,
            "error": STR,
            "time": NUM,
            "issues": {"type": "array", "items": ref("Issue")},
            "issues_total": INT,
            "integrity": {"enum": ["nothing_written", "durable_prefix"]},
            "durable_batches": INT,
            "retryable_after_correction": BOOL,
        },
        ["status", "code", "error", "time"],
    ),
    "Issue": obj({"path": STR, "kind": STR, "expected": NULL_STR, "actual": NULL_STR}),
    "Locator": obj({"kind": STR, "value": STR}),
    "Attribution": obj(
        {
            "source": STR,
            "weight": NUM,
            "count": INT,
            "paragraph": {"type": ["integer", "null"]},
            "section": NULL_STR,
            "locator": {"oneOf": [ref("Locator"), {"type": "null"}]},
        }
    ),
    "AssociationOut": obj(ASSOCIATION),
    "Revision": obj({"graph": INT, "passages": INT, "config": INT}),
    "DirectoryEntry": obj(
        {
            "name": STR,
            "description": STR,
            "pinned": BOOL,
            "loaded": BOOL,
            "dice_floor": {"type": ["number", "null"]},
            "semantic_floor": {"type": ["number", "null"]},
            "stats": obj(
                {
                    "associations": INT,
                    "concepts": INT,
                    "labels": INT,
                    "sources": INT,
                    "footprint_bytes": INT,
                    "dead_edges": INT,
                    "dead_attributions": INT,
                    "arena_slack": INT,
                    "unsourced_edges": INT,
                    "unsourced_weight": NUM,
                    "top_concepts": {"type": "array", "items": obj({"label": STR, "count": INT})},
                    "label_sample": STRS,
                }
            ),
            "usage": obj(
                {"reads": INT, "empty_reads": INT, "writes": INT, "last_read_epoch": INT, "last_write_epoch": INT}
            ),
            "revision": ref("Revision"),
            "schema_mode": {"type": ["string", "null"], "enum": ["off", "warn", "strict", None]},
        }
    ),
    "ContextList": obj({"total": INT, "contexts": {"type": "array", "items": ref("DirectoryEntry")}}),
    "ContextPatch": obj(
        {
            "description": STR,
            "pinned": BOOL,
            "dice_floor": {"type": ["number", "null"]},
            "semantic_floor": {"type": ["number", "null"]},
        }
    ),
    "ResolveCandidate": obj(
        {"name": STR, "score": NUM, "tier": STR, "kind": STR, "gloss": STR, "types": STRS}, ["name", "score", "tier"]
    ),
    "LabelCount": obj({"label": STR, "count": INT}),
    "Description": {
        "oneOf": [
            obj(
                {
                    "concept": STR,
                    "as_subject": {"type": "array", "items": ref("LabelCount")},
                    "as_object": {"type": "array", "items": ref("LabelCount")},
                    "types": STRS,
                },
                ["concept", "as_subject", "as_object"],
            ),
            {"type": "null"},
        ]
    },
    "Matches": obj(
        {"total": INT, "matches": {"type": "array", "items": ref("AssociationOut")}, "plan": obj({"contexts": STRS})}
    ),
    "Activation": obj(
        {
            "total": INT,
            "matches": {
                "type": "array",
                "items": obj({"strength": NUM, "path": STRS, "association": ref("AssociationOut")}),
            },
        }
    ),
    "LanePlan": LANE_PLAN,
    "LaneEvidence": obj({"rank": INT, "score": NUM}),
    "PassageHit": obj(PASSAGE_HIT),
    "SearchPlan": obj(
        {
            "contexts": {
                "type": "array",
                "items": obj(
                    {
                        "context": STR,
                        "lanes": obj({"bm25": ref("LanePlan"), "vector": ref("LanePlan")}),
                        "filter": obj({"eligible_sources": INT, "total_sources": INT}),
                    },
                    ["context", "lanes"],
                ),
            }
        }
    ),
    "SearchResult": obj({"plan": ref("SearchPlan"), "hits": {"type": "array", "items": ref("PassageHit")}}),
    "Citation": obj(
        {"text": STR, "source": STR, "section": NULL_STR, "locator": {"oneOf": [ref("Locator"), {"type": "null"}]}}
    ),
    "Lookup": obj({"passages": {"type": "object", "additionalProperties": STR}, "missing": STRS}),
    "SourceList": obj(
        {
            "total": INT,
            "sources": STRS,
            "entries": {
                "type": "array",
                "items": obj({"name": STR, "stored_at": INT, "date": INT, "tags": STRS}, ["name"]),
            },
        }
    ),
    "LabelList": obj({"total": INT, "labels": STRS}),
    "ChangePage": obj(
        {
            "events": {
                "type": "array",
                "items": obj(
                    {
                        "seq": INT,
                        "kind": {
                            "enum": [
                                "associations_added",
                                "association_retracted",
                                "aliases_added",
                                "aliases_removed",
                                "source_stored",
                                "source_retracted",
                                "schema_updated",
                            ]
                        },
                        "count": INT,
                        "source": STR,
                        "subject": STR,
                        "label": STR,
                        "object": STR,
                        "mode": STR,
                    },
                    required=["seq", "kind"],
                ),
            },
            "next": STR,
            "more": BOOL,
        }
    ),
    "AliasList": obj(
        {
            "total": INT,
            "concepts": {"type": "object", "additionalProperties": STR},
            "labels": {"type": "object", "additionalProperties": STR},
        }
    ),
    "StoreResult": obj(
        {
            k: INT
            for k in (
                "stored",
                "questions_stored",
                "questions_dropped",
                "sections_stored",
                "sections_dropped",
                "locators_stored",
                "locators_dropped",
            )
        }
    ),
    "AssociationRetraction": obj({"retracted": BOOL, "attributions_removed": INT}),
    "SourceRetraction": obj({"associations_touched": INT, "passage_removed": BOOL}),
    "ImportOutcome": obj(
        {
            "context": STR,
            "source": STR,
            "created": BOOL,
            "retracted": INT,
            "associations": INT,
            "aliases": INT,
            "passage_stored": BOOL,
            "passage_dropped": BOOL,
            "questions_stored": INT,
            "questions_dropped": INT,
            "sections_stored": INT,
            "sections_dropped": INT,
            "locators_stored": INT,
            "locators_dropped": INT,
            "association_paragraphs_dropped": INT,
            "schema_violations": INT,
        }
    ),
    "ImportResult": obj(
        {
            "batches": {"type": "array", "items": ref("ImportOutcome")},
            "schemas": {"type": "array", "items": ref("SchemaImportOutcome")},
            "groups": {"type": "array", "items": ref("GroupImportOutcome")},
        },
        ["batches"],
    ),
    "SchemaImportOutcome": obj(
        {"context": STR, "mode": {"enum": ["off", "warn", "strict"]}, "types": INT, "relations": INT}
    ),
    "GroupImportOutcome": obj(
        {"name": STR, "outcome": {"enum": ["created", "unchanged", "replaced"]}, "contexts": INT, "groups": INT}
    ),
    "CommunityHit": obj(
        {
            "community": STR,
            "score": NUM,
            "text": STR,
            "paragraph": INT,
            "level": INT,
            "parent": STR,
            "concept_count": INT,
            "members": {"type": "array", "items": obj({"name": STR, "strength": NUM})},
            "members_truncated": {"const": True},
        },
        ["community", "score", "text", "paragraph"],
    ),
    "CommunitySearch": obj(
        {
            "derived": STR,
            "algorithm": {"type": ["string", "null"]},
            "stale": BOOL,
            "revision": obj({"recorded_graph": INT, "current_graph": INT}),
            "plan": ref("SearchPlan"),
            "hits": {"type": "array", "items": ref("CommunityHit")},
        }
    ),
    "CitationRef": obj({"source": STR, "paragraph": INT}),
    "EvidenceItem": obj(
        {
            "candidate_id": STR,
            "kind": STR,
            "fused_rank": INT,
            "lane_ranks": {"type": "array", "items": obj({"lane": STR, "rank": INT})},
            "citation_refs": {"type": "array", "items": ref("CitationRef")},
            "corroboration": obj({"sources": STRS, "attributions": {"type": "array", "items": ref("CitationRef")}}),
            "contradicts": STRS,
            "bytes": INT,
            "estimated_tokens": INT,
            "association": ref("AssociationOut"),
            "passage": ref("PassageHit"),
            "community": ref("CommunityHit"),
        },
        ["candidate_id", "kind", "fused_rank", "lane_ranks", "citation_refs", "bytes", "estimated_tokens"],
    ),
    "EvidencePackage": obj(
        {
            "items": {"type": "array", "items": ref("EvidenceItem")},
            "citations": {
                "type": "array",
                "items": obj({"source": STR, "paragraph": INT, "citation": ref("Citation")}),
            },
            "budget": obj(
                {
                    "items_used": INT,
                    "bytes_used": INT,
                    "tokens_used": INT,
                    "limits": obj({"max_items": INT, "max_bytes": INT, "max_tokens": INT}),
                }
            ),
            "omitted": {
                "type": "array",
                "maxItems": 20,
                "items": obj(
                    {"candidate_id": STR, "kind": STR, "reason": STR, "duplicate_of": STR},
                    ["candidate_id", "kind", "reason"],
                ),
            },
            "omitted_total": INT,
            "omitted_by_reason": {"type": "object", "additionalProperties": INT},
            "plan": obj(
                {
                    # the graph-passages mode adds its lane; every other package has exactly PLAN_NAMES
                    "lanes": obj({k: ref("LanePlan") for k in GRAPH_PLAN_NAMES}, list(PLAN_NAMES)),
                    "selection": obj({"dedup_dropped": INT, "contradiction_groups": INT, "diversity_tier_width": INT}),
                    "reranker": obj(
                        {"configured": BOOL, "ran": BOOL, "model": STR, "reason": STR}, ["configured", "ran"]
                    ),
                    "anchors": {
                        "type": "array",
                        "items": obj(
                            {
                                "origin": STR,
                                "anchor": {
                                    "oneOf": [
                                        {"type": "null"},
                                        obj({"name": STR, "tier": STR, "score": NUM}),
                                    ]
                                },
                            }
                        ),
                    },
                    "stages": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["stage", "status"],
                            "properties": {"stage": STR, "status": STR, "reason": STR},
                            "additionalProperties": INT,
                        },
                    },
                },
                ["lanes", "selection", "reranker"],
            ),
        }
    ),
    "Version": obj(
        {
            "server": STR,
            "http_contract": obj({"current": INT, "supported": {"type": "array", "items": INT}}),
            "mcp_contract": obj({"current": INT, "supported": {"type": "array", "items": INT}}),
            "mcp_protocol": obj({"supported": STRS}),
            "batch_formats": {"type": "array", "items": INT},
            "schema_formats": {"type": "array", "items": INT},
            "image_formats": {"type": "array", "items": INT},
            "communities_formats": {"type": "array", "items": INT},
        }
    ),
    "Health": obj({"status": STR, "version": STR}),
    "Ready": obj({"status": {"const": "ready"}, "version": STR}),
    "JsonRpcReply": {
        "type": "object",
        "required": ["jsonrpc", "id"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "result": {},
            "error": obj({"code": {"type": "integer"}, "message": STR, "data": {}}, ["code", "message"]),
        },
    },
}

# the collected-validation bodies: what `post_associations` and `passage_store.py` accept (a maxLength is
# the handler's byte cap, counted in UTF-8 bytes)
NAME = {"type": "string", "minLength": 1, "maxLength": 1024}
PARAGRAPH = {"type": "integer", "minimum": 0, "maximum": MAX_U32}
_ASSOCIATION_IN = obj(
    {
        "subject": NAME,
        "label": NAME,
        "object": NAME,
        "weight": {"type": "number", "minimum": -1_000_000, "maximum": 1_000_000},
        "source": {**NAME, "type": ["string", "null"]},
        "paragraph": {**PARAGRAPH, "type": ["integer", "null"], "description": "kept only with a source"},
    },
    ["subject", "label", "object", "weight"],
    closed=False,
)


def _text(cap: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": cap}


def _markers(item: dict[str, Any]) -> dict[str, Any]:
    """A per-source marker map: source id → list of markers on its paragraphs."""
    return {
        "type": ["object", "null"],
        "additionalProperties": {"type": "array", "items": obj({"paragraph": PARAGRAPH, **item}, closed=False)},
    }


PASSAGE_STORE = obj(
    {
        "passages": {
            "type": "object",
            "maxProperties": 1000,
            "propertyNames": {"minLength": 1, "maxLength": 1024},
            "additionalProperties": STR,
            "description": "source id → passage text",
        },
        "questions": _markers({"question": {**NAME, "maxLength": 512}}),
        "sections": _markers({"section": _text(512)}),
        "locators": _markers({"locator": obj({"kind": _text(64), "value": _text(512)}, closed=False)}),
        "tags": {
            "type": ["object", "null"],
            "additionalProperties": {
                "type": "array",
                "maxItems": 32,
                "items": {**NAME, "maxLength": 128},
            },
        },
        "dates": {
            "type": ["object", "null"],
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_U64},
        },
    },
    ["passages"],
    closed=False,
) | {
    "description": "every key of questions, sections, locators, tags and dates is a source id of this request's "
    "passages; at most 8 questions per paragraph"
}

# the shapes published after the typed request bodies
REST: dict[str, Any] = {
    "AssociationBatch": {"type": "array", "maxItems": 10000, "items": _ASSOCIATION_IN},
    "PassageStore": PASSAGE_STORE,
    **groups.COMPONENTS,
    "EmbeddingStatus": obj(
        {
            "provider_model": NULL_STR,
            "glosses": obj({"model": STR, "width": INT, "concepts": INT, "labels": INT}),
            "passages": obj({"model": STR, "width": INT, "rows": INT}),
        },
        ["provider_model"],
    ),
    "EmbeddingRefresh": obj(
        {
            "embedded": INT,
            "total": INT,
            "glosses": obj({"embedded": INT, "total": INT}),
            "passages": obj({"embedded": INT, "total": INT, "skipped_over_limit": INT}),
        },
        ["embedded", "total"],
    ),
    **explain.COMPONENTS,
    **audits.COMPONENTS,
    **schema.COMPONENTS,
    **imports.COMPONENTS,
    **walks.COMPONENTS,
    **maintenance.COMPONENTS,
    "JsonRpcRequest": {
        "type": "object",
        "required": ["jsonrpc", "method"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "number", "null"]},
            "method": STR,
            "params": {},
        },
    },
}
COMPONENTS: dict[str, Any] = {**SHARED, **REST}  # every component that is not a typed request body


def components(specs: Iterable[Spec]) -> dict[str, Any]:
    """The document's components: the shared shapes, then each typed body of `specs` once (in their
    order, under its component name), then the rest."""
    bodies: dict[str, Any] = {}
    for spec in specs:
        bodies.setdefault(spec.component_name, spec.json_schema())
    return {**SHARED, **bodies, **REST}


def result_schema(shape: str) -> dict[str, Any]:
    """The JSON Schema of a successful body for a response shape name."""
    if shape.startswith("bare:"):
        return ref(shape[5:])
    if shape.startswith("warned:"):  # a write a schema in warn mode may report on (issues after `time`)
        plain = result_schema(shape[7:])
        extra = {"issues": {"type": "array", "items": ref("Issue")}, "schema_violations": INT}
        return {**plain, "properties": {**plain["properties"], **extra}}
    inner: dict[str, Any]
    if shape == "bool":
        inner = BOOL
    elif shape == "int":
        inner = INT
    elif shape == "names":
        inner = STRS
    elif shape == "candidates":
        inner = {"type": "array", "items": ref("ResolveCandidate")}
    else:
        inner = ref(shape)
    return obj({"result": inner, "status": {"const": "ok"}, "time": NUM})
