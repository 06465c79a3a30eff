"""The MCP tool table: each tool's published definition and how its arguments become one routed call.

The definitions live with their family (tools_directory, tools_writes, tools_reads, tools_search,
tools_evidence, audit_tools) and are served in the reference's order with keys sorted at every depth,
as the reference emits them. Routing is pure: a tool checks its arguments in the order its `checks`
list them (the first failure is the answer, a tool error text) and builds one request; what runs the
request is the transport's business. `retrieve` routes nothing: it composes other tools' calls
(server/mcp/retrieve.py).

Check kinds: `S:k` a required string, `P:k` a required value of any type, `Q` the query-string values
(a string, number or boolean each), `T` the search target (`context`, or `contexts`/`groups`),
`cite` the paragraph-or-index rule, `size` the import stream's byte ceiling.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import attrs

from taguru_server.server.mcp import (
    audit_tools,
    tools_directory,
    tools_evidence,
    tools_reads,
    tools_search,
    tools_writes,
)
from taguru_server.store.wire import dumps_bytes

IMPORT_TOOL_LIMIT = 32 * 1024 * 1024
JSON = "application/json"
NDJSON = "application/x-ndjson; charset=utf-8"
BOTH_TARGETS = "pass either 'context' or 'contexts'/'groups', not both"
NO_TARGET = "missing required argument 'context' (or 'contexts'/'groups', to search several at once)"
NO_PARAGRAPH = "missing required argument 'paragraph' (or its deprecated alias 'index')"


class ToolFailure(Exception):
    """A tool call that failed: its error text, and the routed error body when that parsed as an object."""

    def __init__(self, text: str, structured: dict[str, Any] | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.structured = structured


@attrs.frozen
class Request:
    """One routed call: method, path (segments percent-encoded), query values (decoded), body and its type."""

    method: str
    path: str
    query: dict[str, str]
    body: bytes | None
    content_type: str | None


@attrs.frozen
class Tool:
    """A tool: its definition and how its arguments become one routed HTTP call (run under the caller's key).

    `path` holds `{context}` or `{name}` (those arguments, one segment each); `body` lists the keys picked into a
    JSON body (None: no body); `whole_body` names the argument that is the body itself (a JSON value,
    or for `import` the raw stream); `cross_path` is a search tool's route for `contexts`/`groups`.
    """

    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    method: str
    path: str
    checks: tuple[str, ...] = ()
    body: tuple[str, ...] | None = None
    query: tuple[str, ...] = ()
    extra: dict[str, Any] = attrs.field(factory=dict)
    cross_path: str | None = None
    whole_body: str | None = None

    @property
    def composed(self) -> bool:
        """A tool that runs several calls itself (`retrieve`) rather than routing one."""
        return not self.method

    def definition(self) -> dict[str, Any]:
        """The published definition, keys sorted at every depth."""
        schema: dict[str, Any] = {
            "type": "object",
            "properties": self.properties,
            "required": list(self.required),
            **self.extra,
        }
        return sorted_keys({"name": self.name, "description": self.description, "inputSchema": schema})

    def problem(self, args: dict[str, Any]) -> str | None:
        """Why these arguments cannot make a call (a tool error text), or None."""
        for check in self.checks:
            found = self._check(check, args)
            if found is not None:
                return found
        return None

    def _check(self, check: str, args: dict[str, Any]) -> str | None:
        kind, _, key = check.partition(":")
        if kind == "S":
            return string_problem(args, key)
        if kind == "P":
            return None if args.get(key) is not None else f"missing required argument '{key}'"
        if kind == "Q":
            return self._query_problem(args)
        if kind == "T":
            return target_problem(args)
        if kind == "cite":
            return NO_PARAGRAPH if args.get("paragraph") is None and args.get("index") is None else None
        if kind == "size":
            return self._size_problem(args)
        raise ValueError(f"tool '{self.name}' names an unknown check {check!r}")

    def _size_problem(self, args: dict[str, Any]) -> str | None:
        size = len(str(args.get(self.whole_body or "")).encode("utf-8", "surrogatepass"))
        if size > IMPORT_TOOL_LIMIT:
            return (
                f"stream argument is {size} bytes, over the {IMPORT_TOOL_LIMIT}-byte tool limit; split the import or "
                "POST the stream to /import directly"
            )
        return None

    def _query_problem(self, args: dict[str, Any]) -> str | None:
        for key in self.query:
            if isinstance(args.get(key), (list, dict)):
                return f"argument '{key}' must be a string, number, or boolean"
        return None

    def request(self, args: dict[str, Any]) -> Request:
        """The routed call for checked arguments."""
        crossed = self.cross_path is not None and crossing(args)
        path = self.cross_path if crossed and self.cross_path is not None else self.path
        path = path.replace("{context}", segment(args.get("context"))).replace("{name}", segment(args.get("name")))
        query = {k: query_value(args[k]) for k in self.query if args.get(k) is not None}
        if self.whole_body == "stream":
            return Request(self.method, path, query, str(args["stream"]).encode("utf-8", "surrogatepass"), NDJSON)
        if self.whole_body is not None:
            return Request(self.method, path, query, dumps_bytes(args[self.whole_body]), JSON)
        if self.body is None:
            return Request(self.method, path, query, None, None)
        picked = {k: args[k] for k in self.body if args.get(k) is not None}
        if self.name == "cite_passage" and "paragraph" not in picked and args.get("index") is not None:
            picked["paragraph"] = args["index"]
        return Request(self.method, path, query, dumps_bytes(picked), JSON)


def sorted_keys(value: Any) -> Any:
    """A copy with every object's keys in code-point order, at every depth."""
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value


def segment(value: Any) -> str:
    """One path segment: bytes outside A-Z a-z 0-9 - . _ ~ percent-encoded (uppercase hex)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="-._~") if isinstance(value, str) else ""


def query_value(value: Any) -> str:
    """A query-string value: a string as is, a boolean `true`/`false`, a number its JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def string_problem(args: dict[str, Any], key: str) -> str | None:
    """The required-string check: absent or null, then not a string."""
    if args.get(key) is None:
        return f"missing required argument '{key}'"
    if not isinstance(args[key], str):
        return f"argument '{key}' must be a string"
    return None


def crossing(args: dict[str, Any]) -> bool:
    """A search aimed at `contexts`/`groups` rather than one `context`."""
    return args.get("contexts") is not None or args.get("groups") is not None


def target_problem(args: dict[str, Any]) -> str | None:
    """The search-target check: one form, not both, not neither; a `context` must be a string."""
    crossed = crossing(args)
    if crossed and args.get("context") is not None:
        return BOTH_TARGETS
    if crossed:
        return None
    if args.get("context") is None:
        return NO_TARGET
    return string_problem(args, "context")


ORDER = (
    "list_contexts",
    "create_context",
    "update_context",
    "delete_context",
    "rename_context",
    "list_groups",
    "create_group",
    "update_group",
    "delete_group",
    "rename_group",
    "add_associations",
    "store_passages",
    "lookup_passages",
    "list_sources",
    "resolve",
    "resolve_label",
    "explain_resolve",
    "explain_resolve_label",
    "describe",
    "query",
    "recall",
    "activate",
    "paths",
    "explore",
    "changes",
    "list_labels",
    "get_aliases",
    "add_aliases",
    "remove_aliases",
    "get_schema",
    "put_schema",
    "promote",
    "retract_source",
    "retract_association",
    "search_passages",
    "search_communities",
    "assemble_evidence",
    "explain_search",
    "cite_passage",
    "retrieve",
    "refresh_embeddings",
    "audit_vocabulary",
    "audit_consolidation",
    "audit_coverage",
    "audit_drift",
    "audit_schema",
    "validate_schema",
    "flush",
    "export_context",
    "export_group",
    "get_context",
    "get_group",
    "compact",
    "import",
    "get_protocol",
)
_FAMILIES = (tools_directory, tools_writes, tools_reads, tools_search, tools_evidence, audit_tools)
TOOL_BY_NAME: dict[str, Tool] = {t.name: t for family in _FAMILIES for t in family.tools(Tool)}
TOOLS: tuple[Tool, ...] = tuple(TOOL_BY_NAME[name] for name in ORDER)
DEFINITIONS: list[dict[str, Any]] = [t.definition() for t in TOOLS]
