"""The typed request bodies of the graph walks (explore, paths, unreachable_from).

They are published beside decode.py's own bodies (`/openapi.json` components) and decoded by the
same engine: 422 for a wrong shape or an unknown key in a closed cursor, then 400 over_limit for
more than 1000 origins or targets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taguru_server.server.decode import CURSOR, Field
from taguru_server.server.decode import _body as body
from taguru_server.store.read.walks import MAX_DEPTH

MAX_NAMES = 1000

EXPLORE_CURSOR = body(
    "ExploreCursor",
    Field("distance", "usize", "the last match's distance", True),
    Field("subject", "string", "", True),
    Field("label", "string", "", True),
    Field("object", "string", "", True),
    publish=False,
    closed=True,
)
EXPLORE = body(
    "ExploreRequest",
    Field("origins", "strings", "origin concepts", True, max_items=MAX_NAMES),
    Field("max_depth", "usize", "hop ceiling", default=MAX_DEPTH, ceiling=MAX_DEPTH),
    Field("limit", "usize", "page size", default=100, ceiling=1000),
    Field("after", "struct", "keyset cursor: the last match's distance and triple", nested=EXPLORE_CURSOR),
)
PATHS = body(
    "PathsRequest",
    Field("origins", "strings", "origin concepts", True, max_items=MAX_NAMES),
    Field("targets", "strings", "target concepts", True, max_items=MAX_NAMES),
    Field("max_depth", "usize", "hop ceiling", default=MAX_DEPTH, ceiling=MAX_DEPTH),
    Field("limit", "usize", "trails returned", default=10, ceiling=100),
)
UNREACHABLE_FROM = body(
    "UnreachableFromRequest",
    Field("origins", "strings", "origin concepts", True, max_items=MAX_NAMES),
    Field("limit", "usize", "page size", default=100, ceiling=1000),
    Field("after", "struct", "keyset cursor", nested=CURSOR),
)


def result_components(obj: Callable[..., dict[str, Any]], ref: Callable[[str], dict[str, str]]) -> dict[str, Any]:
    """The walks' result schemas (`schemas.py` passes its object and reference builders)."""
    _obj = obj
    INT = {"type": "integer", "minimum": 0}
    NUM = {"type": "number"}
    BOOL = {"type": "boolean"}
    STRS = {"type": "array", "items": {"type": "string"}}
    out: dict[str, Any] = {}
    out["ExplorePage"] = _obj(
        {
            "total": INT,
            "matches": {
                "type": "array",
                "items": _obj({"distance": INT, "path": STRS, "association": ref("AssociationOut")}),
            },
        }
    )
    out["PathsPage"] = _obj(
        {
            "total": INT,
            "capped": BOOL,
            "matches": {
                "type": "array",
                "items": _obj(
                    {
                        "distance": INT,
                        "path": STRS,
                        "strength": NUM,
                        "associations": {"type": "array", "items": ref("AssociationOut")},
                    }
                ),
            },
        }
    )
    out["Orphans"] = _obj({"total": INT, "matches": {"type": "array", "items": ref("AssociationOut")}})
    return out
