"""GET /openapi.json: the OpenAPI 3.1 document, built from the route table and the shapes in
`schemas.py` (the same specs the decoder reads)."""

from __future__ import annotations

from typing import Any

from taguru_server.server.wire.schemas import COMPONENTS, ROUTE_SHAPES, STR, ref, result_schema

NOTES = (
    "Request bodies are published as the server decodes them. Two things JSON Schema cannot say: a `maxLength` "
    "on a request string is a byte cap (the server counts UTF-8 bytes), and an integer field takes an integer "
    "literal (`2.0` is refused like `2.5`). Rules between two values of one body are in the schema's description."
)
# typed bodies that may be left out (an empty body means every default)
OPTIONAL_BODIES: frozenset[tuple[str, str]] = frozenset(
    {
        ("PUT", "/contexts/{name}"),
        ("PUT", "/groups/{name}"),
        ("POST", "/contexts/{name}/vocabulary/audit"),
        ("POST", "/contexts/{name}/drift/audit"),
    }
)
# query parameters by route
QUERY_PARAMETERS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("POST", "/contexts/{name}/promote"): [
        {
            "name": "dry_run",
            "in": "query",
            "required": False,
            "schema": {"type": "boolean", "default": False},
            "description": "report what would be promoted and write nothing (`true` or `false`)",
        }
    ],
}


def openapi_document(routes: list[tuple[str, str, Any, str]], version: str) -> dict[str, Any]:
    """OpenAPI 3.1 for every routed path and the probes."""
    paths: dict[str, dict[str, Any]] = {}
    entries = [(m, t, role) for m, t, _h, role in routes] + [
        ("GET", "/version", None),
        ("GET", "/health", None),
        ("GET", "/ready", None),
        ("GET", "/live", None),
        ("GET", "/metrics", None),
        ("GET", "/openapi.json", None),
    ]
    for method, template, role in entries:
        request, response = ROUTE_SHAPES[(method, template)]
        op: dict[str, Any] = {"operationId": _operation_id(method, template), "responses": {}}
        if role:
            op["description"] = f"Needs the '{role}' role when API tokens are configured."
            op["security"] = [{"bearer": []}]
        if "{name}" in template:
            op["parameters"] = [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": STR,
                    "description": "group name, one percent-encoded path segment"
                    if template.startswith("/groups/")
                    else "context name, one percent-encoded path segment",
                }
            ]
        if request == "jsonl":
            op["requestBody"] = {"required": True, "content": {"application/x-ndjson": {"schema": ref("ImportStream")}}}
        elif request is not None:
            op["requestBody"] = {
                "required": (method, template) not in OPTIONAL_BODIES,
                "content": {"application/json": {"schema": ref(request)}},
            }
        if (method, template) in QUERY_PARAMETERS:
            op["parameters"] = [*op.get("parameters", []), *QUERY_PARAMETERS[(method, template)]]
        if response in ("text", "metrics", "ndjson", "markdown"):
            media = {
                "text": "text/plain",
                "metrics": "text/plain",
                "ndjson": "application/x-ndjson",
                "markdown": "text/markdown",
            }[response]
            op["responses"]["200"] = {"description": "OK", "content": {media: {"schema": STR}}}
        elif response == "openapi":
            op["responses"]["200"] = {
                "description": "this document",
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        elif response == "jsonrpc":
            op["responses"]["200"] = {
                "description": "a JSON-RPC reply",
                "content": {"application/json": {"schema": ref("JsonRpcReply")}},
            }
            op["responses"]["202"] = {"description": "a notification was accepted (no body)"}
            op["responses"]["400"] = {
                "description": "a framing error",
                "content": {"application/json": {"schema": ref("JsonRpcReply")}},
            }
        else:
            op["responses"]["200"] = {
                "description": "OK",
                "content": {"application/json": {"schema": result_schema(response)}},
            }
        if response not in ("openapi",) and template not in ("/version", "/live", "/metrics"):
            op["responses"]["default"] = {
                "description": "the error envelope",
                "content": {"application/json": {"schema": ref("Error")}},
            }
        paths.setdefault(template, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Taguru knowledge contexts and evidence assembly", "version": version, "description": NOTES},
        "paths": paths,
        "components": {"schemas": COMPONENTS, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _operation_id(method: str, template: str) -> str:
    words = [w.strip("{}") for w in template.strip("/").replace(".", "_").split("/") if w]
    return method.lower() + "_" + "_".join(words or ["root"])
