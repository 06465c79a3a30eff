"""The explain routes' wire shapes: their typed request bodies (decoded and published like every other)
and the JSON Schemas of their results."""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import Field, Spec
from taguru_server.server.wire.json_schema import BOOL, INT, NUM, STR, STRS, obj
from taguru_server.server.wire.specs import SOURCE_FILTER, SOURCE_FILTER_RULES

RESOLVE_EXPLAIN = Spec(
    "ExplainResolveRequest",
    (
        Field("cue", "string", "the wording whose resolve is explained", True),
        Field("expected", "string", "the name the caller expected back", True),
        Field("dice_floor", "f64", "fuzzy floor override"),
        Field("semantic_floor", "f32", "semantic floor override"),
        Field("limit", "usize", "default and ceiling 1000"),
    ),
)
SEARCH_EXPLAIN = Spec(
    "ExplainSearchRequest",
    (
        Field("query", "string", "the search text being explained", True),
        Field("source", "string", "the source id expected among the hits", True),
        Field("paragraph", "u32", "paragraph index (0-based); omitted means the source's best showing"),
        Field("index", "u32", "deprecated alias of paragraph", alias_of="paragraph"),
        Field("limit", "usize", "default 5, ceiling 1000"),
        Field("semantic_floor", "f32", "vector-lane floor"),
        *SOURCE_FILTER,
    ),
    description=SOURCE_FILTER_RULES,
)

_NEAREST = obj({"name": STR, "score": NUM, "kind": STR})
RESOLVE_EXPLANATION = obj(
    {
        "verdict": STR,
        "summary": STR,
        "cue": STR,
        "expected": STR,
        "in_vocabulary": BOOL,
        "canonical": STR,
        "expected_kind": STR,
        "lexical": obj({"score": NUM, "kind": STR, "floor": NUM, "confident": BOOL}, ["floor", "confident"]),
        "semantic": obj(
            {"entered": BOOL, "reason": STR, "floor": NUM, "cosine": NUM, "rank": INT, "cap": INT}, ["entered"]
        ),
        "ranking": obj(
            {"rank": INT, "tier": STR, "score": NUM, "limit": INT, "served": BOOL, "limit_to_reach": INT},
            ["limit", "served"],
        ),
        "nearest": obj(
            {
                "lexical": {"type": "array", "items": _NEAREST},
                "semantic": {"type": "array", "items": obj({"name": STR, "cosine": NUM})},
                "semantic_note": STR,
            },
            ["lexical", "semantic"],
        ),
    },
    ["verdict", "summary", "cue", "expected", "in_vocabulary"],
)
_TERM = obj({"term": STR, "tf": NUM, "df": INT, "idf": NUM, "contribution": NUM})
SEARCH_EXPLANATION = obj(
    {
        "verdict": STR,
        "summary": STR,
        "source": STR,
        "paragraph": INT,
        "paragraphs": INT,
        "paragraph_named": BOOL,
        "query_terms": STRS,
        "paragraph_terms": STRS,
        "bm25": obj({"rank": INT, "score": NUM, "terms": {"type": "array", "items": _TERM}}, ["score", "terms"]),
        "vector": obj({"ran": BOOL, "reason": STR, "floor": NUM, "cosine": NUM, "rank": INT}, ["ran"]),
        "ranking": obj(
            {
                "fused": BOOL,
                "ranked": INT,
                "rank": INT,
                "score": NUM,
                "limit": INT,
                "served": BOOL,
                "cutoff_score": NUM,
                "limit_to_reach": INT,
                "limit_to_reach_reason": {"const": "unreachable"},
            },
            ["fused", "ranked", "limit", "served"],
        ),
    },
    ["verdict", "summary", "source"],
)

COMPONENTS: dict[str, Any] = {
    "ResolveExplanation": RESOLVE_EXPLANATION,
    "SearchExplanation": SEARCH_EXPLANATION,
}
