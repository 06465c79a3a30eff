"""The one route table, matching raw paths against it, and the access check of a matched route."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote

import attrs
from aiohttp import web

from taguru_server.server import compat
from taguru_server.server import evidence as ev
from taguru_server.server.auth import Principal
from taguru_server.server.call import Handler, Route
from taguru_server.server.inspector import PAGES
from taguru_server.server.mcp import endpoint as mcp
from taguru_server.server.routes import (
    admin,
    audits,
    communities,
    contexts,
    cross,
    embeddings,
    explain,
    export,
    feed,
    graph,
    groups,
    maintenance,
    passages,
    promote,
    schema,
    walks,
)
from taguru_server.server.wire.specs import EVIDENCE
from taguru_server.store.errors import ApiError, Code

UNMATCHED = "<unmatched>"

# The published order (`/openapi.json` lists paths, and publishes the typed request bodies, in it). A new
# route is one record in its resource module's table: handler, role, request body, result shape and flags.
ROUTES: list[Route] = [
    *contexts.ROUTES,
    *groups.ROUTES,
    *cross.ROUTES,
    *graph.ROUTES,
    *passages.ROUTES,
    *graph.LANE_ROUTES,
    *explain.ROUTES,
    *walks.ROUTES,
    *feed.ROUTES,
    *embeddings.ROUTES,
    Route("POST", "/contexts/{name}/evidence", ev.evidence, "read", request=EVIDENCE, response="EvidencePackage"),
    *communities.ROUTES,
    *export.ROUTES,
    *admin.IMPORT_ROUTES,
    *audits.ROUTES,
    *schema.ROUTES,
    *promote.ROUTES,
    *maintenance.ROUTES,
    *mcp.ROUTES,
    *admin.PROTOCOL_ROUTES,
]

PROBE_ROUTES = admin.probes(ROUTES)
PROBES = {probe.template: probe.handler for probe in PROBE_ROUTES} | PAGES  # GET /ui needs no auth either
compat.SERVED[:] = [(r.method, r.template, r.role) for r in ROUTES]


@attrs.frozen
class Match:
    """Where a request landed: the template (its metrics label), the role it needs, its route record and `{name}`."""

    template: str
    role: str
    route: Route | None
    name: str | None
    path_matched: bool
    unsupported: bool = False  # a reference route this server does not serve (`compat.UNSUPPORTED`)
    allowed: tuple[str, ...] = ()  # the methods the path does route (a 405's `Allow`)

    @property
    def handler(self) -> Handler | None:
        """The matched route's handler (None when no route answers the method)."""
        return None if self.route is None else self.route.handler


ALLOW_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allow_header(methods: tuple[str, ...]) -> dict[str, str]:
    """The `Allow` header of a 405: the methods the path supports (a GET path also answers HEAD), in one order."""
    listed = set(methods) | ({"HEAD"} if "GET" in methods else set())
    return {"Allow": ", ".join(sorted(listed, key=lambda m: (ALLOW_ORDER + (m,)).index(m)))}


class Router:
    """Matches decoded path segments against templates; `{name}` is one percent-decoded segment."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes: list[tuple[tuple[str, ...], Route]] = [
            (tuple(route.template.strip("/").split("/")), route) for route in routes
        ]

    def match(self, method: str, segments: list[str]) -> tuple[str, str, Route | None, str | None, bool]:
        """Return (template, role, route, name, path_matched)."""
        path_matched = None
        for route, name in self._matching(segments):
            if route.method == method:
                return route.template, route.role, route, name, True
            path_matched = (route.template, name)
        if path_matched is not None:
            return path_matched[0], "admin", None, path_matched[1], True
        return UNMATCHED, "admin", None, None, False

    def allowed(self, segments: list[str]) -> tuple[str, ...]:
        """The methods some route answers on these segments, in table order."""
        return tuple(dict.fromkeys(route.method for route, _name in self._matching(segments)))

    def _matching(self, segments: list[str]) -> Iterator[tuple[Route, str | None]]:
        """(route, name) of every route whose template matches the segments."""
        for parts, route in self.routes:
            if len(parts) != len(segments):
                continue
            name = None
            ok = True
            for part, seg in zip(parts, segments, strict=False):
                if part == "{name}":
                    name = seg
                elif part != seg:
                    ok = False
                    break
            if ok:
                yield route, name

    def resolve(self, method: str, uri: str) -> Match:
        """Match a raw request target (its query string is ignored); an undecodable path is an unknown path."""
        try:
            parts = segments(uri)
        except UnicodeDecodeError:
            raise ApiError(Code.UNKNOWN_PATH, f"no route for {method} {uri}; GET /protocol lists the API") from None
        found = Match(*self.match(method, parts))
        if found.handler is None and found.path_matched:
            return attrs.evolve(found, allowed=self.allowed(parts))
        if found.handler is None and not found.path_matched:
            known = compat.unsupported(method, uri)
            if known is not None:
                template, role = known
                name = parts[1] if "{name}" in template and len(parts) > 1 else None
                return Match(template, "read" if role == "exempt" else role, None, name, False, True)
        return found


ROUTER = Router(ROUTES)


def response_shape(method: str, template: str) -> str | None:
    """The success shape the route (or probe) at this method and template declares; None for no route."""
    for route in ROUTES:
        if (route.method, route.template) == (method, template):
            return route.response
    return next((p.response for p in PROBE_ROUTES if method == "GET" and p.template == template), None)


MATCH_KEY: web.RequestKey[Match] = web.RequestKey("match", Match)


def routed_method(method: str) -> str:
    """The method a request is routed as: HEAD is a GET whose answer has no body (status and headers
    are the GET's), as the reference's framework answers HEAD on every GET route."""
    return "GET" if method == "HEAD" else method


def segments(raw_path: str) -> list[str]:
    """The percent-decoded path segments (a trailing slash is a last empty segment)."""
    path = raw_path.split("?", 1)[0]
    parts = path.strip("/").split("/") if path.strip("/") else []
    if path.endswith("/") and len(path) > 1:
        parts.append("")
    return [unquote(p, errors="strict") for p in parts]


def authorize(principal: Principal, method: str, match: Match, uri: str) -> Route:
    """The matched route if this key may call it: role first, then the route exists, then the grant."""
    principal.require_role(method, match.template, match.role)
    if match.route is None:
        if match.unsupported:
            raise ApiError(Code.UNKNOWN_PATH, compat.unsupported_text(method, match.template))
        if match.path_matched:
            raise ApiError(
                Code.METHOD_NOT_ALLOWED,
                f"{method} is not supported on {uri}; GET /protocol lists the API",
                headers=allow_header(match.allowed),
            )
        raise ApiError(Code.UNKNOWN_PATH, f"no route for {method} {uri}; GET /protocol lists the API")
    if match.name is not None and not match.route.group_name:  # `{name}` is a group there
        principal.require_grant(match.name)
    return match.route
