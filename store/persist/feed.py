"""The change feed (`GET /contexts/{name}/changes`): cursors and pages over the durable event log.

Events are written with the commit that makes their write durable (`row_writes.log_change`), numbered
per context from 1 without gaps, and the last `FEED_RETAINED` of them are kept; a compaction evicts
them all and keeps the numbering (`row_writes.evict_feed`). Because the log is in the store, every
worker process answers the same cursor the same way, and the history survives restarts; a
delete-and-recreate gives the context a new epoch, so old cursors become stale.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from taguru_server.store.errors import ApiError, Code

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
STALE = (
    "the cursor's history is no longer held (a restart, a recreate, or more changes than the feed retains) — "
    "run a full resync, then tail again from a fresh cursor (GET /changes without since)"
)
_CURSOR = re.compile(r"cf1-([0-9A-Fa-f]{1,16})-([0-9]{1,20})")
U64 = 2**64


@attrs.frozen
class FeedPage:
    """One read of a context's change feed: its epoch, oldest and latest held seq, and the events asked for.

    `front` is None when nothing was ever held, `latest + 1` when every held event was evicted."""

    epoch: int
    front: int | None
    latest: int
    events: list[tuple[int, str, dict[str, Any]]]


def cursor(epoch: int, seq: int) -> str:
    return f"cf1-{epoch:016x}-{seq}"


def parse_cursor(since: str) -> tuple[int, int]:
    """(epoch, seq) of a cursor, or the 410 for one that is malformed."""
    m = _CURSOR.fullmatch(since)
    if m is None or int(m.group(2)) >= U64:
        raise stale()
    return int(m.group(1), 16), int(m.group(2))


def stale() -> ApiError:
    return ApiError(Code.STALE_CURSOR, STALE)


def check_held(page: FeedPage, since: tuple[int, int]) -> None:
    """Raise the 410 unless the page continues the cursor `since`: same epoch, not past the latest seq,
    and no event after it evicted before it was read."""
    epoch, seq = since
    if epoch != page.epoch or seq > page.latest or (page.front is not None and seq + 1 < page.front):
        raise stale()
