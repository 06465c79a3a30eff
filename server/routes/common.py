"""What the resource handlers share: request caps, paging limits, read accounting, cursors."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import attrs

from taguru_server.server.call import Call
from taguru_server.server.errors import at_ceiling, malformed
from taguru_server.server.retrieval_cache import note_lanes, note_read, note_searched, note_uncacheable
from taguru_server.server.semantic import passage_vector_query
from taguru_server.server.state import EMBEDDER_KEY, HEAVY_OPS_KEY, METRICS_KEY, AppState, passage_lane_enabled
from taguru_server.server.variables import current, default_int
from taguru_server.store.errors import ApiError, Code, budget_spent_before
from taguru_server.store.model.context import Context
from taguru_server.store.read.vector_lane import VectorQuery
from taguru_server.store.text import utf8_len

MAX_CONTEXT_NAME_BYTES = 64
MAX_DESCRIPTION_BYTES = 4096
MAX_INPUT_ITEMS = 1000
MAX_MATCH_LIMIT = 1000
DEFAULT_MATCH_LIMIT = 100
MAX_ASSOCIATIONS = 10000
MAX_PASSAGES = 1000
MAX_WEIGHT = 1e6


def clamp_limit(value: int | None, default: int, ceiling: int = MAX_MATCH_LIMIT) -> int:
    """A requested limit with its default applied, silently clamped to the ceiling."""
    return min(default if value is None else value, ceiling)


def count_read(ctx: Context, empty: bool) -> None:
    """Record one read of the context (and whether it found nothing) in its usage counters."""
    ctx.meta.record_read(empty)
    note_read(ctx.name, empty)


def served_hits(call: Call, hits: list[dict[str, Any]]) -> None:
    """Count a search's served hits by the lanes that found them (a retrieval cache hit counts them again)."""
    metrics = call.app_state.get(METRICS_KEY)
    if metrics is not None:
        metrics.hits_served(hits)
    note_lanes(hits)


def count_search(call: Call, ctx: Context, op: str, empty: bool) -> None:
    """One served search of `op` over a context: its usage counters and `taguru_searches_total{op,outcome}`."""
    count_read(ctx, empty)
    metrics = call.app_state.get(METRICS_KEY)
    if metrics is not None:
        metrics.searched(op, empty)
    note_searched(op, empty)


async def search_vector(call: Call, ctx: Context, query: str, floor: float | None) -> VectorQuery:
    """A passage search's vector-lane inputs over one context: the request's floor, else the context's,
    else the server's (the query is embedded only when the passage lane is on)."""
    vector = await passage_vector_query(
        call.app_state.get(EMBEDDER_KEY),
        passage_lane_enabled(call.app_state),
        query,
        (floor, ctx.meta.semantic_floor, call.settings.semantic_floor),
        call.deadline,
    )
    if vector.failure is not None:  # served, never cached: the next request retries the embedding
        note_uncacheable()
    return vector


def query_int(call: Call, key: str) -> int | None:
    """A non-negative integer query-string parameter, or None when absent (400 otherwise)."""
    raw = call.query.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise malformed(
            f"Failed to deserialize query string: {key}: invalid digit found in string", status=400
        ) from None
    if value < 0:
        raise malformed(f"Failed to deserialize query string: {key}: invalid digit found in string", status=400)
    return value


def keyset_limit(call: Call) -> int:
    """The page size of a keyset listing (`?limit=`), at least 1 and at most the match ceiling."""
    return max(1, clamp_limit(query_int(call, "limit"), MAX_MATCH_LIMIT))


def check_cursor(after: str | None, prefix: str | None) -> None:
    """Refuse an `after` cursor or `prefix` longer than its byte cap."""
    for what, value in (("after", after), ("prefix", prefix)):
        if value is not None and utf8_len(value) > 1032:
            raise ApiError(
                Code.INVALID_ARGUMENT, f"{what} is {utf8_len(value)} bytes, over the 1032-byte cap; nothing was applied"
            )


@attrs.frozen
class Keyset:
    """A keyset listing's query: the page size, the `?after=` cursor and the `?prefix=` filter."""

    limit: int
    after: str | None
    prefix: str

    @classmethod
    def of(cls, call: Call) -> Keyset:
        """The call's listing query, checked (the cursor's and the prefix's caps, then the page size): before the
        context is looked up."""
        after, prefix = call.query.get("after"), call.query.get("prefix")
        check_cursor(after, prefix)
        return cls(keyset_limit(call), after, prefix or "")

    def page(self, names: list[str]) -> tuple[int, list[str]]:
        """The total and one page of the sorted names after the cursor, filtered by the prefix."""
        matching = sorted(n for n in names if n.startswith(self.prefix))
        return len(matching), [n for n in matching if self.after is None or n > self.after][: self.limit]


DEFAULT_HEAVY_OPS = default_int("TAGURU_MAX_CONCURRENT_HEAVY_OPS")


def heavy_limit() -> int:
    """TAGURU_MAX_CONCURRENT_HEAVY_OPS (default 2; 0 disables the ceiling)."""
    raw = (current("TAGURU_MAX_CONCURRENT_HEAVY_OPS") or "").strip()
    try:
        value = int(raw) if raw else DEFAULT_HEAVY_OPS
    except ValueError:
        value = DEFAULT_HEAVY_OPS
    return max(value, 0)


def before_start(call: Call) -> None:
    """408 when the request's budget is already spent before the handler's operation starts."""
    if time.monotonic() > call.deadline:
        raise budget_spent_before()


def overloaded(limit: int) -> ApiError:
    """503 `overloaded`: every heavy-operation permit is taken."""
    return at_ceiling("heavy-operation", f"{limit} concurrent calls", "TAGURU_MAX_CONCURRENT_HEAVY_OPS")


# whether this request holds a permit already (an audit's epilogue inside a permitted call takes none)
_HELD: ContextVar[bool] = ContextVar("taguru_heavy_permit_held", default=False)


def try_permit(state: AppState) -> bool:
    """Take one heavy-operation permit if one is free (or the ceiling is off); pair with `release`."""
    limit = heavy_limit()
    ops = state[HEAVY_OPS_KEY]
    if limit and ops.count >= limit:
        return False
    ops.count += 1
    return True


def release(state: AppState) -> None:
    state[HEAVY_OPS_KEY].count -= 1


@contextlib.contextmanager
def permit(state: AppState) -> Iterator[None]:
    """Hold one heavy-operation permit (the pool the communities stream, compaction and the audits share),
    else 503; a no-op when this request holds one already."""
    if _HELD.get():
        yield
        return
    if not try_permit(state):
        raise overloaded(heavy_limit())
    token = _HELD.set(True)
    try:
        yield
    finally:
        _HELD.reset(token)
        release(state)


def heavy_op(call: Call) -> contextlib.AbstractContextManager[None]:
    """`permit` for a routed call."""
    return permit(call.app_state)
