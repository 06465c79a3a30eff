"""The wire shapes of the group and cross-context routes: their typed request bodies and result schemas.

`schemas.py` publishes both in `/openapi.json` with every other route's shapes.
"""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import PUBLISHED, SEARCH, Field, Spec


def _spec(struct: str, *fields: Field, publish: bool = True, **rules: Any) -> Spec:
    spec = Spec(struct, fields, **rules)
    if publish:
        PUBLISHED.append(spec)
    return spec


GROUP_CREATE = _spec(
    "GroupCreate",
    Field("description", "string", "free text, at most 4096 bytes", default="", null_is_absent=False),
    Field("contexts", "strings", "member contexts (registered; at most 1000)", default=(), null_is_absent=False),
    Field("groups", "strings", "child groups (registered; at most 1000)", default=(), null_is_absent=False),
)
GROUP_PATCH = _spec(
    "GroupPatch",
    Field("description", "string", "the new description; absent or null leaves it"),
    Field("add_contexts", "strings", "member contexts to add", default=(), null_is_absent=False),
    Field("remove_contexts", "strings", "member contexts to remove", default=(), null_is_absent=False),
    Field("add_groups", "strings", "child groups to add", default=(), null_is_absent=False),
    Field("remove_groups", "strings", "child groups to remove", default=(), null_is_absent=False),
)
GROUP_RENAME = _spec("GroupRename", Field("to", "string", "the new group name, at most 64 bytes", True))
CROSS_CURSOR = _spec(
    "CrossCursor",
    Field("weight", "f64", "the last match's weight", True),
    Field("context", "string", "", True),
    Field("subject", "string", "", True),
    Field("label", "string", "", True),
    Field("object", "string", "", True),
    publish=False,
    closed=True,
)
_TARGETS = (
    Field("contexts", "strings", "contexts to search, in this order (at most 1000)"),
    Field("groups", "strings", "groups whose member contexts are searched too (at most 1000)"),
)
CROSS_RECALL = _spec(
    "CrossRecallRequest",
    *_TARGETS,
    Field("cue", "string", "exact spelling of a subject, object or label", True),
    Field("limit", "usize", "default 100, ceiling 1000"),
    Field("after", "struct", "keyset cursor", nested=CROSS_CURSOR),
    Field("since", "u64", "not supported across contexts"),
    Field("until", "u64", "not supported across contexts"),
)
CROSS_QUERY = _spec(
    "CrossQueryRequest",
    *_TARGETS,
    Field("subject", "one_or_many", "a name or an OR-set of names"),
    Field("label", "one_or_many", "a name or an OR-set of names"),
    Field("object", "one_or_many", "a name or an OR-set of names"),
    Field("subject_types", "strings", "schema types (no schemas here: any filters every match away)"),
    Field("object_types", "strings", "schema types (no schemas here: any filters every match away)"),
    Field("limit", "usize", "default 100, ceiling 1000"),
    Field("after", "struct", "keyset cursor", nested=CROSS_CURSOR),
    Field("since", "u64", "not supported across contexts"),
    Field("until", "u64", "not supported across contexts"),
)
CROSS_SEARCH = _spec(
    "CrossSearchRequest",
    *_TARGETS,
    *SEARCH.fields,
)

STR = {"type": "string"}
INT = {"type": "integer", "minimum": 0}
NUM = {"type": "number"}
STRS = {"type": "array", "items": STR}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
    }


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


COMPONENTS: dict[str, Any] = {
    "GroupEntry": _obj({"name": STR, "description": STR, "contexts": STRS, "groups": STRS, "fingerprint": STR}),
    "GroupList": _obj({"total": INT, "groups": {"type": "array", "items": ref("GroupEntry")}}),
    "CrossMatches": _obj(
        {
            "total": INT,
            "matches": {
                "type": "array",
                "items": _obj(
                    {
                        "context": STR,
                        "subject": STR,
                        "label": STR,
                        "object": STR,
                        "weight": NUM,
                        "count": INT,
                        "attributions": {"type": "array", "items": ref("Attribution")},
                    }
                ),
            },
            "plan": _obj({"contexts": STRS}),
        }
    ),
    "CrossSearchResult": _obj(
        {
            "plan": ref("SearchPlan"),
            "hits": {
                "type": "array",
                "items": _obj(
                    {
                        "context": STR,
                        "source": STR,
                        "paragraph": INT,
                        "score": NUM,
                        "text": STR,
                        "lanes": _obj({"bm25": ref("LaneEvidence"), "vector": ref("LaneEvidence")}, []),
                    }
                ),
            },
        }
    ),
}

ROUTE_SHAPES: dict[tuple[str, str], tuple[str | None, str]] = {
    ("GET", "/groups"): (None, "GroupList"),
    ("PUT", "/groups/{name}"): ("GroupCreate", "bool"),
    ("GET", "/groups/{name}"): (None, "GroupEntry"),
    ("PATCH", "/groups/{name}"): ("GroupPatch", "GroupEntry"),
    ("DELETE", "/groups/{name}"): (None, "bool"),
    ("POST", "/groups/{name}/rename"): ("GroupRename", "bool"),
    ("GET", "/groups/{name}/export"): (None, "ndjson"),
    ("POST", "/recall"): ("CrossRecallRequest", "CrossMatches"),
    ("POST", "/query"): ("CrossQueryRequest", "CrossMatches"),
    ("POST", "/sources/search"): ("CrossSearchRequest", "CrossSearchResult"),
}
