"""Reference routes this server does not serve (yet), and the list of the routes it does serve.

A request for a route of the reference server's inventory that is missing here is answered
404 `unknown_path` with a message saying so (instead of the generic "no route"), after the
same role check the reference route has. Implementing one of these routes means registering
it in `routing.ROUTES` and deleting its row below; docs/compatibility.md lists every route.
"""

from __future__ import annotations

from urllib.parse import unquote

# (method, path template, role the reference requires: read | write | admin | exempt)
UNSUPPORTED: tuple[tuple[str, str, str], ...] = (
    # OAuth (mounted by the reference only when TAGURU_PUBLIC_URL is set)
    ("GET", "/.well-known/oauth-protected-resource", "exempt"),
    ("GET", "/.well-known/oauth-protected-resource/mcp", "exempt"),
    ("GET", "/.well-known/oauth-authorization-server", "exempt"),
    ("POST", "/oauth/register", "exempt"),
    ("GET", "/oauth/authorize", "exempt"),
    ("POST", "/oauth/authorize", "exempt"),
    ("POST", "/oauth/token", "exempt"),
)

# where the `exempt` rows above live (checked before authentication)
EXEMPT_PREFIXES = ("/.well-known/", "/oauth/")

# the routes this server registers, as (method, template, role); filled by `routing` when it builds its table
SERVED: list[tuple[str, str, str]] = []


def unsupported_text(method: str, template: str) -> str:
    return f"{method} {template} is a Taguru route not supported by this server; see docs/compatibility.md"


def unsupported(method: str, raw_path: str) -> tuple[str, str] | None:
    """(template, role) when `method raw_path` is a reference route this server does not serve, else None."""
    path = raw_path.split("?", 1)[0]
    try:
        parts = [unquote(p, errors="strict") for p in path.strip("/").split("/")] if path.strip("/") else []
    except UnicodeDecodeError:
        return None
    if path.endswith("/") and len(path) > 1:
        parts.append("")
    for r_method, template, role in UNSUPPORTED:
        if r_method != method:
            continue
        pattern = template.strip("/").split("/")
        if len(pattern) == len(parts) and all(p == "{name}" or p == s for p, s in zip(pattern, parts, strict=True)):
            return template, role
    return None


PROBE_PATHS = ("/health", "/live", "/ready", "/version", "/metrics", "/openapi.json")


def routes_section() -> str:
    """The `/protocol` trailer's list of served routes, one `METHOD template (role)` per line ("" before the
    route table is built, e.g. in the stdio bridge's bundled copy)."""
    if not SERVED:
        return ""
    lines = [f"- `{method} {template}` ({role})" for method, template, role in SERVED]
    lines += [f"- `GET {path}` (no token)" for path in PROBE_PATHS]
    return (
        "HTTP routes this server answers (a Taguru route missing here answers 404 `unknown_path` and says so; "
        "docs/compatibility.md lists every route):\n\n" + "\n".join(lines) + "\n\n"
    )
