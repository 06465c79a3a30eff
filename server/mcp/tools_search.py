"""The MCP tools that search and walk the graph: query, recall, activate, explore, paths, and the passage and
community searches.

Each tool is one routed call under the caller's key; the definitions are the reference's, verbatim. The tool
class is passed in by `tools.py`, which owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from taguru_server.server.mcp.props import (
    ANY_TARGET,
    CONTEXT,
    CONTEXTS,
    GROUPS,
    STRINGS,
    cursor_prop,
    int_prop,
    str_prop,
)

T = TypeVar("T")


def _types_filter(role: str) -> dict[str, Any]:
    """query's filter on the declared type(s) of the match's `role` (subject or object)."""
    return {"description": f"filter: {role}'s declared type(s), is_a-expanded", "type": ["string", "array"]}


# query's and recall's page cursor: a match's triple and weight, and its context when several are searched
CROSS_AFTER = cursor_prop(
    (
        "resume past the previous page's last match: copy {weight, subject, "
        "label, object} verbatim from it, plus context too when targeting several "
        "contexts. total stays constant across pages"
    ),
    context=str_prop("required when targeting several contexts (contexts/groups); omit for a single context"),
)


def tools(tool: Callable[..., T]) -> tuple[T, ...]:
    """query, recall, activate, explore, paths, search_passages, explain_search, search_communities, as `tool(...)`
    builds them."""
    return (
        tool(
            "query",
            (
                "Position-pinned search. subject/label/object each take a string or an "
                "array (array = match any); at least one of the three must be given — "
                "leaving all three out is refused rather than matching everything. "
                "subject_types/object_types further narrow by declared entity type "
                "(is_a-expanded) when the context has an installed schema — a filter, "
                "never a substitute for pinning a position, and an empty result on a "
                "schema-free context. Outline with describe, then narrow by label. "
                "Targets one context (context) or several at once (contexts and/or "
                "groups) — cross-context matches carry their context, and past the limit "
                "the strongest |weight| survives (weights share one scale)."
            ),
            {
                "after": CROSS_AFTER,
                "context": CONTEXT,
                "contexts": CONTEXTS,
                "groups": GROUPS,
                "label": {"type": ["string", "array"]},
                "limit": int_prop("default 100, capped at 1000"),
                "object": {"type": ["string", "array"]},
                "object_types": _types_filter("object"),
                "since": int_prop(
                    "assertion-time window start, epoch seconds, half-open [since, until): "
                    "only facts an in-window-dated source attests, weights from those "
                    "attributions alone. Single context only"
                ),
                "subject": {"type": ["string", "array"]},
                "subject_types": _types_filter("subject"),
                "until": int_prop(
                    "assertion-time window end (exclusive), epoch seconds. until alone = "
                    "as-of (knowledge available by then). Single context only"
                ),
            },
            (),
            "POST",
            "/contexts/{context}/query",
            checks=("T",),
            body=(
                "contexts",
                "groups",
                "subject",
                "label",
                "object",
                "subject_types",
                "object_types",
                "limit",
                "after",
                "since",
                "until",
            ),
            extra={
                "allOf": [
                    ANY_TARGET,
                    {"anyOf": [{"required": ["subject"]}, {"required": ["label"]}, {"required": ["object"]}]},
                ]
            },
            cross_path="/query",
        ),
        tool(
            "recall",
            (
                "Every association touching the cue, whatever its position. Use query "
                "when the role matters. Targets one context (context) or several at once "
                "(contexts and/or groups) — cross-context matches carry their context, "
                "and past the limit the strongest |weight| survives (weights share one "
                "scale)."
            ),
            {
                "after": CROSS_AFTER,
                "context": CONTEXT,
                "contexts": CONTEXTS,
                "cue": {"type": "string"},
                "groups": GROUPS,
                "limit": int_prop("default 100, capped at 1000"),
                "since": int_prop(
                    "assertion-time window start, epoch seconds, half-open [since, until). Single context only"
                ),
                "until": int_prop(
                    "assertion-time window end (exclusive), epoch seconds. until alone = as-of. Single context only"
                ),
            },
            ("cue",),
            "POST",
            "/contexts/{context}/recall",
            checks=("T", "S:cue"),
            body=("contexts", "groups", "cue", "limit", "after", "since", "until"),
            extra=ANY_TARGET,
            cross_path="/recall",
        ),
        tool(
            "activate",
            (
                "Spread activation from origins, strongest first (path shows the route). "
                "The main tool for gathering related knowledge. strength orders within "
                "one call only."
            ),
            {
                "context": CONTEXT,
                "decay": {"description": "default 0.5", "type": "number"},
                "limit": int_prop("default 20"),
                "origins": STRINGS,
                "since": int_prop(
                    "assertion-time window start, epoch seconds, half-open [since, until): "
                    "out-of-window evidence neither ranks nor conducts activation"
                ),
                "until": int_prop("assertion-time window end (exclusive), epoch seconds. until alone = as-of"),
            },
            ("context", "origins"),
            "POST",
            "/contexts/{context}/activate",
            checks=("S:context", "P:origins"),
            body=("origins", "decay", "limit", "since", "until"),
        ),
        tool(
            "explore",
            (
                "Exhaustive structural walk with hop distances, for unranked neighborhood "
                "views. Truncation keeps the nearest hops (watch total)."
            ),
            {
                "after": cursor_prop(
                    (
                        "resume past the previous page's last recollection — copy every field "
                        "verbatim from it. total stays constant across pages"
                    ),
                    lead="distance",
                    lead_type="integer",
                ),
                "context": CONTEXT,
                "limit": int_prop("default 100, capped at 1000"),
                "max_depth": int_prop("hop ceiling; default and max 10 (larger values are clamped, not refused)"),
                "origins": STRINGS,
                "since": int_prop(
                    "assertion-time window start, epoch seconds, half-open [since, until): an "
                    "edge no in-window source attests neither reports nor bridges"
                ),
                "until": int_prop("assertion-time window end (exclusive), epoch seconds. until alone = as-of"),
            },
            ("context", "origins"),
            "POST",
            "/contexts/{context}/explore",
            checks=("S:context", "P:origins"),
            body=("origins", "max_depth", "limit", "after", "since", "until"),
        ),
        tool(
            "paths",
            (
                "How are two concepts related? Every simple path from an origin to a "
                "target, shortest first — the whole concept trail plus each hop's "
                "association with its citations. Within one length, the reliablest chain "
                "(largest weakest-link |sum|) ranks first. capped=true means enumeration "
                "hit the server budget, so total is a lower bound."
            ),
            {
                "context": CONTEXT,
                "limit": int_prop("max trails (default 10, capped at 100)"),
                "max_depth": int_prop(
                    "hop ceiling per trail; default and max 10 (larger values are clamped, not refused)"
                ),
                "origins": STRINGS,
                "targets": STRINGS,
            },
            ("context", "origins", "targets"),
            "POST",
            "/contexts/{context}/paths",
            checks=("S:context", "P:origins", "P:targets"),
            body=("origins", "targets", "max_depth", "limit"),
        ),
        tool(
            "search_passages",
            (
                "Paragraph search over registered passages: a lexical lane (bigram BM25) "
                "fused with a semantic lane (paragraph embeddings) where the server has "
                "them. The text lane for knowledge that never fit triples (order, "
                "conditions, discourse) — look here too when graph search comes up short. "
                "The semantic lane works best on declarative phrasing: rephrase the "
                "information need as a plausible ANSWER sentence, not a question (query "
                '"SSO is included in the Enterprise plan", not "What plan includes SSO?") '
                "— the guess only has to be shaped like the text you hope to find. "
                "Optional source filters run BEFORE the lanes: tags (any-of, on tags "
                "stored with the source) and a half-open time window [since, until) in "
                "epoch seconds over each source's date ?? stored_at — sources with "
                "neither timestamp, or no tags, never match the respective filter kind. "
                "The result is {plan, hits}: each hit names its paragraph (source + "
                "paragraph) and reports per-lane rank/score in `lanes` (a hit only the "
                "vector lane surfaced is exactly the paraphrase case the lexical lane "
                "cannot see), and `plan` says per searched context whether each lane "
                "actually ran — and why not when it did not (embeddings off, nothing "
                "embedded yet, model or vector width changed, provider refused) — plus "
                "the vector lane's effective cosine floor and, under a filter, how many "
                "sources were eligible of how many stored; check it before reading empty "
                'hits as "not in the corpus". Targets one context (context) or several at '
                "once (contexts and/or groups) — cross-context hits carry their context "
                "and interleave by per-context rank; scores compare within one context "
                "only."
            ),
            {
                "context": CONTEXT,
                "contexts": CONTEXTS,
                "groups": GROUPS,
                "limit": int_prop("default 5"),
                "query": {"type": "string"},
                "semantic_floor": {
                    "description": (
                        "one-call override of the vector lane's cosine floor (0-1); floors only "
                        "the semantic lane — BM25-only hits still return"
                    ),
                    "type": "number",
                },
                "since": int_prop("only sources whose date ?? stored_at is at or after this (epoch seconds)"),
                "tags": {
                    "description": "only sources carrying at least one of these tags may answer",
                    "items": {"type": "string"},
                    "type": "array",
                },
                "until": int_prop("only sources whose date ?? stored_at is strictly before this (epoch seconds)"),
            },
            ("query",),
            "POST",
            "/contexts/{context}/sources/search",
            checks=("T", "S:query"),
            body=("contexts", "groups", "query", "limit", "semantic_floor", "tags", "since", "until"),
            extra=ANY_TARGET,
            cross_path="/sources/search",
        ),
        tool(
            "explain_search",
            (
                "Why didn't (or did) a source appear in search_passages — one call "
                "instead of orchestrating search, citations, and lowered limits by hand. "
                "Name the query AND the source (optionally which paragraph) you expected; "
                "the answer is the first verdict that applies: not_stored (never ingested "
                "here, or retracted), filtered_out (the request's tags/since/until filter "
                "excludes the source — the search never considered it), no_term_overlap "
                "(the query's terms and the paragraph's terms side by side, as strings — "
                "the spelling-mismatch case: stored under 酒蔵, you searched 酒造 — register "
                "an alias or reword), below_cutoff (its actual rank, the score cutoff at "
                "your limit, and a verified limit that reaches it), or served (its rank — "
                "it WAS there). Evidence carries per-term tf/df/BM25 contributions and "
                "the vector lane's cosine or the reason that lane never ran. Pass the "
                "SAME tags/since/until as the search being explained, or the explanation "
                "accounts for a call nobody made. One context per call."
            ),
            {
                "context": CONTEXT,
                "limit": int_prop("the search call being explained (default 5)"),
                "paragraph": {
                    "description": "zero-based paragraph position; omitted picks the source's best showing",
                    "type": "integer",
                },
                "query": {"type": "string"},
                "semantic_floor": {
                    "description": "the floor override of the search call being explained — pass the same value",
                    "type": "number",
                },
                "since": int_prop(
                    "the time window's inclusive start (epoch seconds) of the search call being explained"
                ),
                "source": str_prop("the source you expected among the hits"),
                "tags": {
                    "description": "the tag filter of the search call being explained — pass the same values",
                    "items": {"type": "string"},
                    "type": "array",
                },
                "until": int_prop("the time window's exclusive end (epoch seconds) of the search call being explained"),
            },
            ("context", "query", "source"),
            "POST",
            "/contexts/{context}/sources/search/explain",
            checks=("S:context", "S:query", "S:source"),
            body=("query", "source", "paragraph", "limit", "semantic_floor", "tags", "since", "until"),
        ),
        tool(
            "search_communities",
            (
                "Global search over a context's community-summary artifact (built offline "
                "by `taguru communities`): ranked LLM summaries of densely connected "
                'concept clusters — for corpus-overview questions ("what are the main '
                'themes?") that passage and graph search answer poorly. Each hit names '
                "its community, the matched summary paragraph, hierarchy level (0 = "
                "finest), member concepts with strengths, and concept_count; the "
                "response's `stale` flag means the source graph moved since derivation — "
                "the summaries describe an older graph, served honestly rather than "
                "withheld. The artifact is an ordinary context (default "
                "'{context}::communities'; `derived` overrides, for artifacts built with "
                "--into); a missing artifact is a refusal naming the build command, never "
                "an empty result. One context per call."
            ),
            {
                "context": CONTEXT,
                "derived": str_prop("the artifact context to search; omitted means '{context}::communities'"),
                "limit": int_prop("default 5"),
                "query": {"type": "string"},
                "semantic_floor": {
                    "description": "one-call override of the artifact's vector-lane cosine floor (0-1)",
                    "type": "number",
                },
            },
            ("context", "query"),
            "POST",
            "/contexts/{context}/communities/search",
            checks=("S:context", "S:query"),
            body=("query", "limit", "semantic_floor", "derived"),
        ),
    )
