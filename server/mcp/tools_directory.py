"""The MCP tools of the directory: contexts and groups (create, read, update, delete, rename, export), and the
operator verbs flush and compact.

Each tool is one routed call under the caller's key; the definitions are the reference's, verbatim. The tool
class is passed in by `tools.py`, which owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from taguru_server.server.mcp.props import CONTEXT, int_prop, str_prop

T = TypeVar("T")


def tools(tool: Callable[..., T]) -> tuple[T, ...]:
    """list_contexts, get_context, create_context, update_context, delete_context, rename_context, list_groups,
    get_group, create_group, update_group, delete_group, rename_group, export_group, flush, compact, as
    `tool(...)` builds them."""
    return (
        tool(
            "list_contexts",
            (
                "Routing directory: every context's name, description, stats (counts, top "
                "concepts, label sample), and usage counters (reads/empty_reads/writes, "
                "last-used times). Pick the search/ingest target here yourself."
            ),
            {
                "after": str_prop("only contexts whose name sorts strictly after this one"),
                "limit": int_prop("page size, keyset-paged by name (default/ceiling 1000)"),
                "pinned": {"description": "only contexts with this pinned state", "type": "boolean"},
            },
            (),
            "GET",
            "/contexts",
            checks=("Q",),
            query=("limit", "after", "pinned"),
        ),
        tool(
            "get_context",
            "One directory row by name — the cheap existence-and-stats check, without listing everything else.",
            {"context": CONTEXT},
            ("context",),
            "GET",
            "/contexts/{context}",
            checks=("S:context",),
        ),
        tool(
            "create_context",
            (
                "Create a context. One context = one 文脈: one spelling, one referent — "
                "different things sharing a spelling get separate contexts. The "
                "description drives routing; say concretely what the context covers."
            ),
            {
                "description": {"type": "string"},
                "dice_floor": {"description": "fuzzy-entry floor (default 0.3)", "type": "number"},
                "name": {"type": "string"},
                "pinned": {"description": "keep resident (always-hot contexts like glossaries)", "type": "boolean"},
                "semantic_floor": {"description": "semantic-entry floor (default 0.35)", "type": "number"},
            },
            ("name",),
            "PUT",
            "/contexts/{name}",
            checks=("S:name",),
            body=("description", "pinned", "dice_floor", "semantic_floor"),
        ),
        tool(
            "update_context",
            "Update description / pinned / dice_floor / semantic_floor.",
            {
                "description": {"type": "string"},
                "dice_floor": {"description": "omit to leave unchanged", "type": "number"},
                "name": {"type": "string"},
                "pinned": {"description": "omit to leave unchanged", "type": "boolean"},
                "semantic_floor": {"description": "omit to leave unchanged", "type": "number"},
            },
            ("name",),
            "PATCH",
            "/contexts/{name}",
            checks=("S:name",),
            body=("description", "pinned", "dice_floor", "semantic_floor"),
        ),
        tool(
            "delete_context",
            "Delete a context and its files (irreversible).",
            {"name": {"type": "string"}},
            ("name",),
            "DELETE",
            "/contexts/{name}",
            checks=("S:name",),
        ),
        tool(
            "rename_context",
            (
                "Rename a context (admin role): the whole file family moves to the new "
                "name and every group naming it is rewritten to match. Fails if the "
                "destination name is already taken."
            ),
            {"name": {"type": "string"}, "to": str_prop("the new name")},
            ("name", "to"),
            "POST",
            "/contexts/{name}/rename",
            checks=("S:name", "S:to"),
            body=("to",),
        ),
        tool(
            "list_groups",
            (
                "Group directory: every group's name, description, member context names, "
                "and child group names. A group bundles contexts (many-to-many) and may "
                "nest child groups up to 3 levels (cycles refused) — organize related "
                "contexts under one name. Groups and contexts are separate namespaces."
            ),
            {
                "after": str_prop("only groups whose name sorts strictly after this one"),
                "limit": int_prop("page size, keyset-paged by name (default/ceiling 1000)"),
            },
            (),
            "GET",
            "/groups",
            checks=("Q",),
            query=("limit", "after"),
        ),
        tool(
            "get_group",
            "One group's name, description, member contexts, and child groups.",
            {"name": str_prop("Group name (from list_groups)")},
            ("name",),
            "GET",
            "/groups/{name}",
            checks=("S:name",),
        ),
        tool(
            "create_group",
            (
                "Create a group bundling contexts and, optionally, child groups (nesting: "
                "at most 3 groups tall, never cyclic; each set holds at most 1000 names — "
                "past that, split into nested child groups). Every listed context and "
                "child group must already exist; membership never dangles — deleting a "
                "context or a group drops it from every group."
            ),
            {
                "contexts": {
                    "description": "initial member context names (from list_contexts)",
                    "items": {"type": "string"},
                    "type": "array",
                },
                "description": {"type": "string"},
                "groups": {
                    "description": "initial child group names (from list_groups)",
                    "items": {"type": "string"},
                    "type": "array",
                },
                "name": {"type": "string"},
            },
            ("name",),
            "PUT",
            "/groups/{name}",
            checks=("S:name",),
            body=("description", "contexts", "groups"),
        ),
        tool(
            "update_group",
            (
                "Update a group's description and/or membership. "
                "add_contexts/remove_contexts and add_groups/remove_groups are deltas "
                "against the current members, not a replacement list; a name in both ends "
                "up a member. Added contexts and child groups must exist; removing a "
                "non-member is a no-op; nesting stays at most 3 groups tall and acyclic, "
                "and the resulting membership at most 1000 member contexts and 1000 child "
                "groups (removals apply first, so one request can trade members within "
                "the cap)."
            ),
            {
                "add_contexts": {"items": {"type": "string"}, "type": "array"},
                "add_groups": {"items": {"type": "string"}, "type": "array"},
                "description": str_prop("omit to leave unchanged"),
                "name": {"type": "string"},
                "remove_contexts": {"items": {"type": "string"}, "type": "array"},
                "remove_groups": {"items": {"type": "string"}, "type": "array"},
            },
            ("name",),
            "PATCH",
            "/groups/{name}",
            checks=("S:name",),
            body=("description", "add_contexts", "remove_contexts", "add_groups", "remove_groups"),
        ),
        tool(
            "delete_group",
            (
                "Delete a group (irreversible). Only the bundling goes; the member "
                "contexts, the child groups, and their data are untouched — parents "
                "naming the group just drop the child."
            ),
            {"name": {"type": "string"}},
            ("name",),
            "DELETE",
            "/groups/{name}",
            checks=("S:name",),
        ),
        tool(
            "rename_group",
            (
                "Rename a group (admin role): the group's file moves to the new name and "
                "every OTHER group naming it as a child is rewritten to match. Fails if "
                "the destination name is already taken."
            ),
            {"name": {"type": "string"}, "to": str_prop("the new name")},
            ("name", "to"),
            "POST",
            "/groups/{name}/rename",
            checks=("S:name", "S:to"),
            body=("to",),
        ),
        tool(
            "export_group",
            (
                "One group as its import-stream record (a single `taguru_group` JSON line "
                "— the group's complete truth); importing it restores the group as a "
                "whole-record replace. A context-scoped key exports exactly the slice its "
                "grant can read."
            ),
            {"name": str_prop("Group name (from list_groups)")},
            ("name",),
            "GET",
            "/groups/{name}/export",
            checks=("S:name",),
        ),
        tool(
            "flush",
            (
                "Persist every dirty context to disk now; answers the flushed names "
                "(admin role). The backup handshake's first half: flush, then snapshot "
                "the data directory — the same discipline the operator docs describe, "
                "reachable by an agent tending its own memory."
            ),
            {},
            (),
            "POST",
            "/flush",
        ),
        tool(
            "compact",
            (
                "Rebuild one context's on-disk image without the dead weight the "
                "append-only format accumulates (retracted edges, unlinked attributions, "
                "arena slack); answers what was shed and the resulting footprint (admin "
                "role). Content is preserved — this is maintenance, not a knowledge "
                "change."
            ),
            {"context": CONTEXT},
            ("context",),
            "POST",
            "/contexts/{context}/compact",
            checks=("S:context",),
        ),
    )
