"""GET /contexts/{name}/changes: the change feed, read from the store (a cold context stays cold)."""

from __future__ import annotations

import time
from typing import Any

from taguru_server.server.call import Call, Route
from taguru_server.server.routes.common import query_int
from taguru_server.server.wire.render.feed import page_result
from taguru_server.stages.model import gate
from taguru_server.store.errors import ApiError, no_context
from taguru_server.store.persist.feed import DEFAULT_LIMIT, MAX_LIMIT, parse_cursor


async def changes(call: Call) -> Any:
    assert call.name is not None
    limit = query_int(call, "limit")
    gate(call.deadline - time.monotonic())
    cid = call.registry.cid_of(call.name)
    meta = call.registry.known_meta(call.name)
    if cid is None or meta is None:
        raise no_context(call.name)
    since_raw = call.query.get("since")
    limit = min(max(DEFAULT_LIMIT if limit is None else limit, 1), MAX_LIMIT)
    try:
        since = None if since_raw is None else parse_cursor(since_raw)
        page = call.registry.persistence.feed_page(cid, since[1] if since else 0, limit)
        result = page_result(page, since)
    except ApiError:
        meta.record_read(True)  # a 410 counts as an (empty) read
        raise
    meta.record_read(not result["events"])
    return result


ROUTES: list[Route] = [Route("GET", "/contexts/{name}/changes", changes, "read", response="ChangePage")]
