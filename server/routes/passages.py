"""The passage routes: store, list, look up, search and retract sources; cite a paragraph."""

from __future__ import annotations

import time
from typing import Any

from taguru_server.server.call import Call, Route
from taguru_server.server.decode import check_name, json_type
from taguru_server.server.passage_store import read_passage_store
from taguru_server.server.quotas import check_growth
from taguru_server.server.retrieval_cache import cached_read, path_target
from taguru_server.server.routes.common import (
    MAX_INPUT_ITEMS,
    MAX_PASSAGES,
    Keyset,
    before_start,
    clamp_limit,
    count_read,
    count_search,
    search_vector,
    served_hits,
)
from taguru_server.server.tracing import TRACING_KEY
from taguru_server.server.wire import specs
from taguru_server.server.wire.render import lanes as lane_wire
from taguru_server.server.wire.render.imports import passages_stored_out
from taguru_server.store.errors import ApiError, Code, Issue, collected, too_many_items
from taguru_server.store.model import operations
from taguru_server.store.model.context import Context
from taguru_server.store.read.passages import SourceFilter
from taguru_server.store.read.window import Window, window_of
from taguru_server.store.text import query_terms


async def post_sources(call: Call) -> Any:
    body = await call.json()
    if isinstance(body, dict) and isinstance(body.get("passages"), dict) and len(body["passages"]) > MAX_PASSAGES:
        raise ApiError(
            Code.OVER_LIMIT,
            f"batch of {len(body['passages'])} passages exceeds the per-request limit of 1000; split the store",
        )
    if not isinstance(body, dict):
        raise collected("the passage store", [Issue("", "type", "an object", json_type(body))])
    store = read_passage_store(body)
    ctx = call.context()
    await check_growth(call, ctx)
    totals = operations.store_passages(ctx, store.passages(int(time.time())))
    await call.commit(ctx)
    return passages_stored_out(totals)


async def lookup_sources(call: Call) -> Any:
    sources = (await call.decode(specs.LOOKUP))["sources"]
    if len(sources) > MAX_INPUT_ITEMS:
        raise too_many_items("sources", len(sources))
    for s in sources:
        check_name(s, "source")
    ctx = call.context()
    found: dict[str, str] = {}
    missing: list[str] = []
    for s in sources:
        sid = ctx.find_source(s)
        passage = ctx.passages.get(sid) if sid is not None else None
        if passage is None:
            missing.append(s)
        else:
            found[s] = passage.text
    return {"passages": dict(sorted(found.items())), "missing": missing}


async def list_sources(call: Call) -> Any:
    keyset = Keyset.of(call)
    ctx = call.context()
    total, page = keyset.page([ctx.sources[sid] for sid in ctx.passages])
    entries = []
    for name in page:
        passage = ctx.passages[ctx.source_id[name]]
        entry: dict[str, Any] = {"name": name}
        if passage.stored_at is not None:
            entry["stored_at"] = passage.stored_at
        if passage.date is not None:
            entry["date"] = passage.date
        if passage.tags:
            entry["tags"] = passage.tags
        entries.append(entry)
    return {"total": total, "sources": page, "entries": entries}


async def retract_source(call: Call) -> Any:
    source = (await call.decode(specs.RETRACT_SOURCE))["source"]
    check_name(source, "source")
    dry_run = call.query.get("dry_run") == "true"
    ctx = call.context()
    touched, removed = operations.retract_source(ctx, source, dry_run=dry_run)
    if not dry_run and (touched or removed):
        await call.commit(ctx)
    return {"associations_touched": touched, "passage_removed": removed}


async def citations(call: Call) -> Any:
    args = await call.decode(specs.CITATION)
    source, paragraph = args["source"], args["paragraph"]
    check_name(source, "source")
    ctx = call.context()
    found = lane_wire.citation(ctx, source, paragraph)
    count_read(ctx, isinstance(found, str))
    if found == "no_source":
        raise ApiError(Code.NO_SOURCE, f"source '{source}' not found in context '{ctx.name}'")
    if found == "no_paragraph":
        raise ApiError(
            Code.NO_PARAGRAPH, f"paragraph {paragraph} out of range for source '{source}' in context '{ctx.name}'"
        )
    return found


def source_filter(args: dict[str, Any]) -> SourceFilter:
    """A search request's source filter (`tags`, `since`, `until`), checked."""
    scope = SourceFilter(args["tags"], args["since"], args["until"])
    check_source_filter(scope)
    return scope


def check_source_filter(scope: SourceFilter) -> None:
    """The search's source filter: tag count and sizes, a window that selects something, distinct tags."""
    tags, since, until = scope.tags, scope.since, scope.until
    if tags is not None:
        if len(tags) > MAX_INPUT_ITEMS:
            raise too_many_items("tags", len(tags))
        for tag in tags:
            check_name(tag, "a filter tag", 128)
    if since is not None and until is not None and since >= until:
        raise ApiError(
            Code.INVALID_ARGUMENT,
            f"since {since} is not before until {until} — the window is half-open [since, until) and this one "
            "selects nothing",
        )
    if tags is not None and len(set(tags)) > 32:
        raise ApiError(Code.OVER_LIMIT, f"{len(set(tags))} distinct filter tags where at most 32 may be named")


def read_window(call: Call, since: int | None, until: int | None) -> Window | None:
    """A graph read's window, or None when neither bound is given: with one, the budget (408), then the
    search's window check (400); both before the context is looked up."""
    window = window_of(since, until)
    if window is not None:
        before_start(call)
        check_source_filter(SourceFilter(since=since, until=until))
    return window


async def search_sources(call: Call) -> Any:
    args = await call.decode(specs.SEARCH)
    limit = clamp_limit(args["limit"], 5)
    scope = source_filter(args)
    ctx = call.context()
    tracing = call.app_state.get(TRACING_KEY)
    if tracing is None:
        return await _search_sources(call, ctx, args, limit, scope)
    with tracing.passage_search(limit):
        return await _search_sources(call, ctx, args, limit, scope)


async def _search_sources(call: Call, ctx: Context, args: dict[str, Any], limit: int, scope: SourceFilter) -> Any:
    """One context's passage search: the query embedded when it can be searched, both lanes, counted."""
    query_text = args["query"]
    vector = None
    if limit > 0 and query_terms(query_text):  # only then is the query embedded (docs/embeddings.md)
        vector = await search_vector(call, ctx, query_text, args["semantic_floor"])
    result = lane_wire.search_passages(ctx, query_text, limit, scope, vector)
    count_search(call, ctx, "search_passages", not result["hits"])
    served_hits(call, result["hits"])
    return result


ROUTES: list[Route] = [
    Route("POST", "/contexts/{name}/sources", post_sources, "write", request="PassageStore", response="StoreResult"),
    Route("GET", "/contexts/{name}/sources", list_sources, "read", response="SourceList"),
    Route("POST", "/contexts/{name}/sources/lookup", lookup_sources, "read", request=specs.LOOKUP, response="Lookup"),
    cached_read(
        "/contexts/{name}/sources/search", "search_passages", search_sources, path_target, specs.SEARCH, "SearchResult"
    ),
    Route(
        "POST",
        "/contexts/{name}/sources/retract",
        retract_source,
        "write",
        request=specs.RETRACT_SOURCE,
        response="SourceRetraction",
    ),
    Route("POST", "/contexts/{name}/citations", citations, "read", request=specs.CITATION, response="Citation"),
]
