"""The bundled demo corpus (sake breweries of a fictional town, Japanese and English)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def demo_stream_path() -> Path:
    return Path(__file__).with_name("corpus.jsonl")


def demo_requests() -> list[tuple[str, str, dict[str, Any]]]:
    """The calls `taguru demo` makes to show what the service answers."""
    return [
        (
            "assemble an evidence package",
            "/contexts/demo/evidence",
            {
                "origins": ["青嶺酒造"],
                "labels": ["杜氏"],
                "text_fallback_query": "青嶺酒造の杜氏は誰か",
                "budget": {"max_items": 6, "max_tokens": 1500},
            },
        ),
        ("resolve an English alias", "/contexts/demo/resolve", {"cue": "aomine brewery", "limit": 3}),
        ("spread activation from a brewery", "/contexts/demo/activate", {"origins": ["青嶺酒造"], "limit": 5}),
        ("search passages", "/contexts/demo/sources/search", {"query": "青嶺酒造の杜氏は誰か", "limit": 3}),
        ("search English passages", "/contexts/demo/sources/search", {"query": "master brewer", "limit": 2}),
        ("cite a paragraph", "/contexts/demo/citations", {"source": "docs/aomine.md", "paragraph": 2}),
    ]


def semantic_demo_request() -> tuple[str, str, dict[str, Any]]:
    """Shown when the local embedding model is installed: an English question over Japanese passages."""
    return (
        "ask in English about Japanese passages (the vector lane)",
        "/contexts/demo/sources/search",
        {"query": "Who is the head brewer of the Aomine brewery?", "limit": 3},
    )
