"""The embedding refresh an offline `taguru import` runs for the contexts it touched (docs/embeddings.md).

With a provider configured (TAGURU_EMBED_URL …) and no `--no-embed`: glosses, then paragraph rows
when TAGURU_EMBED_PASSAGES is on, committed like the refresh route's (with the change-log row and
the `revision.config` bumps). A failure is reported per context and makes the exit status 1; the
imported data stays durable either way.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from taguru_server.client.progress import Progress
from taguru_server.server.config import Settings
from taguru_server.server.providers.embedder import (
    EmbedMetrics,
    http_embedder,
    local_embedder,
    provider_kind,
)
from taguru_server.store.derive.embed_refresh import commit_half, index_embed, refresh_glosses, refresh_passages
from taguru_server.store.persist.registry import Registry


def _counted(embed: Any, progress: Progress) -> Any:
    """`embed`, advancing the progress bar by the texts each call embedded."""

    async def counted(texts: list[str]) -> Any:
        got = await embed(texts)
        progress.update(advance=len(texts))
        return got

    return counted


async def _refresh_all(
    settings: Settings, registry: Registry, names: list[str], progress: Progress
) -> tuple[list[str], list[str]]:
    kind = provider_kind(settings)
    metrics = EmbedMetrics(CollectorRegistry(), configured=kind == "http")
    session: aiohttp.ClientSession | None = None
    if kind == "http":
        session = aiohttp.ClientSession()
        embedder: Any = http_embedder(settings, session, metrics, time.monotonic)
    else:
        embedder = await asyncio.to_thread(local_embedder, settings, metrics)
    said: list[str] = []
    failed: list[str] = []
    try:
        if embedder is None:
            return said, failed

        embed = _counted(index_embed(embedder, None), progress)

        for name in names:
            ctx = registry.get(name)
            if ctx is None:
                continue
            glosses = await refresh_glosses(ctx, embedder.model, embed)
            commit_half(registry, ctx, glosses)
            if glosses.error is not None:
                failed.append(
                    f"taguru: import: {name}: embedding refresh failed ({glosses.error}) — the graph is imported "
                    f"and durable; refresh later via POST /contexts/{name}/embeddings/refresh"
                )
                continue
            if glosses.embedded:
                said.append(f"{name}: embedded {glosses.embedded} glosses")
            if not settings.embed_passages:
                continue
            passages = await refresh_passages(ctx, embedder.model, embed, settings.passage_vector_limit)
            commit_half(registry, ctx, passages)
            if passages.error is not None:
                failed.append(
                    f"taguru: import: {name}: passage embedding refresh failed ({passages.error}) — the passages "
                    f"are imported and durable; refresh later via POST /contexts/{name}/embeddings/refresh"
                )
            elif passages.embedded:
                said.append(f"{name}: embedded {passages.embedded} passages")
    finally:
        close = getattr(embedder, "close", None)
        if callable(close):
            close()
        if session is not None:
            await session.close()
    return said, failed


def embed_imported(settings: Settings, registry: Registry, names: list[str]) -> tuple[list[str], list[str]]:
    """(lines to print, failure lines) after refreshing the touched contexts; nothing without a provider."""
    if provider_kind(settings) is None or not names:
        return [], []
    progress = Progress("taguru import: embedding", 0, sys.stderr, unit="texts")
    progress.update(0)  # on a terminal, at once: loading a local model takes a while
    try:
        return asyncio.run(_refresh_all(settings, registry, names, progress))
    finally:
        progress.close()
