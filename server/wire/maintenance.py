"""The result schemas of compaction and the maintenance sweep, which `schemas.py` adds to `/openapi.json`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

INT = {"type": "integer", "minimum": 0}
STR = {"type": "string"}
BOOL = {"type": "boolean"}


def result_components(obj: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """`CompactOutcome` and `MaintenanceSweep` (`schemas.py` passes its object builder)."""
    _obj = obj
    out: dict[str, Any] = {}
    _COMPACT_FIELDS = {
        "bytes_before": INT,
        "bytes_after": INT,
        "dead_edges": INT,
        "aliases_dropped": INT,
        "passages_compacted": BOOL,
        "image_persisted": BOOL,
    }
    out["CompactOutcome"] = _obj(_COMPACT_FIELDS)
    out["MaintenanceSweep"] = _obj(
        {
            "contexts": {"type": "array", "items": _obj({"name": STR, **_COMPACT_FIELDS})},
            "deadline_exceeded": BOOL,
            "skipped": {"type": "array", "items": _obj({"name": STR, "error": STR})},
        }
    )
    return out
