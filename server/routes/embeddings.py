"""GET /contexts/{name}/embeddings (what vectors are stored) and POST …/embeddings/refresh (embed what is stale)."""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

from taguru_server.server.call import Call, Route, not_durable, note_write
from taguru_server.server.providers.embedder import Embedder
from taguru_server.server.routes.common import before_start
from taguru_server.server.state import EMBEDDER_KEY, METRICS_KEY, passage_lane_enabled
from taguru_server.store.derive.embed_refresh import Half, commit_half, index_embed, refresh_glosses, refresh_passages
from taguru_server.store.errors import ApiError, Code, no_context
from taguru_server.store.model.context import Context
from taguru_server.store.persist.registry import CommitFailed

DEADLINE_RESERVE_SECS = 0.1
UNCONFIGURED = "no embedding provider is configured (set TAGURU_EMBED_URL and TAGURU_EMBED_MODEL)"

# one refresh per context at a time: a second one waits, then finds nothing stale
_LOCKS: weakref.WeakKeyDictionary[Context, asyncio.Lock] = weakref.WeakKeyDictionary()


def passages_enabled(call: Call) -> bool:
    """The passage lane (TAGURU_EMBED_PASSAGES with a provider)."""
    return passage_lane_enabled(call.app_state)


def passage_vector_limit(call: Call) -> int:
    """TAGURU_PASSAGE_VECTOR_LIMIT (default 20000)."""
    return call.settings.passage_vector_limit


def _count_rebuild(call: Call, store: str, half: Half) -> None:
    metrics = call.app_state.get(METRICS_KEY)
    if metrics is not None and half.width_rebuilt:
        metrics.width_rebuilds.labels(store).inc()


def _embedder(call: Call) -> Embedder | None:
    return call.app_state.get(EMBEDDER_KEY)


async def status(call: Call) -> Any:
    ctx = call.context()
    embedder = _embedder(call)
    out: dict[str, Any] = {"provider_model": embedder.model if embedder is not None else None}
    g = ctx.vectors.glosses
    if g is not None and (g.concepts.rows or g.labels.rows):
        out["glosses"] = {
            "model": g.model,
            "width": g.width,
            "concepts": len(g.concepts.rows),
            "labels": len(g.labels.rows),
        }
    p = ctx.vectors.passages
    if p is not None and p.rows:
        out["passages"] = {"model": p.model, "width": p.width, "rows": p.rows}
    return out


def _failed(call: Call, prefix: str, message: str) -> ApiError:
    code = Code.TIMEOUT if time.monotonic() > call.deadline - DEADLINE_RESERVE_SECS else Code.EMBEDDINGS_FAILED
    return ApiError(code, f"{prefix}{message}")


async def _persist(call: Call, ctx: Context, half: Half) -> None:
    """Commit what a half published (with the change-log row); a serving change bumps revision.config.

    The provider calls ran outside the store's write section (the route takes it only here), so
    on a shared store other processes' writes never wait for an embedding provider. A context
    deleted meanwhile (by this process or, seen by the section's catch-up, another) answers 404
    `no_context`, as a refresh of a missing context does, and nothing is written."""
    async with call.registry.write_section(call.deadline):
        if call.registry.cid_of(ctx.name) != ctx.cid:
            # deleted (perhaps recreated) while the provider was asked: there is nothing to refresh any more
            assert call.name is not None
            raise no_context(call.name)
        try:
            committed = await call.registry.apply_off_loop({ctx.name}, lambda: commit_half(call.registry, ctx, half))
        except CommitFailed as exc:
            raise not_durable(
                exc, "the embedding refresh could not be made durable; the vectors were not changed"
            ) from None
    if committed:
        note_write()


async def refresh(call: Call) -> Any:
    embedder = _embedder(call)
    if embedder is None:
        raise ApiError(Code.EMBEDDINGS_UNCONFIGURED, UNCONFIGURED)
    before_start(call)
    ctx = call.context()
    # provider attempts end a little before the request's deadline, so a refresh cut short answers with its
    # own 408 ("embedding refresh failed: …") rather than the generic one
    embed = index_embed(embedder, call.deadline - DEADLINE_RESERVE_SECS)
    lock = _LOCKS.setdefault(ctx, asyncio.Lock())
    async with lock:
        glosses = await refresh_glosses(ctx, embedder.model, embed)
        _count_rebuild(call, "gloss", glosses)
        await _persist(call, ctx, glosses)
        if glosses.error is not None:
            raise _failed(call, "embedding refresh failed: ", glosses.error)
        if not passages_enabled(call):
            return {"embedded": glosses.embedded, "total": glosses.total}
        before_start(call)
        passages = await refresh_passages(ctx, embedder.model, embed, passage_vector_limit(call))
        _count_rebuild(call, "passages", passages)
        await _persist(call, ctx, passages)
        if passages.error is not None:
            raise _failed(call, "passage embedding refresh failed partway (progress is saved): ", passages.error)
    return {
        "embedded": glosses.embedded + passages.embedded,
        "total": glosses.total + passages.total,
        "glosses": {"embedded": glosses.embedded, "total": glosses.total},
        "passages": {
            "embedded": passages.embedded,
            "total": passages.total,
            "skipped_over_limit": passages.skipped_over_limit,
        },
    }


ROUTES: list[Route] = [
    Route("GET", "/contexts/{name}/embeddings", status, "read", response="EmbeddingStatus"),
    Route(
        "POST",
        "/contexts/{name}/embeddings/refresh",
        refresh,
        "write",
        response="EmbeddingRefresh",
        own_write_section=True,  # waits on the embedding provider: takes the section around its commit only
    ),
]
