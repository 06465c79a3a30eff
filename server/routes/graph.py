"""The graph routes: associations, aliases and labels, and the read lanes (resolve … activate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from taguru_server.server.call import Call, Handler, Route
from taguru_server.server.decode import MAX_NAME_BYTES, check_name, is_u32, json_type, name_issue
from taguru_server.server.metrics import Metrics, resolve_tier
from taguru_server.server.quotas import check_growth
from taguru_server.server.reply import Reply
from taguru_server.server.retrieval_cache import cached_read, log_search, path_target
from taguru_server.server.routes.common import (
    DEFAULT_MATCH_LIMIT,
    MAX_ASSOCIATIONS,
    MAX_INPUT_ITEMS,
    MAX_MATCH_LIMIT,
    MAX_WEIGHT,
    Keyset,
    before_start,
    check_cursor,
    clamp_limit,
    count_read,
    count_search,
    keyset_limit,
)
from taguru_server.server.routes.passages import read_window
from taguru_server.server.schema_gate import gate_associations
from taguru_server.server.semantic import semantic_tier
from taguru_server.server.state import EMBEDDER_KEY, METRICS_KEY
from taguru_server.server.wire import specs
from taguru_server.server.wire.render import lanes as lane_wire
from taguru_server.store.errors import ApiError, Code, Issue, collected, too_many_items
from taguru_server.store.model import operations
from taguru_server.store.model.context import CONCEPT, LABEL, Context
from taguru_server.store.model.schema import RESERVED_WHY, SCHEMA_TYPE
from taguru_server.store.read import query as query_lane
from taguru_server.store.read import semantic
from taguru_server.store.read.type_filter import apply_type_filter
from taguru_server.store.read.window import window_view
from taguru_server.store.text import utf8_len
from taguru_server.store.wire import format_number

log = structlog.get_logger("taguru.resolve")


async def post_associations(call: Call) -> Any:
    body = await call.json()
    if isinstance(body, list) and len(body) > MAX_ASSOCIATIONS:
        raise ApiError(
            Code.OVER_LIMIT,
            f"batch of {len(body)} associations exceeds the per-request limit of 10000; split the ingest",
        )
    issues: list[Issue] = []
    items: list[tuple[str, str, str, float, str | None, int | None]] = []
    if not isinstance(body, list):
        issues.append(Issue("associations", "type", "an array", json_type(body)))
    else:
        for i, item in enumerate(body):
            base = f"associations[{i}]"
            if not isinstance(item, dict):
                issues.append(Issue(base, "type", "an object", json_type(item)))
                continue
            found = [
                name_issue(f"{base}.subject", item.get("subject")),
                name_issue(f"{base}.label", item.get("label")),
                name_issue(f"{base}.object", item.get("object")),
            ]
            w = item.get("weight")
            if w is None:
                found.append(Issue(f"{base}.weight", "missing", "a finite number with |weight| <= 1000000", "absent"))
            elif isinstance(w, bool) or not isinstance(w, (int, float)):
                found.append(Issue(f"{base}.weight", "type", "a finite number with |weight| <= 1000000", json_type(w)))
            elif not abs(w) <= MAX_WEIGHT:
                found.append(
                    Issue(
                        f"{base}.weight",
                        "range",
                        "a finite number with |weight| <= 1000000",
                        f"number {format_number(w)}",
                    )
                )
            found.append(name_issue(f"{base}.source", item.get("source"), optional=True))
            p = item.get("paragraph")
            if p is not None and not is_u32(p):
                found.append(Issue(f"{base}.paragraph", "type", "a non-negative integer paragraph index", json_type(p)))
            real = [f for f in found if f is not None]
            if real:
                issues.extend(real)
            else:
                items.append((item["subject"], item["label"], item["object"], float(w), item.get("source"), p))  # type: ignore[arg-type]
    if issues:
        raise collected("the associations batch", issues)
    before_start(call)
    await check_growth(call, call.context())
    extra = gate_associations(call.registry.get(call.name or ""), [item[:3] for item in items], _metrics(call))
    ctx = call.context()
    added = operations.assert_associations(ctx, items)
    await call.commit(ctx)
    return added if extra is None else Reply(added, extra=extra)


def _metrics(call: Call) -> Metrics | None:
    return call.app_state.get(METRICS_KEY)


def _refuse_reserved_label_alias(call: Call, labels: dict[str, str]) -> None:
    """Once a context has a schema (any mode), no label alias may come to resolve to `schema:type`."""
    ctx = call.registry.get(call.name or "")
    if ctx is None or ctx.schema is None:
        return
    reserved = sorted(alias for alias, canonical in labels.items() if canonical == SCHEMA_TYPE)
    if reserved:
        raise ApiError(
            Code.INVALID_ARGUMENT,
            f"label alias '{reserved[0]}' would resolve to 'schema:type', {RESERVED_WHY} — rename the alias",
        )


async def _triple(call: Call) -> tuple[str, str, str]:
    args = await call.decode(specs.TRIPLE)
    for key in ("subject", "label", "object"):
        check_name(args[key], key)
    return args["subject"], args["label"], args["object"]


async def retract_association(call: Call) -> Any:
    s, lab, o = await _triple(call)
    ctx = call.context()
    retracted, removed = operations.retract_association(ctx, s, lab, o)
    if retracted:
        await call.commit(ctx)
    return {"retracted": retracted, "attributions_removed": removed}


async def post_aliases(call: Call) -> Any:
    args = await call.decode(specs.ALIASES)
    maps: list[tuple[int, dict[str, str]]] = [(CONCEPT, args["concepts"] or {}), (LABEL, args["labels"] or {})]
    n = sum(len(m) for _k, m in maps)
    if n > MAX_ASSOCIATIONS:
        raise ApiError(
            Code.OVER_LIMIT, f"batch of {n} aliases exceeds the per-request limit of 10000; split the ingest"
        )
    for kind, m in maps:
        word = "concepts" if kind == CONCEPT else "labels"
        for alias, canonical in m.items():
            pair = ((f"a {word} alias", alias), (f"a {word} canonical", canonical))
            # each pair is checked for size, then for emptiness
            for what, value in pair:
                size = utf8_len(value)
                if size > MAX_NAME_BYTES:
                    raise ApiError(
                        Code.INVALID_ARGUMENT,
                        f"{what} is {size} bytes, over the {MAX_NAME_BYTES}-byte cap; nothing was applied",
                    )
            for what, value in pair:
                if not value:
                    raise ApiError(Code.INVALID_ARGUMENT, f"{what} must not be empty; nothing was applied")
    _refuse_reserved_label_alias(call, args["labels"] or {})
    if n:
        await check_growth(call, call.context())
    aliases = [(kind, alias, canonical) for kind, m in maps for alias, canonical in m.items()]
    return await _alias_write(
        call,
        lambda ctx: operations.add_aliases(ctx, aliases),
        lambda stop: (
            f"applied {stop.done} aliases, then {_word(stop.kind)} alias '{stop.alias}' → "
            f"'{stop.canonical}': {stop.reason}"
        ),
    )


async def delete_aliases(call: Call) -> Any:
    args = await call.decode(specs.ALIAS_REMOVAL)
    concepts = args["concepts"] or []
    label_list = args["labels"] or []
    if not concepts and not label_list:
        raise ApiError(Code.INVALID_ARGUMENT, "the request names no aliases to remove")
    n = len(concepts) + len(label_list)
    if n > MAX_ASSOCIATIONS:
        raise ApiError(
            Code.OVER_LIMIT, f"batch of {n} alias removals exceeds the per-request limit of 10000; split the request"
        )
    names = [(CONCEPT, alias) for alias in concepts] + [(LABEL, alias) for alias in label_list]
    return await _alias_write(
        call,
        lambda ctx: operations.remove_aliases(ctx, names),
        lambda stop: (
            f"removed {stop.done} aliases, then '{stop.alias}' is not a {_word(stop.kind)} alias "
            "(canonical names cannot be removed this way)"
        ),
    )


def _word(kind: int) -> str:
    return "concept" if kind == CONCEPT else "label"


async def _alias_write(
    call: Call, write: Callable[[Context], int], refusal: Callable[[operations.Stopped], str]
) -> int:
    """Run an alias write on the call's context and commit what landed, also when it stopped partway (409)."""
    ctx = call.context()
    try:
        return write(ctx)
    except operations.Stopped as stop:
        raise ApiError(Code.CONFLICT, refusal(stop)) from None
    finally:
        await call.commit(ctx)


async def list_aliases(call: Call) -> Any:
    limit = keyset_limit(call)
    after = call.query.get("after")
    prefix = call.query.get("prefix") or ""
    check_cursor(after, prefix)
    start: tuple[int, str] | None = None
    if after is not None:
        kind_word, sep, alias = after.partition(":")
        if not sep or kind_word not in ("concept", "label"):
            raise ApiError(
                Code.INVALID_ARGUMENT,
                "after must be 'concept:<alias>' or 'label:<alias>' — the last entry of the previous page",
            )
        start = (CONCEPT if kind_word == "concept" else LABEL, alias)
    ctx = call.context()
    out: dict[str, dict[str, str]] = {"concepts": {}, "labels": {}}
    total = 0
    taken = 0
    for kind, key in ((CONCEPT, "concepts"), (LABEL, "labels")):
        names = ctx.concepts if kind == CONCEPT else ctx.labels
        for alias in sorted(a for a in ctx.aliases[kind] if a.startswith(prefix)):
            total += 1
            if start is not None and (kind, alias) <= start:
                continue
            if taken < limit:
                out[key][alias] = names[ctx.aliases[kind][alias]]
                taken += 1
    return {"total": total, "concepts": out["concepts"], "labels": out["labels"]}


async def list_labels(call: Call) -> Any:
    keyset = Keyset.of(call)
    ctx = call.context()
    names = ctx.labels if ctx.meta.schema is None else [n for n in ctx.labels if n != SCHEMA_TYPE]
    total, page = keyset.page(names)  # a schema hides the reserved label from the page and the total
    return {"total": total, "labels": page}


def _resolve(kind: int) -> Handler:
    async def handler(call: Call) -> Any:
        args = await call.decode(specs.RESOLVE)
        cue, dice = args["cue"], args["dice_floor"]
        limit = clamp_limit(args["limit"], MAX_MATCH_LIMIT)
        ctx = call.context()
        floor = dice if dice is not None else ctx.meta.dice_floor if ctx.meta.dice_floor is not None else 0.3
        found = semantic.lexical(ctx, kind, cue, min(max(floor, 0.0), 1.0))
        floors = (args["semantic_floor"], ctx.meta.semantic_floor, call.settings.semantic_floor)
        embedder = call.app_state.get(EMBEDDER_KEY)
        extra = await semantic_tier(embedder, ctx, kind, cue, found[:limit], found, floors, call.deadline)
        result = lane_wire.ladder_out(ctx, kind, found, extra, limit)
        count_search(call, ctx, "resolve_label" if kind else "resolve", not result)
        metrics = call.app_state.get(METRICS_KEY)
        if metrics is not None:
            metrics.resolved(result)
        if call.settings.log_searches:
            fields = {"op": "resolve" if kind == CONCEPT else "resolve_label", "context": ctx.name, "hits": len(result)}
            top = {"top_score": result[0]["score"]} if result else {}
            log_search(call, {**fields, "tier": resolve_tier(result), **top}, False)
        return result

    return handler


async def describe(call: Call) -> Any:
    concept = (await call.decode(specs.DESCRIBE))["concept"]
    ctx = call.context()
    result = lane_wire.describe(ctx, concept)
    count_read(ctx, result is None)
    return result


async def query(call: Call) -> Any:
    args = await call.decode(specs.QUERY)
    positions = {key: args[key] for key in ("subject", "label", "object")}
    limit = clamp_limit(args["limit"], DEFAULT_MATCH_LIMIT)
    after = args["after"]
    # the whole shape decodes (422) before the handler's own 400s
    for key, values in positions.items():
        if values is not None and len(values) > MAX_INPUT_ITEMS:
            raise too_many_items(key, len(values))
    if all(v is None for v in positions.values()):
        raise ApiError(Code.INVALID_ARGUMENT, "'subject', 'label', or 'object' must pin at least one value")
    subject_types, object_types = args["subject_types"], args["object_types"]
    for key, values in (("subject_types", subject_types), ("object_types", object_types)):
        if values is not None and len(values) > MAX_INPUT_ITEMS:
            raise too_many_items(key, len(values))
    typed = bool(subject_types) or bool(object_types)
    if typed:
        before_start(call)
        call.context()  # a type filter looks its context up before the window check
    window = read_window(call, args["since"], args["until"])
    ctx = call.context()
    edges = query_lane.query_edges(ctx, positions["subject"], positions["label"], positions["object"])
    view = None if window is None else window_view(ctx, window)
    if view is not None:
        edges = [e for e in edges if view.alive(e)]
    if typed:
        edges = apply_type_filter(ctx, edges, subject_types, object_types)
    if view is None:
        result = lane_wire.page_matches(ctx, edges, limit, after)
    else:
        result = lane_wire.windowed_page_matches(ctx, view, edges, limit, after)
    count_search(call, ctx, "query", not result["matches"])
    return result


async def recall(call: Call) -> Any:
    args = await call.decode(specs.RECALL)
    cue = args["cue"]
    limit = clamp_limit(args["limit"], DEFAULT_MATCH_LIMIT)
    after = args["after"]
    window = read_window(call, args["since"], args["until"])
    ctx = call.context()
    if window is None:
        result = lane_wire.page_matches(ctx, query_lane.recall_edges(ctx, cue), limit, after)
    else:
        view = window_view(ctx, window)
        edges = [e for e in query_lane.recall_edges(ctx, cue) if view.alive(e)]
        result = lane_wire.windowed_page_matches(ctx, view, edges, limit, after)
    count_search(call, ctx, "recall", not result["matches"])
    return result


async def activate(call: Call) -> Any:
    args = await call.decode(specs.ACTIVATE)
    origins, decay = args["origins"], args["decay"]
    limit = clamp_limit(args["limit"], 20)
    if len(origins) > MAX_INPUT_ITEMS:
        raise too_many_items("origins", len(origins))
    window = read_window(call, args["since"], args["until"])
    ctx = call.context()
    decay = min(max(0.5 if decay is None else decay, 0.0), 1.0)
    if window is None:
        result = lane_wire.activate(ctx, origins, decay, limit)
    else:
        result = lane_wire.windowed_activate(ctx, window_view(ctx, window), origins, decay, limit)
    count_search(call, ctx, "activate", not result["matches"])
    if call.settings.log_searches:
        log_search(call, {"op": "activate", "context": ctx.name, "hits": len(result["matches"])}, False)
    return result


# the table keeps the published order: these routes, the passage routes, then the read lanes
ROUTES: list[Route] = [
    Route(
        "POST",
        "/contexts/{name}/associations",
        post_associations,
        "write",
        request="AssociationBatch",
        response="warned:int",
    ),
    Route(
        "POST",
        "/contexts/{name}/associations/retract",
        retract_association,
        "write",
        request=specs.TRIPLE,
        response="AssociationRetraction",
    ),
    Route("POST", "/contexts/{name}/aliases", post_aliases, "write", request=specs.ALIASES, response="int"),
    Route("DELETE", "/contexts/{name}/aliases", delete_aliases, "write", request=specs.ALIAS_REMOVAL, response="int"),
    Route("GET", "/contexts/{name}/aliases", list_aliases, "read", response="AliasList"),
    Route("GET", "/contexts/{name}/labels", list_labels, "read", response="LabelList"),
]
LANE_ROUTES: list[Route] = [
    Route("POST", "/contexts/{name}/resolve", _resolve(0), "read", request=specs.RESOLVE, response="candidates"),
    Route("POST", "/contexts/{name}/resolve_label", _resolve(1), "read", request=specs.RESOLVE, response="candidates"),
    Route("POST", "/contexts/{name}/describe", describe, "read", request=specs.DESCRIBE, response="Description"),
    cached_read("/contexts/{name}/query", "query", query, path_target, specs.QUERY, "Matches"),
    cached_read("/contexts/{name}/recall", "recall", recall, path_target, specs.RECALL, "Matches"),
    Route("POST", "/contexts/{name}/activate", activate, "read", request=specs.ACTIVATE, response="Activation"),
]
