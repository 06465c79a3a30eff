"""Cross-context reads: `POST /recall`, `POST /query`, `POST /sources/search` over `contexts` and/or `groups`.

Each runs the single-context lane of the same name on every resolved target (`store/read/`),
tags every result with its context, and merges: recall and query pool every target's matches and
rank them by |weight| then names (weights share one scale), search interleaves the targets' hit
lists by rank (BM25 scores do not share a scale across corpora).
"""

from __future__ import annotations

import contextlib
import heapq
from typing import Any

from taguru_server.server.call import Call, Route
from taguru_server.server.retrieval_cache import cached_read
from taguru_server.server.routes.common import (
    DEFAULT_MATCH_LIMIT,
    MAX_INPUT_ITEMS,
    before_start,
    clamp_limit,
    count_search,
    search_vector,
    served_hits,
)
from taguru_server.server.routes.groups import no_group
from taguru_server.server.routes.passages import source_filter
from taguru_server.server.tenancy import scope_refusal, seen_groups
from taguru_server.server.tracing import TRACING_KEY
from taguru_server.server.wire import groups as group_wire
from taguru_server.server.wire.render import lanes as lane_wire
from taguru_server.stages.render import association_out
from taguru_server.store.errors import ApiError, Code, no_context, too_many_items
from taguru_server.store.model.context import Context
from taguru_server.store.persist.groups import closure
from taguru_server.store.read import query
from taguru_server.store.read.passages import SourceFilter
from taguru_server.store.read.type_filter import apply_type_filter
from taguru_server.store.text import query_terms

NO_WINDOW = "since/until are not supported on cross-context search — window one context at a time"


def cross_targets(call: Call, contexts: list[str] | None, groups: list[str] | None) -> list[str]:
    """The resolved target list: direct names in request order, then group members in name order.

    Group names resolve against the groups the key sees (`tenancy.seen_groups`), so under strict
    tenancy a group outside its view is refused exactly as a group that does not exist.
    """
    contexts, groups = contexts or [], groups or []
    if not contexts and not groups:
        raise ApiError(Code.INVALID_ARGUMENT, "'contexts' or 'groups' must name at least one target")
    for field, values in (("contexts", contexts), ("groups", groups)):
        if len(values) > MAX_INPUT_ITEMS:
            raise too_many_items(field, len(values))
    targets = list(dict.fromkeys(contexts))
    principal = call.principal
    for name in targets:  # scope before existence: no oracle for names beyond the grant
        if not principal.may_access(name):
            raise scope_refusal(call, name)
    registry = call.registry
    for name in targets:
        if not registry.exists(name):
            raise no_context(name)
    if groups:
        seen = seen_groups(call)
        for g in groups:
            if g not in seen:
                raise no_group(g)
        chosen = set(targets)
        for member in sorted(closure(seen, groups)):
            if member not in chosen and principal.may_access(member):
                chosen.add(member)
                targets.append(member)
    return targets


def body_targets(call: Call, body: dict[str, Any]) -> list[Context]:
    """The retrieval cache's view of a cross-context read: its resolved targets, in search order."""
    contexts, groups = body.get("contexts"), body.get("groups")
    for values in (contexts, groups):
        if values is not None and not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
            raise TypeError("not a list of names")
    return [_target(call, name) for name in cross_targets(call, contexts, groups)]


def _target(call: Call, name: str) -> Context:
    ctx = call.registry.get(name)
    if ctx is None:  # deleted since the existence check
        raise no_context(name)
    return ctx


MatchKey = tuple[float, str, str, str, str]


def merged_page(
    found: list[tuple[Context, list[int]]], limit: int, after: dict[str, Any] | None, targets: list[str]
) -> dict[str, Any]:
    """Pool every target's matching edges, rank by (|weight| desc, context, subject, label, object), page."""
    keyed: list[tuple[MatchKey, int, int]] = []
    for i, (ctx, edges) in enumerate(found):
        for e in edges:
            w, s, lab, o = query.sort_key(ctx, e)
            keyed.append(((w, ctx.name, s, lab, o), i, e))
    if after is not None:
        ident = (after["context"], after["subject"], after["label"], after["object"])
        bound = (-abs(float(after["weight"])), *ident)
        keyed = [k for k in keyed if k[0] > bound and k[0][1:] != ident]
    page = heapq.nsmallest(limit, keyed) if limit < len(keyed) else sorted(keyed)
    return {
        "total": sum(len(edges) for _ctx, edges in found),
        "matches": [{"context": found[i][0].name, **association_out(found[i][0], e)} for _k, i, e in page],
        "plan": {"contexts": targets},
    }


async def cross_recall(call: Call) -> Any:
    args = await call.decode(group_wire.CROSS_RECALL)
    before_start(call)
    if args["since"] is not None or args["until"] is not None:
        raise ApiError(Code.INVALID_ARGUMENT, NO_WINDOW)
    targets = cross_targets(call, args["contexts"], args["groups"])
    before_start(call)
    found = []
    for name in targets:
        ctx = _target(call, name)
        edges = query.recall_edges(ctx, args["cue"])
        count_search(call, ctx, "recall", not edges)
        found.append((ctx, edges))
    return merged_page(found, clamp_limit(args["limit"], DEFAULT_MATCH_LIMIT), args["after"], targets)


async def cross_query(call: Call) -> Any:
    args = await call.decode(group_wire.CROSS_QUERY)
    if args["since"] is not None or args["until"] is not None:
        raise ApiError(Code.INVALID_ARGUMENT, NO_WINDOW)
    positions = {key: args[key] for key in ("subject", "label", "object")}
    for key, values in positions.items():
        if values is not None and len(values) > MAX_INPUT_ITEMS:
            raise too_many_items(key, len(values))
    if all(not v for v in positions.values()):
        raise ApiError(Code.INVALID_ARGUMENT, "'subject', 'label', or 'object' must pin at least one value")
    for key in ("subject_types", "object_types"):
        values = args[key]
        if values is not None and len(values) > MAX_INPUT_ITEMS:
            raise too_many_items(key, len(values))
    before_start(call)
    targets = cross_targets(call, args["contexts"], args["groups"])
    before_start(call)
    found = []
    for name in targets:
        ctx = _target(call, name)
        edges = query.query_edges(ctx, positions["subject"], positions["label"], positions["object"])
        # each target's own schema judges its matches (a target without one contributes nothing)
        edges = apply_type_filter(ctx, edges, args["subject_types"], args["object_types"])
        count_search(call, ctx, "query", not edges)
        found.append((ctx, edges))
    return merged_page(found, clamp_limit(args["limit"], DEFAULT_MATCH_LIMIT), args["after"], targets)


async def cross_search(call: Call) -> Any:
    args = await call.decode(group_wire.CROSS_SEARCH)
    targets = cross_targets(call, args["contexts"], args["groups"])
    query_text = args["query"]
    limit = clamp_limit(args["limit"], 5)
    scope = source_filter(args)
    before_start(call)
    plans: list[dict[str, Any]] = []
    ranked: list[tuple[int, int, dict[str, Any]]] = []
    searchable = limit > 0 and bool(query_terms(query_text))
    tracing = call.app_state.get(TRACING_KEY)
    fan_out = tracing.passage_search(limit, len(targets)) if tracing is not None else contextlib.nullcontext()
    with fan_out:
        for index, name in enumerate(targets):
            ctx = _target(call, name)
            with tracing.passage_search_target(index) if tracing is not None else contextlib.nullcontext():
                result = await _search_target(call, ctx, args, limit, searchable, scope)
            plans.extend(result["plan"]["contexts"])
            ranked.extend((rank, index, {"context": name, **hit}) for rank, hit in enumerate(result["hits"]))
    ranked.sort(key=lambda r: (r[0], r[1]))
    hits = [hit for _rank, _index, hit in ranked[:limit]]
    served_hits(call, hits)
    return {"plan": {"contexts": plans}, "hits": hits}


async def _search_target(
    call: Call, ctx: Context, args: dict[str, Any], limit: int, searchable: bool, scope: SourceFilter
) -> Any:
    """One target of a cross passage search: its query vector when searchable, both lanes, counted."""
    query_text = args["query"]
    vector = None
    if searchable:  # only then is the query embedded (docs/embeddings.md, "The semantic lanes")
        vector = await search_vector(call, ctx, query_text, args["semantic_floor"])
    result = lane_wire.search_passages(ctx, query_text, limit, scope, vector)
    count_search(call, ctx, "search_passages", not result["hits"])
    return result


ROUTES: list[Route] = [
    cached_read("/recall", "recall", cross_recall, body_targets, group_wire.CROSS_RECALL, "CrossMatches"),
    cached_read("/query", "query", cross_query, body_targets, group_wire.CROSS_QUERY, "CrossMatches"),
    cached_read(
        "/sources/search", "search_passages", cross_search, body_targets, group_wire.CROSS_SEARCH, "CrossSearchResult"
    ),
]
