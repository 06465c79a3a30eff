"""server/decode.py: one engine for every typed body; positions only for a refused body."""

from __future__ import annotations

import pytest

from taguru_server.server import decode, positions
from taguru_server.server.openapi import published_specs
from taguru_server.server.routing import ROUTES
from taguru_server.server.wire.specs import BUDGET, CITATION, EVIDENCE
from taguru_server.stages.model import EvidenceRequest
from taguru_server.store.errors import ApiError

JSON = "application/json"


def refusal(spec: decode.Spec, raw: bytes) -> tuple[int, str]:
    with pytest.raises(ApiError) as err:
        spec.read(JSON, raw)
    return err.value.status, err.value.message.removeprefix(decode.PREFIX)


def test_success_never_looks_for_a_position(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_scan(*_args: object) -> None:
        raise AssertionError("a position was looked for on the success path")

    monkeypatch.setattr(positions, "_Locator", no_scan)
    args = EVIDENCE.read(JSON, b'{"origins":["a"],"labels":"l","budget":{"max_items":5000},"rerank":{},"explain":true}')
    assert args["origins"] == ["a"] and args["labels"] == ["l"] and args["explain"] is True
    assert args["budget"] == {"max_items": 1000, "max_bytes": 65536, "max_tokens": 4000}


def test_null_rules_are_field_properties() -> None:
    assert refusal(EVIDENCE, b'{"origins":null}') == (
        422,
        "origins: data did not match any variant of untagged enum OneOrMany at line 1 column 15",
    )
    assert refusal(EVIDENCE, b'{"origins":"x","include_communities":null}') == (
        422,
        "include_communities: invalid type: null, expected a boolean at line 1 column 41",
    )
    args = EVIDENCE.read(JSON, b'{"origins":"x","labels":null,"explain":null,"budget":null,"search_limit":null}')
    assert (args["labels"], args["explain"], args["budget"], args["search_limit"]) == ((), False, None, 5)


def test_duplicates_and_aliases() -> None:
    assert refusal(EVIDENCE, b'{"origins":"x",\n"x":{"model":1,"model":2}}') == (
        422,
        "duplicate field `model` at line 2 column 26",
    )
    assert EVIDENCE.read(JSON, b'{"origins":"x","other":1,"other":2}')["origins"] == ["x"]
    assert CITATION.read(JSON, b'{"source":"s","index":2}')["paragraph"] == 2
    assert refusal(CITATION, b'{"source":"s","paragraph":1,"index":2}') == (
        422,
        "index: duplicate field `paragraph` at line 1 column 37",
    )
    assert refusal(CITATION, b'{"source":"s"}') == (422, "missing field `paragraph` at line 1 column 14")


def test_positions_follow_the_refused_path() -> None:
    raw = b'{"origins":["x"],\n "budget": {"max_bytes": 1, "max_items": -1}}'
    assert refusal(EVIDENCE, raw) == (
        422,
        "budget.max_items: invalid value: integer `-1`, expected usize at line 2 column 43",
    )
    assert refusal(EVIDENCE, b'{"origins":["x"] , "labels": [1]}')[1].endswith("at line 1 column 32")


def test_item_caps_come_after_the_whole_shape() -> None:
    many = b'{"origins":[' + b",".join([b'"x"'] * 1001) + b"]"
    assert refusal(EVIDENCE, many + b',"explain":1}')[0] == 422
    with pytest.raises(ApiError) as err:
        EVIDENCE.read(JSON, many + b"}")
    assert (err.value.code, err.value.message) == (
        "over_limit",
        "origins carries 1001 items, past the per-request limit of 1000; split the request",
    )


def test_evidence_defaults_and_ceilings_live_in_the_model() -> None:
    plain = EvidenceRequest(origins=())
    defaults = BUDGET.decode_at({}, ())
    assert (defaults["max_items"], defaults["max_bytes"], defaults["max_tokens"]) == (
        plain.max_items,
        plain.max_bytes,
        plain.max_tokens,
    )
    args = EVIDENCE.decode_at({"origins": []}, ())
    for name in ("resolve_limit", "activate_decay", "activate_limit", "search_limit"):
        assert args[name] == getattr(plain, name)
    published = {f.name: f.description for f in EVIDENCE.fields} | {f.name: f.description for f in BUDGET.fields}
    assert published["resolve_limit"] == "default and ceiling 1000"
    assert published["activate_decay"] == "default 0.5"
    assert published["activate_limit"] == "default 20, ceiling 1000"
    assert published["search_limit"] == "default 5, ceiling 200"
    assert published["origins"] == "cue(s) to resolve into anchors (at most 1000)"
    assert published["max_bytes"] == "default 65536, ceiling 1048576"
    assert published["max_tokens"] == "default 4000"
    assert EVIDENCE in published_specs(ROUTES)
