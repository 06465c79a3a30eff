"""GET /openapi.json: the OpenAPI 3.1 document, built from the route records (each names its request
body and response shape) and the shapes in `wire/schemas.py`; the typed bodies are the specs the
decoder reads, published in route-table order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taguru_server.server.call import Probe, Route
from taguru_server.server.decode import Spec
from taguru_server.server.wire.json_schema import STR, ref
from taguru_server.server.wire.schemas import components, result_schema

NOTES = (
    "Request bodies are published as the server decodes them. Two things JSON Schema cannot say: a `maxLength` "
    "on a request string is a byte cap (the server counts UTF-8 bytes), and an integer field takes an integer "
    "literal (`2.0` is refused like `2.5`). Rules between two values of one body are in the schema's description."
)


def published_specs(routes: Sequence[Route]) -> list[Spec]:
    """The typed request bodies the document publishes: the routes' specs, in route-table order."""
    return [route.spec for route in routes if route.spec is not None]


def openapi_document(routes: Sequence[Route], version: str, probes: Sequence[Probe] = ()) -> dict[str, Any]:
    """OpenAPI 3.1 for every routed path and the probes."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.template, {})[route.method.lower()] = _operation(route)
    for probe in probes:
        paths.setdefault(probe.template, {})["get"] = _probe_operation(probe)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Taguru knowledge contexts and evidence assembly", "version": version, "description": NOTES},
        "paths": paths,
        "components": {
            "schemas": components(published_specs(routes)),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation(route: Route) -> dict[str, Any]:
    """One routed operation: its role, path parameter, request body, query parameters and responses."""
    method, template = route.method, route.template
    op: dict[str, Any] = {"operationId": _operation_id(method, template), "responses": {}}
    op["description"] = f"Needs the '{route.role}' role when API tokens are configured."
    op["security"] = [{"bearer": []}]
    if "{name}" in template:
        op["parameters"] = [
            {
                "name": "name",
                "in": "path",
                "required": True,
                "schema": STR,
                "description": "group name, one percent-encoded path segment"
                if route.group_name
                else "context name, one percent-encoded path segment",
            }
        ]
    request = route.request_component
    if request == "jsonl":
        op["requestBody"] = {"required": True, "content": {"application/x-ndjson": {"schema": ref("ImportStream")}}}
    elif request is not None:
        op["requestBody"] = {
            "required": not route.optional_body,
            "content": {"application/json": {"schema": ref(request)}},
        }
    if route.query:
        op["parameters"] = [*op.get("parameters", []), *route.query]
    op["responses"] = _responses(route.response, refuses=True)
    return op


def _probe_operation(probe: Probe) -> dict[str, Any]:
    """One probe's operation: no role, no parameters, no body."""
    return {
        "operationId": _operation_id("GET", probe.template),
        "responses": _responses(probe.response, probe.refuses),
    }


MEDIA = {"text": "text/plain", "metrics": "text/plain", "ndjson": "application/x-ndjson", "markdown": "text/markdown"}


def _responses(response: str, refuses: bool) -> dict[str, Any]:
    """The responses of an operation whose success has this shape (and, if it `refuses`, the error envelope)."""
    out: dict[str, Any] = {}
    if response in MEDIA:
        out["200"] = {"description": "OK", "content": {MEDIA[response]: {"schema": STR}}}
    elif response == "openapi":
        out["200"] = {
            "description": "this document",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    elif response == "jsonrpc":
        out["200"] = {
            "description": "a JSON-RPC reply",
            "content": {"application/json": {"schema": ref("JsonRpcReply")}},
        }
        out["202"] = {"description": "a notification was accepted (no body)"}
        out["400"] = {
            "description": "a framing error",
            "content": {"application/json": {"schema": ref("JsonRpcReply")}},
        }
    else:
        out["200"] = {
            "description": "OK",
            "content": {"application/json": {"schema": result_schema(response)}},
        }
    if refuses:
        out["default"] = {
            "description": "the error envelope",
            "content": {"application/json": {"schema": ref("Error")}},
        }
    return out


def _operation_id(method: str, template: str) -> str:
    words = [w.strip("{}") for w in template.strip("/").replace(".", "_").split("/") if w]
    return method.lower() + "_" + "_".join(words or ["root"])
