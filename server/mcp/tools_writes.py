"""The MCP tools that write a context: associations, passages, aliases, retractions, promote, embeddings, the
schema document and import.

Each tool is one routed call under the caller's key; the definitions are the reference's, verbatim. The tool
class is passed in by `tools.py`, which owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from taguru_server.server.mcp.props import CONTEXT, str_prop

T = TypeVar("T")


def tools(tool: Callable[..., T]) -> tuple[T, ...]:
    """add_associations, store_passages, add_aliases, remove_aliases, retract_source, retract_association, promote,
    refresh_embeddings, put_schema, import, as `tool(...)` builds them."""
    return (
        tool(
            "add_associations",
            (
                "Write facts as a batch (one document = one call, up to 10,000 "
                "associations; split larger documents), a source id on every element; "
                "single-fact calls cost a full durable write each, so collect a "
                "document's facts first. Discipline: check spellings with "
                "resolve/resolve_label and reuse before minting; don't re-assert "
                "paraphrases within one document; negation = positive label + negative "
                "weight; make implicit membership an explicit edge; weave ordered "
                "procedures with the three edges 最初の工程/次の工程/工程 (details in get_protocol). "
                "All-or-nothing: a rejected batch writes nothing (`integrity: "
                '"nothing_written"` in the error), and a rejection lists every offending '
                "`associations[i].field` as a path-addressed issue. Correct exactly those "
                "fields in your own copy of the batch and resend the COMPLETE batch — "
                "never delete an item to work around a rejection, never invent a fact "
                "that was not already there, and never call add_associations again for "
                "just the fixed items (that would silently omit everything else). If "
                "store_passages for the same source also runs, note it is a SEPARATE "
                "write — a document's facts can land while its passage store still fails, "
                "or vice versa; POST /import is the only all-or-nothing per-source call "
                "across both. If this context has an installed schema (get_schema) in "
                "strict mode, a batch violating a relation's domain/range also refuses "
                "this way — issues[].kind is 'domain' or 'range', naming which side; in "
                "warn mode the same batch writes and the violations ride along in the "
                "success result's issues instead."
            ),
            {
                "associations": {
                    "items": {
                        "properties": {
                            "label": {"type": "string"},
                            "object": {"type": "string"},
                            "paragraph": {"description": "zero-based paragraph position", "type": "integer"},
                            "source": {"type": "string"},
                            "subject": {"type": "string"},
                            "weight": {"type": "number"},
                        },
                        "required": ["subject", "label", "object", "weight"],
                        "type": "object",
                    },
                    "type": "array",
                },
                "context": CONTEXT,
            },
            ("context", "associations"),
            "POST",
            "/contexts/{context}/associations",
            checks=("S:context", "P:associations"),
            whole_body="associations",
        ),
        tool(
            "store_passages",
            (
                "Register the original text behind each source id. Always finish an "
                "ingest with this; answers ground in originals looked up from "
                "attributions. Optionally attach doc2query questions per source ({source: "
                "[{paragraph, question}]}, paragraph = 0-based blank-line-separated "
                "position in THAT text): questions a user might type whose answer is that "
                "paragraph, phrased away from its wording — they embed beside the "
                "paragraph and catch question-shaped queries the text's own vector "
                "misses. Optionally attach section markers per source ({source: "
                "[{paragraph, section}]}, same paragraph numbering): a marker names where "
                "its section starts and the section implicitly governs every paragraph "
                "after it until the next marker or the passage's end — citation and every "
                "association read label their paragraph with the section that governs it. "
                "Optionally attach typed citation locators per source ({source: "
                "[{paragraph, locator: {kind, value}}]}, same paragraph numbering): a "
                "page/slide/sheet/table position — independent of section, and unlike it, "
                "naming only that exact paragraph, never extending to the next one. "
                "Optionally attach source metadata: tags ({source: [tag]}) and a document "
                "date ({source: epoch seconds} in dates) — search_passages can then "
                "pre-filter by tag and time; the server stamps stored_at itself. Storage "
                "replaces per source wholesale, metadata included. All-or-nothing: a "
                'rejected call writes nothing (`integrity: "nothing_written"`), and a '
                "rejection lists every offending path — `passages['src']`, "
                "`questions['src'][i].question`, `sections['src'][i].section`, "
                "`locators['src'][i].locator`, `tags['src'][i]`, `dates['src']` — as a "
                "path-addressed issue naming the source AND the item index. Correct "
                "exactly those fields and resend the COMPLETE call (every source, every "
                "question/section/locator/tag) rather than deleting an item or resending "
                "only the fixed ones — a partial resend silently drops whatever this call "
                "would have replaced wholesale."
            ),
            {
                "context": CONTEXT,
                "dates": {
                    "additionalProperties": {"type": "integer"},
                    "description": (
                        "source → the document's own date (epoch seconds) — time filters prefer "
                        "it over the server's stored_at stamp"
                    ),
                    "type": "object",
                },
                "locators": {
                    "additionalProperties": {
                        "items": {
                            "properties": {
                                "locator": {
                                    "properties": {
                                        "kind": str_prop('e.g. "page", "slide", "sheet", "table"'),
                                        "value": str_prop('e.g. "12", "A1:C4"'),
                                    },
                                    "required": ["kind", "value"],
                                    "type": "object",
                                },
                                "paragraph": {"type": "integer"},
                            },
                            "required": ["paragraph", "locator"],
                            "type": "object",
                        },
                        "type": "array",
                    },
                    "type": "object",
                },
                "passages": {
                    "additionalProperties": {"type": "string"},
                    "description": "source → text",
                    "type": "object",
                },
                "questions": {
                    "additionalProperties": {
                        "items": {
                            "properties": {"paragraph": {"type": "integer"}, "question": {"type": "string"}},
                            "required": ["paragraph", "question"],
                            "type": "object",
                        },
                        "type": "array",
                    },
                    "type": "object",
                },
                "sections": {
                    "additionalProperties": {
                        "items": {
                            "properties": {"paragraph": {"type": "integer"}, "section": {"type": "string"}},
                            "required": ["paragraph", "section"],
                            "type": "object",
                        },
                        "type": "array",
                    },
                    "type": "object",
                },
                "tags": {
                    "additionalProperties": {"items": {"type": "string"}, "type": "array"},
                    "description": "source → tags (≤32 per source, ≤128 bytes each)",
                    "type": "object",
                },
            },
            ("context", "passages"),
            "POST",
            "/contexts/{context}/sources",
            checks=("S:context", "P:passages"),
            body=("passages", "questions", "sections", "locators", "tags", "dates"),
        ),
        tool(
            "add_aliases",
            (
                "Point alternate spellings at canonical names (entry-only; results always "
                "return canonicals). The fix when live wording misses. Cannot join two "
                "existing concepts — that would be a merge, which is rebuild territory."
            ),
            {
                "concepts": {
                    "additionalProperties": {"type": "string"},
                    "description": "alias → canonical",
                    "type": "object",
                },
                "context": CONTEXT,
                "labels": {
                    "additionalProperties": {"type": "string"},
                    "description": "alias → canonical",
                    "type": "object",
                },
            },
            ("context",),
            "POST",
            "/contexts/{context}/aliases",
            checks=("S:context",),
            body=("concepts", "labels"),
        ),
        tool(
            "remove_aliases",
            (
                "Withdraw mis-registered alias spellings (exact spellings, per "
                "namespace). The spelling stops resolving and is free to re-register; "
                "canonicals and their knowledge are untouched. Canonical names are "
                "refused — removal cannot unname a record."
            ),
            {
                "concepts": {
                    "description": "alias spellings to withdraw",
                    "items": {"type": "string"},
                    "type": "array",
                },
                "context": CONTEXT,
                "labels": {"description": "alias spellings to withdraw", "items": {"type": "string"}, "type": "array"},
            },
            ("context",),
            "DELETE",
            "/contexts/{context}/aliases",
            checks=("S:context",),
            body=("concepts", "labels"),
        ),
        tool(
            "retract_source",
            (
                "Withdraw one source's (document's) contributions from graph and passage "
                "store. Diff sync for updated documents: retract the old version, then "
                "re-ingest the new. Concepts and edges remain; only weights come down. "
                "dry_run=true previews the same {associations_touched, passage_removed} "
                "with nothing written. Full erasure (the withdrawn bytes physically off "
                "disk) is retract, then compact."
            ),
            {
                "context": CONTEXT,
                "dry_run": {
                    "description": "preview only — report what would be withdrawn, write nothing",
                    "type": "boolean",
                },
                "source": {"type": "string"},
            },
            ("context", "source"),
            "POST",
            "/contexts/{context}/sources/retract",
            checks=("S:context", "Q", "S:source"),
            body=("source",),
            query=("dry_run",),
        ),
        tool(
            "retract_association",
            (
                "Withdraw one (subject, label, object) association outright — every "
                "source's contribution to that one edge, where retract_source would "
                "discard a whole document's. The surgical correction for a fact that "
                "should never have been asserted (an extraction error, a merge mistake). "
                "A fact that is merely CONTESTED wants a negative-weight assertion "
                "instead, which preserves the dispute as evidence. Names resolve through "
                "aliases; `retracted: false` means the triple named no live edge and "
                "nothing changed. The edge row stays visible at weight 0 until "
                "compaction; re-asserting the triple later just works."
            ),
            {
                "context": CONTEXT,
                "label": {"type": "string"},
                "object": {"type": "string"},
                "subject": {"type": "string"},
            },
            ("context", "subject", "label", "object"),
            "POST",
            "/contexts/{context}/associations/retract",
            checks=("S:context", "S:subject", "S:label", "S:object"),
            body=("subject", "label", "object"),
        ),
        tool(
            "promote",
            (
                "Graph-path memory promotion (docs/promotion.html, ADR 0018): move the "
                "named source ids from this (scratch) context into an established "
                "destination context, WITHOUT re-extraction — the transfer is the "
                "export/import round trip in one call. Each source moves whole (passage, "
                "date, tags, its share of every association's weight; aliases ride "
                "exactly when their canonical is live in the promoted slice, and "
                "aliases_dropped counts the rest), source ids survive so promoted "
                "citations still name the originating session, and applying is per-source "
                "retract-then-apply — re-promoting the same sources is idempotent. The "
                "destination must already exist (never created here) and its own schema "
                "judges the incoming batches. Every named source must exist in the "
                "scratch or the request refuses whole, path-addressed, nothing written. "
                "After a real apply the destination's consolidation audit (all three "
                "checks, default ceilings) rides back under `audit` — CANDIDATES to "
                "judge, never applied; `audit: false` skips it, and `audit_skipped` names "
                "why when it could not run (the batches are already durable by then). "
                "dry_run=true previews the same batches shape with nothing written and no "
                "audit. What stays yours: choosing WHICH sources to promote (review "
                "first), judging the audit's candidates, and retiring the promoted "
                "scratch afterwards (retract_source) — forgetting is always explicit."
            ),
            {
                "audit": {
                    "description": (
                        "run the destination's consolidation audit after the apply (default true; dry_run never audits)"
                    ),
                    "type": "boolean",
                },
                "context": CONTEXT,
                "dry_run": {
                    "description": "preview only — report the same batches shape, write nothing, no audit",
                    "type": "boolean",
                },
                "into": str_prop("the destination context (from list_contexts) — must already exist"),
                "sources": {
                    "description": "the scratch source ids to promote — every one must exist here",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "type": "array",
                },
            },
            ("context", "into", "sources"),
            "POST",
            "/contexts/{context}/promote",
            checks=("S:context", "Q", "S:into", "P:sources"),
            body=("into", "sources", "audit"),
            query=("dry_run",),
        ),
        tool(
            "refresh_embeddings",
            (
                "After ingesting, re-embed what changed (servers with embeddings only): "
                "the glosses (name + graph context) of new or changed concepts and "
                "labels, and — where the server opted in — the stored paragraphs. Makes "
                "paraphrases and question-shaped cues land through resolve's semantic "
                "fallback and search_passages' vector lane."
            ),
            {"context": CONTEXT},
            ("context",),
            "POST",
            "/contexts/{context}/embeddings/refresh",
            checks=("S:context",),
            body=(),
        ),
        tool(
            "put_schema",
            (
                "Install a schema document wholesale (no delta form; a retry after any "
                "failure is always safe). off leaves every write unenforced; warn lets a "
                "domain/range-violating write through and reports the violations back "
                "(issues[], on add_associations and import alike); strict refuses the "
                "whole write before anything lands, the same nothing_written shape a "
                "shape-invalid batch already gets. types/relations are keyed by name; a "
                "type's is_a names direct parents (cycles and >8-deep chains refuse); a "
                "relation's domain/range each cap at 64 type names. The relation label "
                "'schema:type' is reserved for type assertions and refuses here if named "
                "directly."
            ),
            {
                "closed_labels": {
                    "description": (
                        "when true, an association whose label has no relation entry here refuses "
                        "too, not just a domain/range mismatch"
                    ),
                    "type": "boolean",
                },
                "context": CONTEXT,
                "mode": {"enum": ["off", "warn", "strict"], "type": "string"},
                "relations": {
                    "additionalProperties": {
                        "properties": {
                            "domain": {
                                "description": "types (or a subtype) the subject must have; empty means unconstrained",
                                "items": {"type": "string"},
                                "type": "array",
                            },
                            "range": {
                                "description": "types (or a subtype) the object must have; empty means unconstrained",
                                "items": {"type": "string"},
                                "type": "array",
                            },
                        },
                        "type": "object",
                    },
                    "description": "relation label -> its domain/range declaration",
                    "type": "object",
                },
                "schema": {"description": "document format version this binary reads (currently 1)", "type": "integer"},
                "types": {
                    "additionalProperties": {
                        "properties": {
                            "is_a": {
                                "description": "direct parent type names",
                                "items": {"type": "string"},
                                "type": "array",
                            }
                        },
                        "type": "object",
                    },
                    "description": "entity type name -> its declaration",
                    "type": "object",
                },
            },
            ("context", "schema", "mode", "closed_labels", "types", "relations"),
            "PUT",
            "/contexts/{context}/schema",
            checks=("S:context", "P:schema", "P:mode", "P:closed_labels", "P:types", "P:relations"),
            body=("schema", "mode", "closed_labels", "types", "relations"),
        ),
        tool(
            "import",
            (
                "Apply (or, with dry_run: true, preview) an NDJSON import stream — the "
                "same format `taguru import`/POST /import accept: a create block, "
                "associations, aliases, and passage per source, retract-then-apply and "
                "idempotent (admin role). A dry run writes nothing; its "
                "`associations`/`aliases` counts are optimistic previews, every other "
                "field exact. `taguru_group` records in the stream are not applied "
                "through this tool (their outcome is likewise not previewed) — use POST "
                "/import directly for a stream that carries any. Bounded by the server's "
                "request body cap (TAGURU_MAX_BODY_BYTES, 8 MiB by default) — and smaller "
                "over the /mcp HTTP transport, where the stream is escaped into the "
                "JSON-RPC envelope that must itself fit that cap — with a hard 32 MiB "
                "tool ceiling above it; a larger stream needs POST /import or `taguru "
                "import` directly. This is the ONE all-or-nothing call across "
                "facts+aliases+passage for a source; a rejection identifies the failing "
                "batch/source/line/path and reports write integrity explicitly: "
                "`nothing_written` when no batch landed yet, or a `durable_prefix` naming "
                "exactly how many earlier batches in this stream already did (never "
                "implying any part of the REJECTED batch itself was accepted — each batch "
                "is whole-or-none). Correct exactly the named path and resend the "
                "COMPLETE remaining stream (every batch from the failure point on, unless "
                "already fixed and durable) — never delete the offending line, never "
                "resend only a subset."
            ),
            {
                "dry_run": {"description": "preview without writing anything (default false)", "type": "boolean"},
                "stream": str_prop(
                    "NDJSON import stream (one taguru_batch/taguru_group/fact/alias/passage line per row)"
                ),
            },
            ("stream",),
            "POST",
            "/import",
            checks=("S:stream", "size", "Q"),
            query=("dry_run",),
            whole_body="stream",
        ),
    )
