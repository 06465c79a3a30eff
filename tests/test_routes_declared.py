"""Every fact about a route is declared once, on its record in the route table (`server/call.py: Route`).

Pinned here: no handler carries attributes that the server reads back (`getattr` on a handler, or
an attribute assigned to a function); no server module outside the route table keeps its own
per-route set or map (`(method, "/path")` keys); every record names its request body and result
shape, and each name resolves in the document; the typed request bodies are published in
route-table order, and each handler can reach the spec its record names; the MCP tools call
routes of the table.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import Any

from taguru_server.server.call import Route
from taguru_server.server.decode import Spec
from taguru_server.server.mcp.tools import TOOLS
from taguru_server.server.openapi import openapi_document, published_specs
from taguru_server.server.routing import PROBE_ROUTES, ROUTER, ROUTES, response_shape, segments

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "server"
METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
# the reference's routes this server does not serve: they have no record to carry a fact
NOT_SERVED = {SERVER / "compat.py"}
MEDIA_SHAPES = {"text", "metrics", "ndjson", "markdown", "openapi", "jsonrpc"}


def server_modules() -> list[Path]:
    return sorted(SERVER.rglob("*.py"))


def test_no_handler_attribute_is_read_back() -> None:
    """Neither `getattr(handler, …)` nor `function.attribute = …`: a route's flags live on its record."""
    found = []
    for path in server_modules():
        tree = ast.parse(path.read_text(), str(path))
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Name | ast.Attribute) and "handler" in ast.unparse(first):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                        if target.value.id in functions:
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(target)}")
    assert found == []


# the records (`cached_read` builds a cached retrieval's Route); an MCP `Tool` names the route it calls (each
# one is checked below to be in the table)
RECORD_BUILDERS = {"Route", "cached_read", "Probe", "on_group", "Tool"}
TEMPLATES = {route.template for route in ROUTES if "{name}" in route.template}


def _outside_records(node: ast.AST) -> list[ast.AST]:
    """Every node inside `node` that is not part of a route or probe record."""
    out: list[ast.AST] = []
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, ast.Call) and isinstance(current.func, ast.Name) and current.func.id in RECORD_BUILDERS:
            continue
        out.append(current)
        pending.extend(ast.iter_child_nodes(current))
    return out


def _route_keys(node: ast.AST) -> list[str]:
    """The `(METHOD, "/path")` pairs, and the routed `{name}` templates, written inside a node outside records."""
    keys = []
    for sub in _outside_records(node):
        if isinstance(sub, ast.Constant) and sub.value in TEMPLATES:
            keys.append(str(sub.value))
        if isinstance(sub, ast.Tuple) and len(sub.elts) >= 2:
            method, path = sub.elts[0], sub.elts[1]
            if (
                isinstance(method, ast.Constant)
                and method.value in METHODS
                and isinstance(path, ast.Constant)
                and isinstance(path.value, str)
                and path.value.startswith("/")
            ):
                keys.append(f"{method.value} {path.value}")
    return keys


def test_no_module_keeps_a_per_route_table_of_its_own() -> None:
    """A module-level constant keyed by (method, template), or listing routed templates, is a second place
    for a route's fact."""
    found = []
    for path in server_modules():
        if path in NOT_SERVED:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                keys = _route_keys(node.value)
                if keys:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {keys[0]}")
    assert found == []


def test_every_record_names_its_request_and_result() -> None:
    doc = openapi_document(ROUTES, "0", PROBE_ROUTES)
    components = doc["components"]["schemas"]
    assert all(isinstance(route, Route) for route in ROUTES)
    assert len({(r.method, r.template) for r in ROUTES}) == len(ROUTES)
    for route in ROUTES:
        assert route.response, (route.method, route.template)
        assert response_shape(route.method, route.template) == route.response
        if route.response not in MEDIA_SHAPES:
            name = route.response.removeprefix("bare:").removeprefix("warned:")
            assert name in components or name in ("bool", "int", "names", "candidates"), route.template
        if isinstance(route.request, str) and route.request != "jsonl":
            assert route.request in components, (route.method, route.template)
        if route.method in ("GET", "HEAD"):
            assert route.request is None and not route.optional_body, route.template
        if route.optional_body:
            assert route.request is not None, route.template
    for probe in PROBE_ROUTES:
        assert response_shape("GET", probe.template) == probe.response


def test_the_typed_bodies_are_published_in_route_table_order() -> None:
    doc = openapi_document(ROUTES, "0", PROBE_ROUTES)
    names = list(doc["components"]["schemas"])
    in_table = list(dict.fromkeys(spec.component_name for spec in published_specs(ROUTES)))
    published = [name for name in names if name in in_table]
    assert published == in_table
    # they stand together, in one block
    first = names.index(in_table[0])
    assert names[first : first + len(in_table)] == in_table
    # and each is the schema of the spec its first route decodes with
    for route in ROUTES:
        if route.spec is not None:
            assert doc["components"]["schemas"][route.spec.component_name] == route.spec.json_schema()


def test_the_flags_the_middlewares_read_are_on_the_records() -> None:
    heavy = {(r.method, r.template) for r in ROUTES if r.heavy_before_body}
    assert heavy == {
        ("POST", "/contexts/{name}/vocabulary/audit"),
        ("POST", "/contexts/{name}/consolidation/audit"),
        ("POST", "/contexts/{name}/schema/audit"),
        ("POST", "/contexts/{name}/schema/validate"),
    }
    own = {(r.method, r.template) for r in ROUTES if r.own_write_section}
    assert own == {("POST", "/contexts/{name}/embeddings/refresh"), ("POST", "/maintenance/compact")}
    for route in ROUTES:
        assert route.group_name == route.template.startswith("/groups/{name}"), route.template


def test_every_mcp_tool_calls_a_route_of_the_table() -> None:
    """MCP reads no per-route fact of its own: each tool is one routed call through the same table."""
    for tool in TOOLS:
        if tool.composed:  # `retrieve` routes nothing itself: its steps are the tools above
            continue
        calls = [(tool.method, tool.path)] + ([("POST", tool.cross_path)] if tool.cross_path else [])
        for method, template in calls:
            path = template.replace("{context}", "x").replace("{name}", "x")
            found = ROUTER.match(method, segments(path))
            assert found[2] is not None, (tool.name, method, template)


def _reachable_specs(code: CodeType, names: dict[str, Any], cells: tuple[Any, ...], seen: set[int]) -> set[int]:
    """The ids of the specs a handler's code can name: its globals (a module's attributes too), its closure,
    its nested functions and the functions of its own module that it calls."""
    if id(code) in seen:
        return set()
    seen.add(id(code))
    found: set[int] = set()
    values = [names.get(name) for name in code.co_names] + [cell.cell_contents for cell in cells]
    for value in values:
        if isinstance(value, Spec):
            found.add(id(value))
        elif isinstance(value, ModuleType):
            found |= {id(v) for n in code.co_names if isinstance(v := getattr(value, n, None), Spec)}
        elif isinstance(value, FunctionType):
            found |= _reachable_specs(value.__code__, value.__globals__, value.__closure__ or (), seen)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            found |= _reachable_specs(const, names, (), seen)
    return found


def test_each_handler_decodes_with_the_spec_its_record_names() -> None:
    for route in ROUTES:
        if route.spec is None:
            continue
        handler = route.handler
        assert isinstance(handler, FunctionType)
        reachable = _reachable_specs(handler.__code__, handler.__globals__, handler.__closure__ or (), set())
        assert id(route.spec) in reachable, (route.method, route.template, route.spec.component_name)
