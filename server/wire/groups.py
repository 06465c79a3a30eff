"""The wire shapes of the group and cross-context routes: their typed request bodies and result schemas.

The routes name them in their records; `/openapi.json` publishes them with every other route's shapes.
"""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import Field, given
from taguru_server.server.wire.json_schema import ASSOCIATION, INT, PASSAGE_HIT, STR, STRS, obj, ref
from taguru_server.server.wire.specs import DESCRIPTION, MAX_INPUT, SEARCH, SHORT_NAME, body, cursor

GROUP_CREATE = body(
    "GroupCreate",
    Field("description", "string", "free text", default="", null_is_absent=False, rules=DESCRIPTION),
    Field("contexts", "strings", "member contexts (registered)", default=(), null_is_absent=False, rules=MAX_INPUT),
    Field("groups", "strings", "child groups (registered)", default=(), null_is_absent=False, rules=MAX_INPUT),
)
GROUP_PATCH = body(
    "GroupPatch",
    Field("description", "string", "the new description; absent or null leaves it", rules=DESCRIPTION),
    Field("add_contexts", "strings", "member contexts to add", default=(), null_is_absent=False, rules=MAX_INPUT),
    Field("remove_contexts", "strings", "member contexts to remove", default=(), null_is_absent=False, rules=MAX_INPUT),
    Field("add_groups", "strings", "child groups to add", default=(), null_is_absent=False, rules=MAX_INPUT),
    Field("remove_groups", "strings", "child groups to remove", default=(), null_is_absent=False, rules=MAX_INPUT),
)
GROUP_RENAME = body("GroupRename", Field("to", "string", "the new group name", True, rules=SHORT_NAME))
CROSS_CURSOR = cursor(
    "CrossCursor", Field("weight", "f64", "the last match's weight", True), Field("context", "string", "", True)
)
_TARGETS = (
    Field("contexts", "strings", "contexts to search, in this order", rules=MAX_INPUT),
    Field("groups", "strings", "groups whose member contexts are searched too", rules=MAX_INPUT),
)
# at least one target: a non-empty `contexts` or `groups`
_SOME_TARGET = {"anyOf": [given("contexts", contexts={"minItems": 1}), given("groups", groups={"minItems": 1})]}
# recall and query refuse any window across contexts (400)
_NO_WINDOW = {"type": "null"}
CROSS_RECALL = body(
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
CROSS_QUERY = body(
    "CrossQueryRequest",
    *_TARGETS,
    Field("subject", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field("label", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field("object", "one_or_many", "a name or an OR-set of names", rules=MAX_INPUT),
    Field(
        "subject_types",
        "one_or_many",
        "a schema type or an OR-set: keep matches whose subject is one (or a subtype), per target's schema",
        rules=MAX_INPUT,
    ),
    Field(
        "object_types",
        "one_or_many",
        "a schema type or an OR-set: keep matches whose object is one (or a subtype), per target's schema",
        rules=MAX_INPUT,
    ),
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
CROSS_SEARCH = body(
    "CrossSearchRequest",
    *_TARGETS,
    *SEARCH.fields,
    description=f"names at least one target; {SEARCH.description}",
    rules=(_SOME_TARGET,),
)

COMPONENTS: dict[str, Any] = {
    "GroupEntry": obj({"name": STR, "description": STR, "contexts": STRS, "groups": STRS, "fingerprint": STR}),
    "GroupList": obj({"total": INT, "groups": {"type": "array", "items": ref("GroupEntry")}}),
    "CrossMatches": obj(
        {
            "total": INT,
            "matches": {
                "type": "array",
                "items": obj({"context": STR, **ASSOCIATION}),
            },
            "plan": obj({"contexts": STRS}),
        }
    ),
    "CrossSearchResult": obj(
        {
            "plan": ref("SearchPlan"),
            "hits": {
                "type": "array",
                "items": obj({"context": STR, **PASSAGE_HIT}),
            },
        }
    ),
}
