"""The MCP tools that read one context's names and records: resolve and its explanations, describe, the listings,
the change feed, passages and citations, the schema, the export and the manual.

Each tool is one routed call under the caller's key; the definitions are the reference's, verbatim. The tool
class is passed in by `tools.py`, which owns it. The four resolve tools and the three keyset listings share
their arguments, so each family is built by one function (`_resolving`, `_listing`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from taguru_server.server.mcp.props import CONTEXT, STRINGS, int_prop, num_prop, str_prop

T = TypeVar("T")


def tools(tool: Callable[..., T]) -> tuple[T, ...]:
    """resolve, resolve_label, explain_resolve, explain_resolve_label, describe, changes, list_labels, get_aliases,
    list_sources, lookup_passages, cite_passage, get_schema, export_context, get_protocol, as `tool(...)`
    builds them."""
    return (
        _resolving(
            tool,
            "resolve",
            (
                "Resolve free wording to stored concept names (normalized entry, absorbs "
                "typos). The retrieval entry: use the canonical names it returns as "
                "origins for explore/activate. Each candidate says how it matched (kind: "
                "exact/alias = the cue IS a stored spelling; containment/fuzzy = it "
                "merely overlaps one) and carries a gloss of its heaviest facts — read "
                "the gloss before adopting a lookalike (京都 scores 0.67 against 東京都; the "
                "glosses tell them apart). Top candidates also carry their declared types "
                "when the context has an installed schema. Empty → reword, or lower "
                "dice_floor (e.g. 0.2) and retry."
            ),
            "/contexts/{context}/resolve",
        ),
        _resolving(
            tool,
            "resolve_label",
            "resolve, for relation labels. Use before writes (check before mint) and to pick query labels.",
            "/contexts/{context}/resolve_label",
        ),
        _resolving(
            tool,
            "explain_resolve",
            (
                "Why didn't (or did) a concept come back for a cue — one call instead of "
                "re-running resolve with varied floors and cross-referencing by hand. "
                "Name the cue AND the concept you expected; the answer is the first "
                "verdict that applies: not_in_vocabulary (nearest stored spellings "
                "attached — register an alias?), cue_resolved_exactly (the cue IS another "
                "stored spelling; the exact tier answers alone), below_floor (its actual "
                "score vs the dice_floor in effect — the floor that would have shown it), "
                "below_cutoff (passed the floor, lost on limit), semantic_not_run / "
                "semantic_below_floor (whether the fallback tier joined, and its gloss "
                "cosine vs the semantic floor when it did), or served. Pass the same "
                "overrides as the resolve call being questioned."
            ),
            "/contexts/{context}/resolve/explain",
            expected="the concept you expected among the candidates",
        ),
        _resolving(
            tool,
            "explain_resolve_label",
            "explain_resolve, for relation labels.",
            "/contexts/{context}/resolve_label/explain",
            expected="the label you expected among the candidates",
        ),
        tool(
            "describe",
            (
                "A concept's outline: which labels carry how many facts, per role, plus "
                "its declared types when the context has an installed schema. Check a hub "
                "here first, then query just the labels you need — never pull a whole "
                "profile blind."
            ),
            {"concept": {"type": "string"}, "context": CONTEXT},
            ("context", "concept"),
            "POST",
            "/contexts/{context}/describe",
            checks=("S:context", "S:concept"),
            body=("concept",),
        ),
        tool(
            "changes",
            (
                "What changed in this context since a cursor? Content-change events "
                "(associations_added, source_stored/retracted, aliases, schema_updated), "
                "aggregated per write call — a bulk import is one associations_added, "
                "never one event per line, though one call can emit several kinds. Omit "
                "since to start tailing (empty page + the cursor to poll from, right "
                "after a full sync). more=true means poll again immediately. A 410 "
                "stale_cursor means the position is gone (restart, recreate, or too far "
                "behind) — full resync, then tail from a fresh cursor."
            ),
            {
                "context": CONTEXT,
                "limit": int_prop("default 100, capped at 1000"),
                "since": str_prop("the opaque cursor a previous page's next handed back"),
            },
            ("context",),
            "GET",
            "/contexts/{context}/changes",
            checks=("S:context", "Q"),
            query=("since", "limit"),
        ),
        _listing(
            tool,
            "list_labels",
            (
                "The relation vocabulary (canonical only). Read it before extracting to "
                "avoid spelling forks. Keyset-paged by label; total above the returned "
                "count means more pages."
            ),
            "/contexts/{context}/labels",
            after="only labels sorting strictly after this one",
            prefix="only labels starting with this text",
        ),
        _listing(
            tool,
            "get_aliases",
            (
                "Registered aliases (alias → canonical), paged across both namespaces — "
                "concepts first, then labels. total above the returned count means more "
                "pages; continue with after = 'concept:<alias>' or 'label:<alias>' (the "
                "last entry shown)."
            ),
            "/contexts/{context}/aliases",
            after="'concept:<alias>' or 'label:<alias>' — the last entry of the previous page",
            prefix="only aliases (in either namespace) starting with this text",
        ),
        _listing(
            tool,
            "list_sources",
            (
                "Source ids with registered passages — targets for retract_source / "
                "lookup_passages, inventory for diff sync. Keyset-paged by id; total "
                "above the returned count means more pages. Beside the bare `sources` "
                "list, `entries` carries each source's metadata: stored_at "
                "(server-stamped epoch seconds), date (user-supplied), tags — absent keys "
                "mean the source has none."
            ),
            "/contexts/{context}/sources",
            after="only ids sorting strictly after this one",
            prefix="only ids starting with this text",
        ),
        tool(
            "lookup_passages",
            "Fetch the passages behind attribution source ids — the answer-from-originals half of retrieval.",
            {"context": CONTEXT, "sources": STRINGS},
            ("context", "sources"),
            "POST",
            "/contexts/{context}/sources/lookup",
            checks=("S:context", "P:sources"),
            body=("sources",),
        ),
        tool(
            "cite_passage",
            (
                "Fetch one located, verbatim excerpt from a registered source by "
                "paragraph position: the citation counterpart of lookup_passages' "
                "whole-document dereference. Returns the exact paragraph text plus "
                "source, section, and typed locator (page/slide/sheet/table position) "
                "provenance."
            ),
            {
                "context": CONTEXT,
                "index": {
                    "description": "deprecated alias for `paragraph`; kept for pre-#35 callers, prefer `paragraph`",
                    "type": "integer",
                },
                "paragraph": {"description": "zero-based paragraph position", "type": "integer"},
                "source": {"type": "string"},
            },
            ("context", "source"),
            "POST",
            "/contexts/{context}/citations",
            checks=("S:context", "S:source", "cite"),
            body=("source", "paragraph"),
            extra={"anyOf": [{"required": ["paragraph"]}, {"required": ["index"]}]},
        ),
        tool(
            "get_schema",
            (
                "The installed schema document (entity types, relation domain/range "
                "constraints, and enforcement mode), or a 404 distinguishing 'no schema "
                "installed' from 'no such context'."
            ),
            {"context": CONTEXT},
            ("context",),
            "GET",
            "/contexts/{context}/schema",
            checks=("S:context",),
        ),
        tool(
            "export_context",
            (
                "The whole context as an import batch stream (JSON Lines text) — one "
                "batch per source, create block first, aliases last; `taguru import` or "
                "POST /import restores it (per-source retract-then-apply, idempotent). "
                "The portable, version-independent backup of one context. The stream "
                "rides back as one text block: for very large contexts prefer GET "
                "/contexts/{name}/export over plain HTTP, or `taguru export` offline."
            ),
            {"context": CONTEXT},
            ("context",),
            "GET",
            "/contexts/{context}/export",
            checks=("S:context",),
        ),
        tool("get_protocol", "The complete manual: ingest discipline and retrieval loop.", {}, (), "GET", "/protocol"),
    )


def _resolving(tool: Callable[..., T], name: str, description: str, path: str, expected: str | None = None) -> T:
    """A resolve tool (concepts or labels); with what `expected` names, the explain tool that questions it."""
    props = {
        "context": CONTEXT,
        "cue": {"type": "string"},
        "dice_floor": num_prop("one-call override of the fuzzy floor"),
        "limit": int_prop("max candidates (default/ceiling 1000)"),
        "semantic_floor": num_prop("one-call override of the semantic floor"),
    }
    asked: tuple[str, ...] = ("context", "cue")
    if expected is not None:
        props["expected"] = str_prop(expected)
        asked += ("expected",)
    body = (*asked[1:], "dice_floor", "semantic_floor", "limit")
    return tool(name, description, props, asked, "POST", path, checks=tuple(f"S:{k}" for k in asked), body=body)


def _listing(tool: Callable[..., T], name: str, description: str, path: str, after: str, prefix: str) -> T:
    """A keyset-paged listing: `limit`, the `after` position and a `prefix` filter, as query values."""
    props = {
        "after": str_prop(after),
        "context": CONTEXT,
        "limit": int_prop("page size (default/ceiling 1000)"),
        "prefix": str_prop(prefix),
    }
    return tool(
        name,
        description,
        props,
        ("context",),
        "GET",
        path,
        checks=("S:context", "Q"),
        query=("limit", "after", "prefix"),
    )
