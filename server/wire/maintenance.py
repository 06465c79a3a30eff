"""The result schemas of compaction and the maintenance sweep."""

from __future__ import annotations

from typing import Any

from taguru_server.server.wire.json_schema import BOOL, INT, STR, obj

_COMPACT_FIELDS = {
    "bytes_before": INT,
    "bytes_after": INT,
    "dead_edges": INT,
    "aliases_dropped": INT,
    "passages_compacted": BOOL,
    "image_persisted": BOOL,
}
COMPONENTS: dict[str, Any] = {
    "CompactOutcome": obj(_COMPACT_FIELDS),
    "MaintenanceSweep": obj(
        {
            "contexts": {"type": "array", "items": obj({"name": STR, **_COMPACT_FIELDS})},
            "deadline_exceeded": BOOL,
            "skipped": {"type": "array", "items": obj({"name": STR, "error": STR})},
        }
    ),
}
