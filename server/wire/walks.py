"""The wire shapes of the graph walks (explore, paths, unreachable_from): request bodies and results.

The bodies are decoded by the same engine as every other: 422 for a wrong shape or an unknown key
in a closed cursor, then 400 over_limit for more than 1000 origins or targets.
"""

from __future__ import annotations

from typing import Any

from taguru_server.server.decode import Field
from taguru_server.server.wire.json_schema import BOOL, INT, NUM, STRS, obj, ref
from taguru_server.server.wire.specs import CURSOR, WINDOW, body, cursor
from taguru_server.store.read.walks import MAX_DEPTH

MAX_NAMES = 1000

EXPLORE_CURSOR = cursor("ExploreCursor", Field("distance", "usize", "the last match's distance", True))
EXPLORE = body(
    "ExploreRequest",
    Field("origins", "strings", "origin concepts", True, max_items=MAX_NAMES),
    Field("max_depth", "usize", "hop ceiling", default=MAX_DEPTH, ceiling=MAX_DEPTH),
    Field("limit", "usize", "page size", default=100, ceiling=1000),
    Field("after", "struct", "keyset cursor: the last match's distance and triple", nested=EXPLORE_CURSOR),
    *WINDOW,
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

COMPONENTS: dict[str, Any] = {
    "ExplorePage": obj(
        {
            "total": INT,
            "matches": {
                "type": "array",
                "items": obj({"distance": INT, "path": STRS, "association": ref("AssociationOut")}),
            },
        }
    ),
    "PathsPage": obj(
        {
            "total": INT,
            "capped": BOOL,
            "matches": {
                "type": "array",
                "items": obj(
                    {
                        "distance": INT,
                        "path": STRS,
                        "strength": NUM,
                        "associations": {"type": "array", "items": ref("AssociationOut")},
                    }
                ),
            },
        }
    ),
    "Orphans": obj({"total": INT, "matches": {"type": "array", "items": ref("AssociationOut")}}),
}
