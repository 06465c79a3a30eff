"""The wire records of a context's description, rendered from the store's typed results."""

from __future__ import annotations

from typing import Any

from taguru_server.store.model.context import ContextStats


def stats_out(stats: ContextStats) -> dict[str, Any]:
    """The ContextStats wire shape, in wire order."""
    return {
        "associations": stats.associations,
        "concepts": stats.concepts,
        "labels": stats.labels,
        "sources": stats.sources,
        "footprint_bytes": stats.footprint_bytes,
        "dead_edges": stats.dead_edges,
        "dead_attributions": stats.dead_attributions,
        "arena_slack": 0,
        "unsourced_edges": stats.unsourced_edges,
        "unsourced_weight": stats.unsourced_weight,
        "top_concepts": [{"label": name, "count": count} for name, count in stats.top_concepts],
        "label_sample": list(stats.label_sample),
    }
