"""How serde names a JSON value in a typed-body refusal."""

from __future__ import annotations

import json
from typing import Any


def describe_value(v: Any) -> str:
    """How serde names an unexpected JSON value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{_serde_float(v)}`"
    if isinstance(v, str):
        return "string " + json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "sequence"
    return "map"


def _serde_float(v: float) -> str:
    r = repr(v)
    return r if ("." in r or "e" in r or "inf" in r or "nan" in r) else r + ".0"
