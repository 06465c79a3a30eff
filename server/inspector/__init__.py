"""GET /ui: the evidence inspector, a static page whose script calls the API from the browser (docs/inspector.md).

The page and its assets hold no data, so they are served like the probes: GET (and HEAD), without auth
and before the in-flight ceiling. The script asks for a token when the API answers 401.
"""

from __future__ import annotations

import hashlib
from importlib import resources

import attrs
from aiohttp import web

# No inline script or style, nothing from another origin; the script talks to this server only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


@attrs.frozen
class Asset:
    """One file of the page: its bytes, media type and a validator for conditional requests."""

    body: bytes
    content_type: str
    etag: str


def _asset(filename: str, content_type: str) -> Asset:
    body = resources.files(__name__).joinpath(filename).read_bytes()
    return Asset(body, content_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


ASSETS: dict[str, Asset] = {
    "/ui": _asset("index.html", "text/html; charset=utf-8"),
    "/ui/app.js": _asset("app.js", "text/javascript; charset=utf-8"),
    "/ui/app.css": _asset("app.css", "text/css; charset=utf-8"),
}


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


async def serve(request: web.Request) -> web.StreamResponse:
    """The asset at the request's exact path; revalidated on every use (`no-cache`), 304 when unchanged."""
    asset = ASSETS[request.raw_path.split("?", 1)[0]]
    headers = {
        "Cache-Control": "no-cache",
        "ETag": asset.etag,
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
    }
    if _matches(request.headers.get("If-None-Match"), asset.etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=asset.body, headers={**headers, "Content-Type": asset.content_type})


PAGES = dict.fromkeys(ASSETS, serve)
"""The inspector's paths, for the probe table (`server/routing.py`)."""
