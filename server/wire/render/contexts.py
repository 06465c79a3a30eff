"""The wire records of a context's description, rendered from the store's typed results."""

from __future__ import annotations

from typing import Any

from taguru_server.store.model.context import ContextStats


def sizes_out(stats: ContextStats) -> dict[str, Any]:
    """A context's sizes and dead edges, in the order its stats records (the wire's, inspect's) lead with."""
    return {
        "associations": stats.associations,
        "concepts": stats.concepts,
        "labels": stats.labels,
        "sources": stats.sources,
        "footprint_bytes": stats.footprint_bytes,
        "dead_edges": stats.dead_edges,
    }


def stats_out(stats: ContextStats) -> dict[str, Any]:
    """The ContextStats wire shape, in wire order."""
    return {
        **sizes_out(stats),
        "dead_attributions": stats.dead_attributions,
        "arena_slack": 0,
        "unsourced_edges": stats.unsourced_edges,
        "unsourced_weight": stats.unsourced_weight,
        "top_concepts": [{"label": name, "count": count} for name, count in stats.top_concepts],
        "label_sample": list(stats.label_sample),
    }
