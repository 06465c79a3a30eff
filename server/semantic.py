"""Query vectors for the semantic lanes: the cue cache (one per provider) in front of the embedding provider.

Resolve's semantic tier, passage search's vector lane and the evidence endpoint embed their
query text with purpose `query` through one LRU map from the exact text to its unit vector
(1024 entries, shared by every context: the model is fixed for the process's life). A hit makes
no provider call; a vector of another width than the cached ones clears the map first; a
zero-length vector is never cached and fails the call.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np
import structlog

from taguru_server.server.providers.embedder import Embedder
from taguru_server.store.errors import ApiError, Code
from taguru_server.store.model.context import Context
from taguru_server.store.read import semantic
from taguru_server.store.read.passages import LANE_TRACE
from taguru_server.store.read.vector_lane import VectorQuery

log = structlog.get_logger("taguru.semantic")

CUE_CACHE_SIZE = 1024
DEADLINE_RESERVE_SECS = 0.1  # provider attempts for a request end this long before its deadline


class CueCache:
    """Exact query text → unit vector, least recently used first out."""

    def __init__(self, size: int = CUE_CACHE_SIZE) -> None:
        self.size = size
        self.map: OrderedDict[str, np.ndarray] = OrderedDict()
        self.width: int | None = None

    def get(self, text: str) -> np.ndarray | None:
        got = self.map.get(text)
        if got is not None:
            self.map.move_to_end(text)
        return got

    def put(self, text: str, vector: np.ndarray) -> None:
        if self.width is not None and len(vector) != self.width:
            self.map.clear()
        self.width = len(vector)
        self.map[text] = vector
        self.map.move_to_end(text)
        while len(self.map) > self.size:
            self.map.popitem(last=False)


class QueryFailed(Exception):
    """Embedding a query failed; `message` is the provider's failure text (never the query), `kind` its class."""

    def __init__(self, message: str, kind: str = "status") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


async def query_vector(embedder: Embedder, cache: CueCache, text: str, deadline: float | None) -> np.ndarray:
    """The unit vector of a query text, from the cache or the provider; raises QueryFailed."""
    got = cache.get(text)
    if got is not None:
        trace = LANE_TRACE.get()  # set only while tracing
        if trace is not None:
            trace.event("taguru.cache", "cue_cache_hit")
        return got
    try:
        [vector] = await embedder.embed([text], "query", deadline)
    except Exception as exc:  # EmbedFailed carries its fixed failure text and its class
        raise QueryFailed(getattr(exc, "message", None) or type(exc).__name__, getattr(exc, "kind", "status")) from None
    if len(vector) > 0:  # the provider refuses a zero-length query vector itself; never cache one
        cache.put(text, vector)
    return vector


_CACHES: weakref.WeakKeyDictionary[Any, CueCache] = weakref.WeakKeyDictionary()


def cue_cache(embedder: Embedder) -> CueCache:
    """The cue cache of a provider: one per provider object, i.e. per server process (its model is fixed
    at boot); apps in one process with different providers (tests) do not share vectors."""
    cache = _CACHES.get(embedder)
    if cache is None:
        cache = _CACHES[embedder] = CueCache()
    return cache


async def passage_vector_query(
    embedder: Embedder | None,
    passages_enabled: bool,
    query: str,
    floors: tuple[Any, ...],
    deadline: float | None,
) -> VectorQuery:
    """The vector lane's inputs for a passage search: the query is embedded only when the passage lane is on
    (and the caller has checked the limit and the query's terms); a failure becomes the lane's reason."""
    floor = clamp_floor(*floors)
    if embedder is None:
        return VectorQuery(floor=floor)
    if not passages_enabled:
        return VectorQuery(provider_model=embedder.model, passages_enabled=False, floor=floor)
    try:
        vector = await query_vector(embedder, cue_cache(embedder), query, deadline)
    except QueryFailed as exc:
        return VectorQuery(provider_model=embedder.model, passages_enabled=True, failure=exc.message, floor=floor)
    return VectorQuery(provider_model=embedder.model, passages_enabled=True, vector=vector, floor=floor)


def clamp_floor(*candidates: Any) -> float:
    """The first floor that is set (request, context, server default), clamped to [0, 1]."""
    for value in candidates:
        if value is not None:
            return min(max(float(value), 0.0), 1.0)
    return 0.35


async def semantic_tier(
    embedder: Embedder | None,
    ctx: Context,
    kind: int,
    cue: str,
    served: list[Any],
    found: list[Any],
    floors: tuple[Any, ...],
    deadline: float,
) -> list[tuple[str, float]]:
    """Resolve's semantic candidates (docs/embeddings.md): [] unless the lexical tier is weak and vectors serve.

    A failed cue embedding is only logged while lexical candidates are served; with none it ends
    the call: 408 once the budget is spent, else 502 `embeddings_failed`."""
    if embedder is None or not semantic.wants_vector(ctx, kind, found, embedder.model):
        return []
    try:  # the attempt ends a little before the deadline, so a cut-short entry answers its own 408
        q = await query_vector(embedder, cue_cache(embedder), cue, deadline - DEADLINE_RESERVE_SECS)
    except QueryFailed as exc:
        if served:
            log.warning("resolve.semantic_failed", kind=exc.kind)
            return []
        late = time.monotonic() > deadline - DEADLINE_RESERVE_SECS
        code = Code.TIMEOUT if late or exc.kind == "deadline" else Code.EMBEDDINGS_FAILED
        raise ApiError(code, f"semantic entry failed: {exc.message}") from None
    return semantic.candidates(ctx, kind, q, clamp_floor(*floors))
