"""The wire page of the change feed, rendered from the store's typed feed page."""

from __future__ import annotations

from typing import Any

from taguru_server.store.persist.feed import FeedPage, check_held, cursor


def page_result(page: FeedPage, since: tuple[int, int] | None) -> dict[str, Any]:
    """The wire result for a page read after `since` (None: start tailing), or the 410."""
    if since is None:
        return {"events": [], "next": cursor(page.epoch, page.latest), "more": False}
    check_held(page, since)
    seq = since[1]
    events = [{"seq": s, "kind": kind, **fields} for s, kind, fields in page.events]
    served_to = page.events[-1][0] if page.events else seq
    return {"events": events, "next": cursor(page.epoch, served_to), "more": served_to < page.latest}
