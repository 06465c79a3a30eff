"""The MCP tools that answer a question from one context: evidence assembly, and the composed retrieve (run by
server/mcp/retrieve.py, not routed).

Each tool but `retrieve` is one routed call under the caller's key; the definitions are the reference's,
verbatim. The tool class is passed in by `tools.py`, which owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from taguru_server.server.mcp.props import CONTEXT, int_prop, num_prop, str_prop

T = TypeVar("T")

# The arguments of the retrieval loop, which assemble_evidence runs as retrieve does.
LOOP_PROPS = {
    "activate_decay": num_prop("activate's decay (default 0.5)"),
    "activate_limit": int_prop("activate's limit (default 20)"),
    "context": CONTEXT,
    "dice_floor": num_prop("one-call override of the resolve fuzzy floor"),
    "labels": {
        "description": "relation labels to query on, alongside the always-run activate",
        "items": {"type": "string"},
        "type": ["string", "array"],
    },
    "origins": {
        "description": "cue(s) to resolve into anchors",
        "items": {"type": "string"},
        "type": ["string", "array"],
    },
    "resolve_limit": int_prop("max resolve candidates per origin (default/ceiling 1000)"),
}


def tools(tool: Callable[..., T]) -> tuple[T, ...]:
    """assemble_evidence, retrieve, as `tool(...)` builds them."""
    return (
        tool(
            "assemble_evidence",
            (
                "Opt-in evidence assembly: runs the same "
                "resolve/query/activate/search_passages/cite_passage fan-out `retrieve` "
                "runs, then normalizes every graph association, graph activation, passage "
                "hit, and (opt-in) community hit into one ranked, deduplicated, "
                "citation-complete package under an explicit byte/token/item budget — for "
                "a caller that will hand the result to an external answer model with a "
                "bounded context window, unlike `retrieve`'s raw, unranked results. "
                "`origins` and `labels` share `retrieve`'s own contract; the "
                "passage/community lanes search `text_fallback_query` when given, "
                "otherwise `origins` joined with '; '. Contradictory and corroborating "
                "evidence are both preserved intentionally — never silently collapsed to "
                "a majority view or a single opaque count. `budget` bounds the response "
                "(defaults: 40 items, 64 KiB, ~4000 estimated tokens); a budget too small "
                "for even the smallest candidate still answers 200 with an empty package "
                "and every candidate accounted for under "
                "`omitted`/`omitted_total`/`omitted_by_reason`, never an error. `plan` "
                "reports which lanes ran and why not when they did not, plus the "
                "selection/reranker trace. `rerank` optionally reorders the pool through "
                "a server-configured reranker (may only reorder — never adds, drops, or "
                "edits a candidate); with no `TAGURU_RERANK_URL`/`_MODEL` configured, or "
                "on any provider failure, selection stays fully deterministic and "
                "`plan.reranker.reason` names why in a fixed, machine-readable vocabulary "
                "— never a call-ending error. Does not change `retrieve` or any direct "
                "endpoint's behavior."
            ),
            {
                **LOOP_PROPS,
                "budget": {
                    "description": (
                        "three independent hard ceilings on the returned package; an omitted "
                        "field takes its own default"
                    ),
                    "properties": {
                        "max_bytes": int_prop("default 65536 (64 KiB), ceiling 1048576 (1 MiB)"),
                        "max_items": int_prop("default 40, ceiling 1000"),
                        "max_tokens": int_prop(
                            "default 4000, an estimate — no separate ceiling beyond max_items/max_bytes"
                        ),
                    },
                    "type": "object",
                },
                "include_communities": {
                    "description": (
                        "also search the context's derived community-summary artifact (default "
                        "false); no artifact is a degrade (plan.lanes.communities.ran = false), "
                        "never a refusal"
                    ),
                    "type": "boolean",
                },
                "rerank": {
                    "description": (
                        "opts into reordering the pool through a configured reranker (ADR 0006 "
                        "\u00a712); when absent, when no provider is configured, or on any failure, "
                        "selection stays fully deterministic and plan.reranker.reason names why"
                    ),
                    "properties": {
                        "model": str_prop(
                            "pins the call to this exact model; a mismatch with the configured "
                            "provider degrades with reason 'model_mismatch'"
                        )
                    },
                    "type": "object",
                },
                "search_limit": int_prop("the passage/community search calls' limit (default 5, ceiling 200)"),
                "semantic_floor": {
                    "description": "one-call override of the resolve/search/communities semantic floor",
                    "type": "number",
                },
                "text_fallback_query": str_prop(
                    "passage/community lanes' query text; omitted means 'origins' joined with '; '"
                ),
            },
            ("context", "origins"),
            "POST",
            "/contexts/{context}/evidence",
            checks=("S:context", "P:origins"),
            body=(
                "origins",
                "labels",
                "dice_floor",
                "semantic_floor",
                "resolve_limit",
                "activate_decay",
                "activate_limit",
                "text_fallback_query",
                "search_limit",
                "include_communities",
                "budget",
                "rerank",
            ),
        ),
        tool(
            "retrieve",
            (
                "The composed retrieval loop the SDKs' Context.retrieve() runs, as one "
                "call: resolve each origin cue to an anchor (auto-picking the top "
                "candidate; every candidate, gloss included, still comes back under "
                "resolved so a bad auto-pick is visible), describe each anchor, gather "
                "associations (query when labels pins the facets, activate always), fetch "
                "a citation for every located attribution, and optionally fall back to "
                "passage search. origins must already be extracted entity names, not a "
                "question — decomposing a question and phrasing a declarative "
                "text_fallback_query are the caller's job. citations rides back as a list "
                "of {source, paragraph, citation} (paragraphs missing a stored passage "
                "are silently skipped, same as the SDKs). When the fallback search ran, "
                "its hits land in passage_hits and its execution plan in search_plan "
                "(null when no fallback ran)."
            ),
            {
                **LOOP_PROPS,
                "auto_pick": {
                    "description": (
                        "adopt each origin's top resolve candidate as its anchor; false uses the "
                        "cue itself verbatim (default true)"
                    ),
                    "type": "boolean",
                },
                "describe_first": {
                    "description": "describe every anchor before gathering associations (default true)",
                    "type": "boolean",
                },
                "fetch_citations": {
                    "description": "resolve every located attribution into a cited passage (default true)",
                    "type": "boolean",
                },
                "search_limit": int_prop("the fallback search_passages call's limit (default 5)"),
                "semantic_floor": {"description": "one-call override of the resolve semantic floor", "type": "number"},
                "text_fallback_only_if_empty": {
                    "description": "only run the fallback when no associations were gathered (default true)",
                    "type": "boolean",
                },
                "text_fallback_query": str_prop(
                    "declarative-phrasing query for a search_passages fallback pass; omitted runs no fallback"
                ),
            },
            ("context", "origins"),
            "",
            "",
        ),
    )
