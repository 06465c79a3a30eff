"""Wire schemas: the response definitions and the document behind `GET /openapi.json`.

Typed request bodies are published from the specs in `decode.py`, the same ones every handler
decodes with. Response shapes are JSON Schemas that the test suite checks every response against.
"""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import ALIASES, MAX_U32, MAX_U64, PUBLISHED
from taguru_server.server.wire import (
    audits,
    explain,
    groups,  # its request specs join PUBLISHED on import
    imports,
    maintenance,
    walks,  # publishes the walks' request bodies; their result schemas join COMPONENTS
)
from taguru_server.stages.lanes import PLAN_NAMES

# ----- response schemas --------------------------------------------------------------


def _obj(props: dict[str, Any], required: list[str] | None = None, closed: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
    }
    if closed:
        out["additionalProperties"] = False
    return out


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


INT = {"type": "integer", "minimum": 0}
NUM = {"type": "number"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
STRS = {"type": "array", "items": STR}
NULL_STR = {"type": ["string", "null"]}

LANE_PLAN = _obj({"ran": BOOL, "reason": STR, "floor": NUM}, ["ran"])

COMPONENTS: dict[str, Any] = {
    "Error": _obj(
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
    "Issue": _obj({"path": STR, "kind": STR, "expected": NULL_STR, "actual": NULL_STR}),
    "Locator": _obj({"kind": STR, "value": STR}),
    "Attribution": _obj(
        {
            "source": STR,
            "weight": NUM,
            "count": INT,
            "paragraph": {"type": ["integer", "null"]},
            "section": NULL_STR,
            "locator": {"oneOf": [ref("Locator"), {"type": "null"}]},
        }
    ),
    "AssociationOut": _obj(
        {
            "subject": STR,
            "label": STR,
            "object": STR,
            "weight": NUM,
            "count": INT,
            "attributions": {"type": "array", "items": ref("Attribution")},
        }
    ),
    "Revision": _obj({"graph": INT, "passages": INT, "config": INT}),
    "DirectoryEntry": _obj(
        {
            "name": STR,
            "description": STR,
            "pinned": BOOL,
            "loaded": BOOL,
            "dice_floor": {"type": ["number", "null"]},
            "semantic_floor": {"type": ["number", "null"]},
            "stats": _obj(
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
                    "top_concepts": {"type": "array", "items": _obj({"label": STR, "count": INT})},
                    "label_sample": STRS,
                }
            ),
            "usage": _obj(
                {"reads": INT, "empty_reads": INT, "writes": INT, "last_read_epoch": INT, "last_write_epoch": INT}
            ),
            "revision": ref("Revision"),
            "schema_mode": {"type": "null"},
        }
    ),
    "ContextList": _obj({"total": INT, "contexts": {"type": "array", "items": ref("DirectoryEntry")}}),
    "ContextPatch": _obj(
        {
            "description": STR,
            "pinned": BOOL,
            "dice_floor": {"type": ["number", "null"]},
            "semantic_floor": {"type": ["number", "null"]},
        }
    ),
    "ResolveCandidate": _obj(
        {"name": STR, "score": NUM, "tier": STR, "kind": STR, "gloss": STR}, ["name", "score", "tier"]
    ),
    "LabelCount": _obj({"label": STR, "count": INT}),
    "Description": {
        "oneOf": [
            _obj(
                {
                    "concept": STR,
                    "as_subject": {"type": "array", "items": ref("LabelCount")},
                    "as_object": {"type": "array", "items": ref("LabelCount")},
                }
            ),
            {"type": "null"},
        ]
    },
    "Matches": _obj(
        {"total": INT, "matches": {"type": "array", "items": ref("AssociationOut")}, "plan": _obj({"contexts": STRS})}
    ),
    "Activation": _obj(
        {
            "total": INT,
            "matches": {
                "type": "array",
                "items": _obj({"strength": NUM, "path": STRS, "association": ref("AssociationOut")}),
            },
        }
    ),
    "LanePlan": LANE_PLAN,
    "LaneEvidence": _obj({"rank": INT, "score": NUM}),
    "PassageHit": _obj(
        {
            "source": STR,
            "paragraph": INT,
            "score": NUM,
            "text": STR,
            "lanes": _obj({"bm25": ref("LaneEvidence"), "vector": ref("LaneEvidence")}, []),
        }
    ),
    "SearchPlan": _obj(
        {
            "contexts": {
                "type": "array",
                "items": _obj(
                    {
                        "context": STR,
                        "lanes": _obj({"bm25": ref("LanePlan"), "vector": ref("LanePlan")}),
                        "filter": _obj({"eligible_sources": INT, "total_sources": INT}),
                    },
                    ["context", "lanes"],
                ),
            }
        }
    ),
    "SearchResult": _obj({"plan": ref("SearchPlan"), "hits": {"type": "array", "items": ref("PassageHit")}}),
    "Citation": _obj(
        {"text": STR, "source": STR, "section": NULL_STR, "locator": {"oneOf": [ref("Locator"), {"type": "null"}]}}
    ),
    "Lookup": _obj({"passages": {"type": "object", "additionalProperties": STR}, "missing": STRS}),
    "SourceList": _obj(
        {
            "total": INT,
            "sources": STRS,
            "entries": {
                "type": "array",
                "items": _obj({"name": STR, "stored_at": INT, "date": INT, "tags": STRS}, ["name"]),
            },
        }
    ),
    "LabelList": _obj({"total": INT, "labels": STRS}),
    "ChangePage": _obj(
        {
            "events": {
                "type": "array",
                "items": _obj(
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
    "AliasList": _obj(
        {
            "total": INT,
            "concepts": {"type": "object", "additionalProperties": STR},
            "labels": {"type": "object", "additionalProperties": STR},
        }
    ),
    "StoreResult": _obj(
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
    "AssociationRetraction": _obj({"retracted": BOOL, "attributions_removed": INT}),
    "SourceRetraction": _obj({"associations_touched": INT, "passage_removed": BOOL}),
    "ImportOutcome": _obj(
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
    "ImportResult": _obj(
        {
            "batches": {"type": "array", "items": ref("ImportOutcome")},
            "groups": {"type": "array", "items": ref("GroupImportOutcome")},
        },
        ["batches"],
    ),
    "GroupImportOutcome": _obj(
        {"name": STR, "outcome": {"enum": ["created", "unchanged", "replaced"]}, "contexts": INT, "groups": INT}
    ),
    "CommunityHit": _obj(
        {
            "community": STR,
            "score": NUM,
            "text": STR,
            "paragraph": INT,
            "level": INT,
            "parent": STR,
            "concept_count": INT,
            "members": {"type": "array", "items": _obj({"name": STR, "strength": NUM})},
            "members_truncated": {"const": True},
        },
        ["community", "score", "text", "paragraph"],
    ),
    "CommunitySearch": _obj(
        {
            "derived": STR,
            "algorithm": {"type": ["string", "null"]},
            "stale": BOOL,
            "revision": _obj({"recorded_graph": INT, "current_graph": INT}),
            "plan": ref("SearchPlan"),
            "hits": {"type": "array", "items": ref("CommunityHit")},
        }
    ),
    "CitationRef": _obj({"source": STR, "paragraph": INT}),
    "EvidenceItem": _obj(
        {
            "candidate_id": STR,
            "kind": STR,
            "fused_rank": INT,
            "lane_ranks": {"type": "array", "items": _obj({"lane": STR, "rank": INT})},
            "citation_refs": {"type": "array", "items": ref("CitationRef")},
            "corroboration": _obj({"sources": STRS, "attributions": {"type": "array", "items": ref("CitationRef")}}),
            "contradicts": STRS,
            "bytes": INT,
            "estimated_tokens": INT,
            "association": ref("AssociationOut"),
            "passage": ref("PassageHit"),
            "community": ref("CommunityHit"),
        },
        ["candidate_id", "kind", "fused_rank", "lane_ranks", "citation_refs", "bytes", "estimated_tokens"],
    ),
    "EvidencePackage": _obj(
        {
            "items": {"type": "array", "items": ref("EvidenceItem")},
            "citations": {
                "type": "array",
                "items": _obj({"source": STR, "paragraph": INT, "citation": ref("Citation")}),
            },
            "budget": _obj(
                {
                    "items_used": INT,
                    "bytes_used": INT,
                    "tokens_used": INT,
                    "limits": _obj({"max_items": INT, "max_bytes": INT, "max_tokens": INT}),
                }
            ),
            "omitted": {
                "type": "array",
                "maxItems": 20,
                "items": _obj(
                    {"candidate_id": STR, "kind": STR, "reason": STR, "duplicate_of": STR},
                    ["candidate_id", "kind", "reason"],
                ),
            },
            "omitted_total": INT,
            "omitted_by_reason": {"type": "object", "additionalProperties": INT},
            "plan": _obj(
                {
                    "lanes": _obj({k: ref("LanePlan") for k in PLAN_NAMES}),
                    "selection": _obj({"dedup_dropped": INT, "contradiction_groups": INT, "diversity_tier_width": INT}),
                    "reranker": _obj(
                        {"configured": BOOL, "ran": BOOL, "model": STR, "reason": STR}, ["configured", "ran"]
                    ),
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
    "Version": _obj(
        {
            "server": STR,
            "http_contract": _obj({"current": INT, "supported": {"type": "array", "items": INT}}),
            "mcp_contract": _obj({"current": INT, "supported": {"type": "array", "items": INT}}),
            "mcp_protocol": _obj({"supported": STRS}),
            "batch_formats": {"type": "array", "items": INT},
            "schema_formats": {"type": "array", "items": INT},
            "image_formats": {"type": "array", "items": INT},
            "communities_formats": {"type": "array", "items": INT},
        }
    ),
    "Health": _obj({"status": STR, "version": STR}),
    "Ready": _obj({"status": {"const": "ready"}, "version": STR}),
    "JsonRpcReply": {
        "type": "object",
        "required": ["jsonrpc", "id"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "result": {},
            "error": _obj({"code": {"type": "integer"}, "message": STR, "data": {}}, ["code", "message"]),
        },
    },
}

for _spec in PUBLISHED:
    COMPONENTS[_spec.component_name] = _spec.json_schema()

# the collected-validation bodies: what `post_associations` and `passage_store.py` accept (a maxLength is
# the handler's byte cap, counted in UTF-8 bytes)
NAME = {"type": "string", "minLength": 1, "maxLength": 1024}
PARAGRAPH = {"type": "integer", "minimum": 0, "maximum": MAX_U32}
_ASSOCIATION_IN = _obj(
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
        "additionalProperties": {"type": "array", "items": _obj({"paragraph": PARAGRAPH, **item}, closed=False)},
    }


COMPONENTS["AssociationBatch"] = {"type": "array", "maxItems": 10000, "items": _ASSOCIATION_IN}
COMPONENTS["PassageStore"] = _obj(
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
        "locators": _markers({"locator": _obj({"kind": _text(64), "value": _text(512)}, closed=False)}),
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
COMPONENTS[ALIASES.component_name] = ALIASES.json_schema()
COMPONENTS.update(groups.COMPONENTS)
COMPONENTS["EmbeddingStatus"] = _obj(
    {
        "provider_model": NULL_STR,
        "glosses": _obj({"model": STR, "width": INT, "concepts": INT, "labels": INT}),
        "passages": _obj({"model": STR, "width": INT, "rows": INT}),
    },
    ["provider_model"],
)
COMPONENTS["EmbeddingRefresh"] = _obj(
    {
        "embedded": INT,
        "total": INT,
        "glosses": _obj({"embedded": INT, "total": INT}),
        "passages": _obj({"embedded": INT, "total": INT, "skipped_over_limit": INT}),
    },
    ["embedded", "total"],
)
COMPONENTS.update(explain.COMPONENTS | audits.COMPONENTS | imports.COMPONENTS)
COMPONENTS.update(walks.result_components(_obj, ref))
COMPONENTS.update(maintenance.result_components(_obj))
COMPONENTS["JsonRpcRequest"] = {
    "type": "object",
    "required": ["jsonrpc", "method"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "number", "null"]},
        "method": STR,
        "params": {},
    },
}

# (method, template) -> (request component or None, response: component name | "bare:<name>" | media type)
ROUTE_SHAPES: dict[tuple[str, str], tuple[str | None, str]] = {
    ("GET", "/contexts"): (None, "ContextList"),
    ("PUT", "/contexts/{name}"): ("ContextConfig", "bool"),
    ("PATCH", "/contexts/{name}"): ("ContextConfig", "ContextPatch"),
    ("GET", "/contexts/{name}"): (None, "DirectoryEntry"),
    ("DELETE", "/contexts/{name}"): (None, "bool"),
    ("POST", "/contexts/{name}/associations"): ("AssociationBatch", "int"),
    ("POST", "/contexts/{name}/associations/retract"): ("TripleRequest", "AssociationRetraction"),
    ("POST", "/contexts/{name}/aliases"): ("AliasRegistration", "int"),
    ("DELETE", "/contexts/{name}/aliases"): ("AliasRemoval", "int"),
    ("GET", "/contexts/{name}/aliases"): (None, "AliasList"),
    ("GET", "/contexts/{name}/labels"): (None, "LabelList"),
    ("GET", "/contexts/{name}/changes"): (None, "ChangePage"),
    ("GET", "/contexts/{name}/embeddings"): (None, "EmbeddingStatus"),
    ("POST", "/contexts/{name}/embeddings/refresh"): (None, "EmbeddingRefresh"),
    ("POST", "/contexts/{name}/sources"): ("PassageStore", "StoreResult"),
    ("GET", "/contexts/{name}/sources"): (None, "SourceList"),
    ("POST", "/contexts/{name}/sources/lookup"): ("LookupRequest", "Lookup"),
    ("POST", "/contexts/{name}/sources/search"): ("SearchRequest", "SearchResult"),
    ("POST", "/contexts/{name}/sources/retract"): ("RetractSource", "SourceRetraction"),
    ("POST", "/contexts/{name}/citations"): ("CitationRequest", "Citation"),
    ("POST", "/contexts/{name}/resolve"): ("ResolveRequest", "candidates"),
    ("POST", "/contexts/{name}/resolve_label"): ("ResolveRequest", "candidates"),
    ("POST", "/contexts/{name}/describe"): ("DescribeRequest", "Description"),
    ("POST", "/contexts/{name}/query"): ("QueryRequest", "Matches"),
    ("POST", "/contexts/{name}/recall"): ("RecallRequest", "Matches"),
    ("POST", "/contexts/{name}/activate"): ("ActivateRequest", "Activation"),
    ("POST", "/contexts/{name}/explore"): ("ExploreRequest", "ExplorePage"),
    ("POST", "/contexts/{name}/paths"): ("PathsRequest", "PathsPage"),
    ("POST", "/contexts/{name}/unreachable_from"): ("UnreachableFromRequest", "Orphans"),
    ("POST", "/contexts/{name}/evidence"): ("EvidenceRequest", "EvidencePackage"),
    ("POST", "/contexts/{name}/communities/search"): ("CommunitySearchRequest", "CommunitySearch"),
    ("GET", "/contexts/{name}/communities"): (None, "ndjson"),
    ("GET", "/contexts/{name}/export"): (None, "ndjson"),
    ("POST", "/import"): ("jsonl", "ImportResult"),
    ("POST", "/flush"): (None, "names"),
    ("POST", "/maintenance/compact"): (None, "MaintenanceSweep"),
    ("POST", "/contexts/{name}/rename"): ("RenameRequest", "bool"),
    ("POST", "/contexts/{name}/compact"): (None, "CompactOutcome"),
    ("POST", "/mcp"): ("JsonRpcRequest", "jsonrpc"),
    ("GET", "/protocol"): (None, "markdown"),
    ("GET", "/version"): (None, "bare:Version"),
    ("GET", "/health"): (None, "bare:Health"),
    ("GET", "/ready"): (None, "bare:Ready"),
    ("GET", "/live"): (None, "text"),
    ("GET", "/metrics"): (None, "metrics"),
    ("GET", "/openapi.json"): (None, "openapi"),
    **groups.ROUTE_SHAPES,
}
ROUTE_SHAPES.update(explain.ROUTE_SHAPES | audits.ROUTE_SHAPES)


def result_schema(shape: str) -> dict[str, Any]:
    """The JSON Schema of a successful body for a response shape name."""
    if shape.startswith("bare:"):
        return ref(shape[5:])
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
    return _obj({"result": inner, "status": {"const": "ok"}, "time": NUM})
