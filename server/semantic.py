"""Query vectors for the semantic lanes: the process-wide cue cache in front of the embedding provider.

Resolve's semantic tier, passage search's vector lane and the evidence endpoint embed their
query text with purpose `query` through one LRU map from the exact text to its unit vector
(1024 entries, shared by every context: the model is fixed for the process's life). A hit makes
no provider call; a vector of another width than the cached ones clears the map first; a
zero-length vector is never cached and fails the call.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol

import numpy as np

CUE_CACHE_SIZE = 1024
ZERO_LENGTH = "the provider returned a zero-length vector"


class QueryEmbedder(Protocol):
    model: str

    async def embed(self, texts: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]: ...


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
    """Embedding a query failed; `message` is the provider's failure text (never the query)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def query_vector(embedder: QueryEmbedder, cache: CueCache, text: str, deadline: float | None) -> np.ndarray:
    """The unit vector of a query text, from the cache or the provider; raises QueryFailed."""
    got = cache.get(text)
    if got is not None:
        return got
    try:
        [vector] = await embedder.embed([text], "query", deadline)
    except Exception as exc:
        raise QueryFailed(getattr(exc, "message", None) or type(exc).__name__) from None
    if len(vector) == 0:
        raise QueryFailed(ZERO_LENGTH)
    cache.put(text, vector)
    return vector


def clamp_floor(*candidates: Any) -> float:
    """The first floor that is set (request, context, server default), clamped to [0, 1]."""
    for value in candidates:
        if value is not None:
            return min(max(float(value), 0.0), 1.0)
    return 0.35
