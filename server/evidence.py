"""POST /contexts/{name}/evidence: request decoding, the stage-graph run, the package."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import structlog

from taguru_server.pipeline import Graph, run_graph
from taguru_server.server.body import PREFIX, Spans, describe_value, require_json
from taguru_server.server.handlers import Call
from taguru_server.server.reply import Reply
from taguru_server.server.schemas import BUDGET, EVIDENCE, RERANK
from taguru_server.stages.model import CONTEXT, REQUEST, SERVICES, EvidenceRequest, NoReranker, Services, gate
from taguru_server.stages.package import render_package, server_timing
from taguru_server.stages.wiring import evidence_graph
from taguru_server.store.errors import ApiError, malformed, no_context, too_many_items
from taguru_server.store.wire import has_lone_surrogate

log = structlog.get_logger("taguru.evidence")

MAX_U64 = 2**64 - 1
MAX_ITEMS_CEILING = 1000
MAX_BYTES_CEILING = 1048576
SEARCH_LIMIT_CEILING = 200
MATCH_CEILING = 1000
GRAPH: Graph = evidence_graph()

_TOP_FIELDS = tuple(f.name for f in EVIDENCE.fields)


class _Decoder:
    """serde-style typed decoding of the evidence body (422 texts with line/column)."""

    def __init__(self, raw: bytes, value: Any) -> None:
        self.spans = Spans(raw)
        self.value = value

    def fail(self, path: tuple[str, ...], detail: str) -> ApiError:
        where = ".".join(path)
        return malformed(
            f"{PREFIX}{where + ': ' if where else ''}{detail} at {self.spans.position(self.spans.ends.get(path))}"
        )

    def missing(self, field: str) -> ApiError:
        return malformed(f"{PREFIX}missing field `{field}` at {self.spans.position(self.spans.closes.get(()))}")

    def struct(self, value: Any, path: tuple[str, ...], name: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"invalid type: {describe_value(value)}, expected struct {name}")
        return value

    def one_or_many(self, value: Any, path: tuple[str, ...]) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise self.fail(path, "data did not match any variant of untagged enum OneOrMany")

    def usize(self, value: Any, path: tuple[str, ...]) -> int | None:
        if value is None:
            return None
        if type(value) is int:
            if value < 0:
                raise self.fail(path, f"invalid value: integer `{value}`, expected usize")
            if value > MAX_U64:
                raise self.fail(path, f"invalid type: floating point `{float(value):e}`, expected usize")
            return value
        raise self.fail(path, f"invalid type: {describe_value(value)}, expected usize")

    def number(self, value: Any, path: tuple[str, ...], kind: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"invalid type: {describe_value(value)}, expected {kind}")
        if isinstance(value, float) and math.isinf(value):
            raise self.fail(path, "number out of range")
        return float(value)

    def boolean(self, value: Any, path: tuple[str, ...]) -> bool:
        if type(value) is not bool:
            raise self.fail(path, f"invalid type: {describe_value(value)}, expected a boolean")
        return value

    def string(self, value: Any, path: tuple[str, ...]) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(path, f"invalid type: {describe_value(value)}, expected a string")
        return value


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and key in _DUPLICATE_CHECKED:
            raise _Duplicate(key)
        out[key] = value
    return out


_DUPLICATE_CHECKED = frozenset(_TOP_FIELDS) | {f.name for f in BUDGET.fields} | {f.name for f in RERANK.fields}


class _Duplicate(Exception):
    pass


def parse_request(call: Call) -> tuple[EvidenceRequest, bool]:
    """Decode and validate the body; returns the request and whether `explain` was asked."""
    require_json(call.headers.get("Content-Type"), call.body)
    try:
        value = json.loads(call.body.decode("utf-8"), object_pairs_hook=_pairs_hook)
    except _Duplicate as dup:
        raise malformed(f"{PREFIX}duplicate field `{dup.args[0]}` at {Spans(call.body).position(None)}") from None
    if has_lone_surrogate(call.body, value):
        raise malformed("Failed to parse the request body as JSON: lone leading surrogate in hex escape", status=400)
    d = _Decoder(call.body, value)
    body = d.struct(value, (), "EvidenceRequest")
    if body.get("origins") is None:
        if "origins" in body:
            raise d.fail(("origins",), "data did not match any variant of untagged enum OneOrMany")
        raise d.missing("origins")
    origins = d.one_or_many(body["origins"], ("origins",))
    labels = d.one_or_many(body["labels"], ("labels",)) if body.get("labels") is not None else []
    dice_floor = d.number(body.get("dice_floor"), ("dice_floor",), "f64")
    semantic_floor = d.number(body.get("semantic_floor"), ("semantic_floor",), "f32")
    resolve_limit = d.usize(body.get("resolve_limit"), ("resolve_limit",))
    activate_decay = d.number(body.get("activate_decay"), ("activate_decay",), "f64")
    activate_limit = d.usize(body.get("activate_limit"), ("activate_limit",))
    fallback = d.string(body.get("text_fallback_query"), ("text_fallback_query",))
    search_limit = d.usize(body.get("search_limit"), ("search_limit",))
    include = False
    if "include_communities" in body:
        include = d.boolean(body["include_communities"], ("include_communities",))
    budget = body.get("budget")
    limits: dict[str, int | None] = {f.name: None for f in BUDGET.fields}
    if budget is not None:
        b = d.struct(budget, ("budget",), "BudgetRequest")
        for key in limits:
            limits[key] = d.usize(b.get(key), ("budget", key))
    rerank = body.get("rerank")
    rerank_model = None
    if rerank is not None:
        r = d.struct(rerank, ("rerank",), "RerankRequest")
        rerank_model = d.string(r.get("model"), ("rerank", "model"))
    explain = False
    if body.get("explain") is not None:
        explain = d.boolean(body["explain"], ("explain",))
    if len(origins) > 1000:
        raise too_many_items("origins", len(origins))
    if len(labels) > 1000:
        raise too_many_items("labels", len(labels))

    def clamp(v: int | None, default: int, ceiling: int | None) -> int:
        value = default if v is None else v
        return value if ceiling is None else min(value, ceiling)

    request = EvidenceRequest(
        origins=tuple(origins),
        labels=tuple(labels),
        dice_floor=dice_floor,
        semantic_floor=semantic_floor,
        resolve_limit=clamp(resolve_limit, 1000, MATCH_CEILING),
        activate_decay=0.5 if activate_decay is None else activate_decay,
        activate_limit=clamp(activate_limit, 20, MATCH_CEILING),
        query=fallback if fallback is not None else "; ".join(origins),
        search_limit=clamp(search_limit, 5, SEARCH_LIMIT_CEILING),
        include_communities=include,
        max_items=clamp(limits["max_items"], 40, MAX_ITEMS_CEILING),
        max_bytes=clamp(limits["max_bytes"], 65536, MAX_BYTES_CEILING),
        max_tokens=clamp(limits["max_tokens"], 4000, None),
        rerank_requested=rerank is not None,
        rerank_model=rerank_model,
    )
    return request, explain


async def evidence(call: Call) -> Any:
    request, explain = parse_request(call)
    gate(call.deadline - time.monotonic())
    assert call.name is not None
    ctx = call.registry.get(call.name)
    if ctx is None:
        raise no_context(call.name)
    services = Services(
        registry=call.registry,
        may_access=call.principal.may_access,
        reranker=call.app_state.get("reranker") or NoReranker(),
        observe_rerank=call.app_state.get("observe_rerank"),
    )
    run = await run_graph(
        GRAPH,
        {REQUEST: request, CONTEXT: ctx, SERVICES: services},
        deadline=call.deadline,
        hooks=call.app_state.get("metrics"),
    )
    if run.failure is not None:
        if isinstance(run.failure, ApiError):
            raise run.failure
        log.error("evidence.stage_failed", stage=run.failed_stage, error_type=type(run.failure).__name__)
        raise ApiError(
            "internal", f"evidence assembly failed in stage '{run.failed_stage}'; the server log has details"
        )
    package = render_package(run, explain, serialized=True)
    ctx.meta.record_read(not package["items"])
    return Reply(package, {"Server-Timing": server_timing(run, GRAPH)})
