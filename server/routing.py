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
    walks,
)
from taguru_server.store.errors import ApiError, Code

UNMATCHED = "<unmatched>"

# The published order (`/openapi.json` lists paths in it). A new route goes into its resource module's
# table; its request and result shapes into `schemas.ROUTE_SHAPES`, which the document is built from.
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
    Route("POST", "/contexts/{name}/evidence", ev.evidence, "read"),
    *communities.ROUTES,
    *export.ROUTES,
    *admin.IMPORT_ROUTES,
    *audits.ROUTES,
    *promote.ROUTES,
    *maintenance.ROUTES,
    *mcp.ROUTES,
    *admin.PROTOCOL_ROUTES,
]

PROBES = {**admin.probes(ROUTES), **PAGES}  # the inspector page (GET /ui) needs no auth either
compat.SERVED[:] = [(r.method, r.template, r.role) for r in ROUTES]


@attrs.frozen
class Match:
    """Where a request landed: the template (its metrics label), the role it needs, its handler and `{name}`."""

    template: str
    role: str
    handler: Handler | None
    name: str | None
    path_matched: bool
    unsupported: bool = False  # a reference route this server does not serve (`compat.UNSUPPORTED`)
    allowed: tuple[str, ...] = ()  # the methods the path does route (a 405's `Allow`)


ALLOW_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allow_header(methods: tuple[str, ...]) -> dict[str, str]:
    """The `Allow` header of a 405: the methods the path supports (a GET path also answers HEAD), in one order."""
    listed = set(methods) | ({"HEAD"} if "GET" in methods else set())
    return {"Allow": ", ".join(sorted(listed, key=lambda m: (ALLOW_ORDER + (m,)).index(m)))}


class Router:
    """Matches decoded path segments against templates; `{name}` is one percent-decoded segment."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes: list[tuple[str, str, tuple[str, ...], Handler, str]] = [
            (method, template, tuple(template.strip("/").split("/")), handler, role)
            for method, template, handler, role in routes
        ]

    def match(self, method: str, segments: list[str]) -> tuple[str, str, Handler | None, str | None, bool]:
        """Return (template, role, handler, name, path_matched)."""
        path_matched = None
        for r_method, template, handler, role, name in self._matching(segments):
            if r_method == method:
                return template, role, handler, name, True
            path_matched = (template, name)
        if path_matched is not None:
            return path_matched[0], "admin", None, path_matched[1], True
        return UNMATCHED, "admin", None, None, False

    def allowed(self, segments: list[str]) -> tuple[str, ...]:
        """The methods some route answers on these segments, in table order."""
        return tuple(dict.fromkeys(r_method for r_method, *_rest in self._matching(segments)))

    def _matching(self, segments: list[str]) -> Iterator[tuple[str, str, Handler, str, str | None]]:
        """(method, template, handler, role, name) of every route whose template matches the segments."""
        for r_method, template, parts, handler, role in self.routes:
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
                yield r_method, template, handler, role, name

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


def authorize(principal: Principal, method: str, match: Match, uri: str) -> Handler:
    """The matched route's handler if this key may call it: role first, then the route exists, then the grant."""
    principal.require_role(method, match.template, match.role)
    if match.handler is None:
        if match.unsupported:
            raise ApiError(Code.UNKNOWN_PATH, compat.unsupported_text(method, match.template))
        if match.path_matched:
            raise ApiError(
                Code.METHOD_NOT_ALLOWED,
                f"{method} is not supported on {uri}; GET /protocol lists the API",
                headers=allow_header(match.allowed),
            )
        raise ApiError(Code.UNKNOWN_PATH, f"no route for {method} {uri}; GET /protocol lists the API")
    if match.name is not None and match.template not in groups.GROUP_TEMPLATES:  # `{name}` is a group there
        principal.require_grant(match.name)
    return match.handler
