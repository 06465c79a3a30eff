"""MCP protocol versions, the server's identity, and the manual (`initialize.instructions`, GET /protocol)."""

from __future__ import annotations

import json

from taguru_server.server.compat import routes_section
from taguru_server.server.version import VERSION, version_body

SUPPORTED_PROTOCOLS = ("2024-11-05", "2025-03-26", "2025-06-18")
LATEST_PROTOCOL = "2025-06-18"
PROTOCOL_META_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_META = {"io.modelcontextprotocol/serverInfo": {"name": "taguru", "version": VERSION}}

INSTRUCTIONS = """Taguru keeps knowledge contexts: an association graph (subject —label→ object, with
signed weights and per-source attributions), aliases, and passages split into paragraphs.
Start with list_contexts. To answer a question from a context, call assemble_evidence with the
names you are asking about as `origins` (and relation `labels` when you know them); it returns a
ranked, deduplicated, citation-complete evidence package under a budget. Quote `citations`
verbatim when you cite. The finer tools (resolve, describe, query, recall, activate,
search_passages, cite_passage, search_communities) expose each lane on its own."""


def protocol_text() -> str:
    """`GET /protocol` (text/markdown) and `initialize.instructions`: the manual, then this server's trailer."""
    return (
        INSTRUCTIONS.rstrip("\n")
        + "\n"
        + "\n---\n\n## This server\n\n"
        + f"taguru-server {VERSION} (Python), speaking the Taguru HTTP and MCP wire contracts.\n\n"
        + routes_section()
        # the section sign is written as an escape: the text is wire bytes, kept as served
        + "Contract versions (also `GET /version`, ADR 0005 \u00a76) — discovery only, not negotiation:\n\n"
        + "```json\n"
        + json.dumps(version_body(), indent=2)
        + "\n```\n"
    )
