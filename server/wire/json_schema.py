"""The JSON Schema building blocks every wire module writes its shapes with."""

from __future__ import annotations

from typing import Any

INT = {"type": "integer", "minimum": 0}
NUM = {"type": "number"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
STRS = {"type": "array", "items": STR}
NULL_STR = {"type": ["string", "null"]}


def obj(props: dict[str, Any], required: list[str] | None = None, closed: bool = True) -> dict[str, Any]:
    """An object schema: these properties, all required unless `required` names some, closed unless told."""
    out: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
    }
    if closed:
        out["additionalProperties"] = False
    return out


def ref(name: str) -> dict[str, str]:
    """A reference to a component of the document."""
    return {"$ref": f"#/components/schemas/{name}"}


# the fields of an association and of a passage hit, as one context's results and the cross-context ones
# (which add the context's name first) both publish them
ASSOCIATION: dict[str, Any] = {
    "subject": STR,
    "label": STR,
    "object": STR,
    "weight": NUM,
    "count": INT,
    "attributions": {"type": "array", "items": ref("Attribution")},
}
PASSAGE_HIT: dict[str, Any] = {
    "source": STR,
    "paragraph": INT,
    "score": NUM,
    "text": STR,
    "lanes": obj({"bm25": ref("LaneEvidence"), "vector": ref("LaneEvidence"), "graph": ref("LaneEvidence")}, []),
}
