"""The typed request bodies of the context routes: what each handler decodes and `/openapi.json` publishes.

A route names its body in its record (`server/call.py: Route`); the document publishes each one
once, in route-table order. The group, cross-context, walk, explain and audit bodies are in their
own modules of this package and are built with the same helpers.
"""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import MAX_NAME_BYTES, Field, Spec, given
from taguru_server.stages import model

# The handlers' refusals as published keywords. A `maxLength` is the handler's byte cap: the server
# counts UTF-8 bytes, so a string of that many characters can still be over it.
NAME = {"minLength": 1, "maxLength": MAX_NAME_BYTES}  # a name refused empty or over 1024 bytes
NAMES = {"items": {"type": "string", **NAME}}
SHORT_NAME = {"minLength": 1, "maxLength": 64}  # a context or group name
DESCRIPTION = {"maxLength": 4096}
TAGS = {"items": {"type": "string", "minLength": 1, "maxLength": 128}}
MAX_INPUT = {"maxItems": 1000}  # a list input the handler refuses past 1000 names (400 over_limit)


def body(struct: str, *fields: Field, **options: Any) -> Spec:
    """A typed body of these fields (`options` are the other `Spec` attributes)."""
    return Spec(struct, fields, **options)


def cursor(struct: str, *lead: Field) -> Spec:
    """A closed keyset cursor: the ordering fields `lead`, then the last match's triple."""
    triple = (
        Field("subject", "string", "", True),
        Field("label", "string", "", True),
        Field("object", "string", "", True),
    )
    return Spec(struct, (*lead, *triple), closed=True)


CONTEXT_CONFIG = body(
    "ContextConfig",
    Field("description", "string", "free text", rules=DESCRIPTION),
    Field("pinned", "bool", "advisory"),
    Field("dice_floor", "f64", "resolve's fuzzy floor, clamped to [0, 1]; null means 0.3"),
    Field("semantic_floor", "f32", "semantic floor, clamped to [0, 1]; null means 0.35"),
)
CONTEXT_PATCH = body("ContextPatch", *CONTEXT_CONFIG.fields, component="ContextConfig")
TRIPLE = body(
    "TripleRequest",
    Field("subject", "string", "exact spelling", True, rules=NAME),
    Field("label", "string", "exact spelling", True, rules=NAME),
    Field("object", "string", "exact spelling", True, rules=NAME),
)
ALIAS_REMOVAL = body(
    "AliasRemoval",
    Field("concepts", "strings", "concept alias spellings to remove"),
    Field("labels", "strings", "label alias spellings to remove"),
    description="names at least one alias (at most 10000 in all)",
    rules=({"anyOf": [given("concepts", concepts={"minItems": 1}), given("labels", labels={"minItems": 1})]},),
)
LOOKUP = body(
    "LookupRequest",
    Field("sources", "strings", "source ids", True, rules={**NAMES, **MAX_INPUT}),
)
RETRACT_SOURCE = body("RetractSource", Field("source", "string", "the source id", True, rules=NAME))
CITATION = body(
    "CitationRequest",
    Field("source", "string", "the source id", True, rules=NAME),
    Field("paragraph", "u32", "paragraph index (0-based)", True),
    Field("index", "u32", "deprecated alias of paragraph", alias_of="paragraph"),
)
RESOLVE = body(
    "ResolveRequest",
    Field("cue", "string", "the wording to resolve", True),
    Field("dice_floor", "f64", "fuzzy floor override"),
    Field("semantic_floor", "f32", "semantic floor override"),
    Field("limit", "usize", "default and ceiling 1000"),
)
DESCRIBE = body("DescribeRequest", Field("concept", "string", "exact spelling", True))
CURSOR = cursor("Cursor", Field("weight", "f64", "the last match's weight", True))
# the assertion-time window of the graph reads: the sources whose `date ?? stored_at` is in [since, until)
WINDOW = (
    Field("since", "u64", "assertion-time window start, epoch seconds, inclusive"),
    Field("until", "u64", "assertion-time window end, epoch seconds, exclusive"),
)
QUERY = body(
    "QueryRequest",
    Field("subject", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field("label", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field("object", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field("limit", "usize", "default 100, ceiling 1000"),
    Field("after", "struct", "keyset cursor", nested=CURSOR),
    Field("subject_types", "one_or_many", "a type or an OR-set of types the subject declares", rules=MAX_INPUT),
    Field("object_types", "one_or_many", "a type or an OR-set of types the object declares", rules=MAX_INPUT),
    *WINDOW,
    description="pins at least one of subject, label, object (each at most 1000 names)",
    rules=({"anyOf": [given("subject"), given("label"), given("object")]},),
)
RECALL = body(
    "RecallRequest",
    Field("cue", "string", "exact spelling of a subject, object or label", True),
    Field("limit", "usize", "default 100, ceiling 1000"),
    Field("after", "struct", "keyset cursor", nested=CURSOR),
    *WINDOW,
)
ACTIVATE = body(
    "ActivateRequest",
    Field("origins", "strings", "origin concepts", True, rules=MAX_INPUT),
    Field("decay", "f64", "default 0.5, clamped to [0, 1]"),
    Field("limit", "usize", "default 20, ceiling 1000"),
    *WINDOW,
)
SOURCE_FILTER = (
    Field("tags", "strings", "eligible sources carry any of these tags", rules={**TAGS, **MAX_INPUT}),
    Field("since", "u64", "epoch seconds, inclusive"),
    Field("until", "u64", "epoch seconds, exclusive"),
)
SOURCE_FILTER_RULES = "at most 32 distinct tags; since, when both are given, is before until"
SEARCH = body(
    "SearchRequest",
    Field("query", "string", "search text", True),
    Field("limit", "usize", "default 5, ceiling 1000"),
    Field("semantic_floor", "f32", "vector-lane floor (no provider here)"),
    *SOURCE_FILTER,
    description=SOURCE_FILTER_RULES,
)
COMMUNITY_SEARCH = body(
    "CommunitySearchRequest",
    Field("query", "string", "search text", True),
    Field("limit", "usize", "default 5, ceiling 1000"),
    Field("semantic_floor", "f32", "vector-lane floor"),
    Field("derived", "string", "artifact context (default {name}::communities)", rules={"maxLength": MAX_NAME_BYTES}),
)
BUDGET = body(
    "BudgetRequest",
    Field("max_items", "usize", default=model.DEFAULT_MAX_ITEMS, ceiling=model.MAX_ITEMS_CEILING),
    Field("max_bytes", "usize", default=model.DEFAULT_MAX_BYTES, ceiling=model.MAX_BYTES_CEILING),
    Field("max_tokens", "usize", default=model.DEFAULT_MAX_TOKENS),
)
RERANK = body("RerankRequest", Field("model", "string", "pins the configured reranker model"))
EVIDENCE = body(
    "EvidenceRequest",
    Field(
        "origins", "one_or_many", "cue(s) to resolve into anchors", True, max_items=model.MAX_CUES, null_is_absent=False
    ),
    Field("labels", "one_or_many", "relation labels for the query lane", default=(), max_items=model.MAX_CUES),
    Field("dice_floor", "f64", "resolve fuzzy floor override"),
    Field("semantic_floor", "f32", "semantic floor override"),
    Field("resolve_limit", "usize", default=model.DEFAULT_RESOLVE_LIMIT, ceiling=model.MATCH_LIMIT_CEILING),
    Field("activate_decay", "f64", default=model.DEFAULT_ACTIVATE_DECAY),
    Field("activate_limit", "usize", default=model.DEFAULT_ACTIVATE_LIMIT, ceiling=model.MATCH_LIMIT_CEILING),
    Field("text_fallback_query", "string", "passage/community search text; default origins joined with '; '"),
    Field("search_limit", "usize", default=model.DEFAULT_SEARCH_LIMIT, ceiling=model.SEARCH_LIMIT_CEILING),
    Field(
        "include_communities",
        "bool",
        "search the {name}::communities artifact (null is a 422)",
        default=False,
        null_is_absent=False,
    ),
    Field(
        "include_graph_passages",
        "bool",
        "add the graph-ranked passage lane and its fusion; absent or null: the server's default "
        "(TAGURU_EVIDENCE_GRAPH_PASSAGES, off unless set)",
    ),
    Field("budget", "struct", "three independent hard ceilings", nested=BUDGET),
    Field("rerank", "struct", "ask the configured reranker to reorder the survivors", nested=RERANK),
    Field("explain", "bool", "add plan.stages (one entry per stage)", default=False),
    refuse_duplicates=True,
)
RENAME = body("RenameRequest", Field("to", "string", "the new context name", True, rules=SHORT_NAME))
ALIAS_MAP = {"propertyNames": NAME, "additionalProperties": {"type": "string", **NAME}}
ALIASES = body(
    "AliasRequest",
    Field("concepts", "string_map", "alias → canonical", rules=ALIAS_MAP),
    Field("labels", "string_map", "alias → canonical", rules=ALIAS_MAP),
    component="AliasRegistration",
)
