"""The wire shapes of the group and cross-context routes: their typed request bodies and result schemas.

`schemas.py` publishes both in `/openapi.json` with every other route's shapes.
"""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import DESCRIPTION, MAX_INPUT, PUBLISHED, SEARCH, SHORT_NAME, Field, Spec, given


def _spec(struct: str, *fields: Field, publish: bool = True, **rules: Any) -> Spec:
    spec = Spec(struct, fields, **rules)
    if publish:
        PUBLISHED.append(spec)
    return spec


GROUP_CREATE = _spec(
    "GroupCreate",
    Field("description", "string", "free text", default="", null_is_absent=False, rules=DESCRIPTION),
    Field("contexts", "strings", "member contexts (registered)", default=(), null_is_absent=False, rules=MAX_INPUT),
    Field("groups", "strings", "child groups (registered)", default=(), null_is_absent=False, rules=MAX_INPUT),
)
GROUP_PATCH = _spec(
    "GroupPatch",
    Field("description", "string", "the new description; absent or null leaves it", rules=DESCRIPTION),
    Field("add_contexts", "strings", "member contexts to add", default=(), null_is_absent=False, rules=MAX_INPUT),
    Field("remove_contexts", "strings", "member contexts to remove", default=(), null_is_absent=False, rules=MAX_INPUT),
    Field("add_groups", "strings", "child groups to add", default=(), null_is_absent=False, rules=MAX_INPUT),
    Field("remove_groups", "strings", "child groups to remove", default=(), null_is_absent=False, rules=MAX_INPUT),
)
GROUP_RENAME = _spec("GroupRename", Field("to", "string", "the new group name", True, rules=SHORT_NAME))
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
    Field("contexts", "strings", "contexts to search, in this order", rules=MAX_INPUT),
    Field("groups", "strings", "groups whose member contexts are searched too", rules=MAX_INPUT),
)
# at least one target: a non-empty `contexts` or `groups`
_SOME_TARGET = {"anyOf": [given("contexts", contexts={"minItems": 1}), given("groups", groups={"minItems": 1})]}
# recall and query refuse any window across contexts (400)
_NO_WINDOW = {"type": "null"}
CROSS_RECALL = _spec(
    "CrossRecallRequest",
    *_TARGETS,
    Field("cue", "string", "exact spelling of a subject, object or label", True),
    Field("limit", "usize", "default 100, ceiling 1000"),
    Field("after", "struct", "keyset cursor", nested=CROSS_CURSOR),
    Field("since", "u64", "not supported across contexts: only null", rules=_NO_WINDOW),
    Field("until", "u64", "not supported across contexts: only null", rules=_NO_WINDOW),
    description="names at least one target",
    rules=(_SOME_TARGET,),
)
CROSS_QUERY = _spec(
    "CrossQueryRequest",
    *_TARGETS,
    Field("subject", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field("label", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field("object", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field("subject_types", "strings", "schema types (no schemas here: any filters every match away)", rules=MAX_INPUT),
    Field("object_types", "strings", "schema types (no schemas here: any filters every match away)", rules=MAX_INPUT),
    Field("limit", "usize", "default 100, ceiling 1000"),
    Field("after", "struct", "keyset cursor", nested=CROSS_CURSOR),
    Field("since", "u64", "not supported across contexts: only null", rules=_NO_WINDOW),
    Field("until", "u64", "not supported across contexts: only null", rules=_NO_WINDOW),
    description="names at least one target, and pins one of subject, label, object (a name or a non-empty set)",
    rules=(
        _SOME_TARGET,
        {"anyOf": [given(k, **{k: {"minItems": 1}}) for k in ("subject", "label", "object")]},
    ),
)
CROSS_SEARCH = _spec(
    "CrossSearchRequest",
    *_TARGETS,
    *SEARCH.fields,
    description=f"names at least one target; {SEARCH.description}",
    rules=(_SOME_TARGET,),
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
