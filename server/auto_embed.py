"""The auto-embed ticker (`TAGURU_EMBED_AUTO`, docs/embeddings.md): refresh what writes made stale.

Every `TAGURU_FLUSH_SECS` (default 5) the ticker refreshes the gloss vectors of every loaded
context whose graph changed since its last gloss refresh, and (with the passage lane on) the
paragraph vectors of every context whose passages changed since its last passage refresh. There
is no deadline; a failure is logged and retried on a later tick; nothing reaches clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from taguru_server.store.derive.embed_refresh import Half, commit_half, index_embed, refresh_glosses, refresh_passages
from taguru_server.store.persist.registry import Registry

log = structlog.get_logger("taguru.auto_embed")


class AutoEmbed:
    """Which revision of each context's graph and passages was last embedded, and the tick itself."""

    def __init__(self, registry: Registry, embedder: Any, passages: bool, passage_limit: int) -> None:
        self.registry = registry
        self.embedder = embedder
        self.passages = passages
        self.passage_limit = passage_limit
        self.glossed: dict[int, int] = {}  # context id -> rev_graph last embedded
        self.paragraphed: dict[int, int] = {}  # context id -> rev_passages last embedded
        self.embed = index_embed(embedder, None)

    async def _commit(self, ctx: Any, half: Half) -> None:
        async with self.registry.write_section(float("inf")):
            await self.registry.apply_off_loop({ctx.name}, lambda: commit_half(self.registry, ctx, half))

    async def tick(self) -> None:
        for name in self.registry.loaded_names():
            ctx = self.registry.get(name)
            if ctx is None:
                continue
            if self.glossed.get(ctx.cid) != ctx.meta.rev_graph:
                seen = ctx.meta.rev_graph
                half = await refresh_glosses(ctx, self.embedder.model, self.embed)
                await self._commit(ctx, half)
                if half.error is None:
                    self.glossed[ctx.cid] = seen
                else:
                    log.warning("auto_embed.failed", half="glosses", error=half.error)
            if self.passages and self.paragraphed.get(ctx.cid) != ctx.meta.rev_passages:
                seen = ctx.meta.rev_passages
                half = await refresh_passages(ctx, self.embedder.model, self.embed, self.passage_limit)
                await self._commit(ctx, half)
                if half.error is None:
                    self.paragraphed[ctx.cid] = seen
                else:
                    log.warning("auto_embed.failed", half="passages", error=half.error)

    async def run(self, every_secs: float, sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        while True:
            await sleep(every_secs)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # logged by type; retried on the next tick
                log.warning("auto_embed.tick_failed", error_type=type(exc).__name__)
