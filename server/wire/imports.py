"""The `POST /import` body as `/openapi.json` publishes it: one JSON record per line (JSONL), written as
the array of its lines' records, each closed as `store/transfer/import_records.py` and
`store/transfer/group_import.py` read it.

JSON Schema states each line; the rules between lines are said in the description (the importer
refuses them with a 400 naming the line): a batch header opens every batch (a group record closes
one), one batch per (context, source), at most one passage line and one statement of an alias per
batch, at most 8 questions per paragraph, a paragraph reference only in a batch with a passage line,
one record per group name. A `maxLength` is the importer's cap, which counts UTF-8 bytes (so a string
of that many characters can still be over it).
"""

from __future__ import annotations

from typing import Any

from taguru_server.store.persist.groups import MAX_GROUP_NAME_BYTES
from taguru_server.store.transfer import import_records


def _text(cap: int, empty: bool = False) -> dict[str, Any]:
    return {"type": "string", "maxLength": cap} if empty else {"type": "string", "minLength": 1, "maxLength": cap}


def _line(props: dict[str, Any], *required: str) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _uint(top: int, optional: bool) -> dict[str, Any]:
    return {"type": ["integer", "null"] if optional else "integer", "minimum": 0, "maximum": top}


NAME = _text(import_records.MAX_NAME_BYTES)
PARAGRAPH = _uint(import_records.MAX_U32, False)
FLOOR = {"type": ["number", "null"]}
LINES: dict[str, dict[str, Any]] = {
    "header": _line(
        {
            "taguru_batch": {"const": 1},
            "context": _text(import_records.MAX_CONTEXT_NAME_BYTES),
            "source": NAME,
            "create": {
                "type": ["object", "null"],
                "properties": {
                    "description": _text(import_records.MAX_DESCRIPTION_BYTES, empty=True),
                    "pinned": {"type": "boolean"},
                    "dice_floor": FLOOR,
                    "semantic_floor": FLOOR,
                },
                "additionalProperties": False,
            },
        },
        "taguru_batch",
        "context",
        "source",
    ),
    "association": _line(
        {
            "subject": NAME,
            "label": NAME,
            "object": NAME,
            "weight": {"type": "number", "minimum": -import_records.MAX_WEIGHT, "maximum": import_records.MAX_WEIGHT},
            "paragraph": _uint(import_records.MAX_U32, True),
        },
        "subject",
        "label",
        "object",
        "weight",
    ),
    "alias": _line(
        {"alias": NAME, "canonical": NAME, "kind": {"enum": ["concept", "label"]}}, "alias", "canonical", "kind"
    ),
    "passage": _line(
        {
            "passage": _text(import_records.MAX_PASSAGE_BYTES, empty=True),
            "stored_at": _uint(import_records.MAX_U64, True),
            "date": _uint(import_records.MAX_U64, True),
            "tags": {
                "type": ["array", "null"],
                "maxItems": import_records.MAX_TAGS,
                "items": _text(import_records.MAX_TAG_BYTES),
            },
        },
        "passage",
    ),
    "question": _line(
        {"paragraph": PARAGRAPH, "question": _text(import_records.MAX_QUESTION_BYTES)}, "paragraph", "question"
    ),
    "section": _line(
        {"paragraph": PARAGRAPH, "section": _text(import_records.MAX_SECTION_BYTES)}, "paragraph", "section"
    ),
    "locator": _line(
        {
            "paragraph": PARAGRAPH,
            "locator": _line(
                {
                    "kind": _text(import_records.MAX_LOCATOR_KIND_BYTES),
                    "value": _text(import_records.MAX_LOCATOR_VALUE_BYTES),
                },
                "kind",
                "value",
            ),
        },
        "paragraph",
        "locator",
    ),
    "group": _line(
        {
            "taguru_group": {"const": 1},
            "name": _text(MAX_GROUP_NAME_BYTES),
            "description": _text(import_records.MAX_DESCRIPTION_BYTES, empty=True),
            "contexts": {"type": "array", "items": _text(MAX_GROUP_NAME_BYTES)},
            "groups": {"type": "array", "items": _text(MAX_GROUP_NAME_BYTES)},
        },
        "taguru_group",
        "name",
    ),
}
COMPONENTS: dict[str, Any] = {
    "ImportStream": {
        "type": "array",
        "minItems": 1,
        "prefixItems": [{"anyOf": [LINES["header"], LINES["group"]]}],
        "items": {"anyOf": list(LINES.values())},
        "description": (
            "JSONL: each item is one line. A batch header opens every batch (a group record closes one); one "
            "batch per (context, source); at most one passage line, one statement of each alias, and 8 questions "
            "per paragraph in a batch; a paragraph reference needs the batch's passage line; one record per "
            "group name; at most 1000 distinct contexts and groups per group record. A maxLength is the importer's "
            "cap in UTF-8 bytes."
        ),
    }
}
