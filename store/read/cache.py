"""The versioned read cache of a context, and the warm-up that builds the read-side indexes up front."""

from __future__ import annotations

from typing import Any

from taguru_server.store.model.context import Context
from taguru_server.store.read.activation_image import warm_activation


def warm(ctx: Context) -> None:
    """Build the read-side indexes (BM25 segments, activation graph, lexicon views) up front; the activation
    graph is mapped from its image where the context is as its edge image left it (`store.read.activation_image`)."""
    ctx.seal_indexes()
    warm_activation(ctx)


def read_version(ctx: Context) -> tuple[int, ...]:
    """What a cached read result may depend on: edges and their attributions, passages, names, settings.

    Every edge or attribution change bumps `graph_version`, every passage store or removal
    bumps `rev_passages` and the BM25 index version; a schema install (which changes what the
    walks leave out) bumps only `rev_config`; a rebuilt context is a new object with its own
    `read_cache`."""
    return (
        ctx.graph_version,
        ctx.meta.rev_config,
        ctx.meta.rev_passages,
        ctx.bm25.version,
        len(ctx.edges.subject),
        len(ctx.concepts),
        len(ctx.labels),
        len(ctx.sources),
    )


def versioned_cache(ctx: Context, name: str, max_entries: int = 100_000) -> dict[Any, Any]:
    """A dict in the context's read cache that starts empty whenever `read_version` changes
    (and when it grows past `max_entries`)."""
    version = read_version(ctx)
    hit = ctx.read_cache.get(name)
    if hit is None or hit[0] != version or len(hit[1]) >= max_entries:
        hit = (version, {})
        ctx.read_cache[name] = hit
    return hit[1]
