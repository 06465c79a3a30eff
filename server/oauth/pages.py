"""The consent page, the "Cannot continue" page and the too-many-attempts page, with their hardening headers.

Inline styles only: no script, image or external load, and a policy that forbids them.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

HARDENING = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
}
FIELDS = ("response_type", "client_id", "redirect_uri", "state", "code_challenge", "code_challenge_method", "resource")
NOT_ACCEPTED = "that key was not accepted"
STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;color:#222}"
    ".detail{background:#fff6d6;border:1px solid #e0c060;padding:.75rem 1rem;border-radius:.4rem}"
    ".error{background:#fde2e2;border:1px solid #d77;padding:.5rem 1rem;border-radius:.4rem}"
    "code{word-break:break-all}input[type=password]{width:100%;padding:.4rem;margin:.5rem 0}"
)


def escape(text: str) -> str:
    """HTML-escape `& < > " '`."""
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#39;")
    )


def html_page(body: str, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """An HTML response with the hardening headers."""
    response = web.Response(text=body, status=status, content_type="text/html", charset="utf-8")
    response.headers.update(HARDENING)
    if headers:
        response.headers.update(headers)
    return response


def _document(title: str, inner: str) -> str:
    """A whole page around its content."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{inner}</body></html>"
    )


def consent_page(client_name: str, params: Mapping[str, str], rejected: bool = False) -> web.Response:
    """The consent form: who asks, where the browser goes back to, the hidden parameters and the key field."""
    name = escape(client_name)
    hidden = "".join(
        f'<input type="hidden" name="{field}" value="{escape(params.get(field, ""))}">' for field in FIELDS
    )
    notice = f'<p class="error">{NOT_ACCEPTED}</p>' if rejected else ""
    inner = (
        f"<h1>Authorize {name}?</h1>"
        f"<p>{name} wants to use this Taguru server's memory through MCP (<code>/mcp</code> only). Approving "
        "delegates one of your API keys: the connection acts as that key and appears as "
        f"<code>&lt;key&gt;@{name}</code> in the access log.</p>"
        '<div class="detail"><p>After approval your browser returns to:</p>'
        f"<p><code>{escape(params.get('redirect_uri', ''))}</code></p>"
        f"<p>client_id: <code>{escape(params.get('client_id', ''))}</code></p>"
        "<p>Approve only if you recognize this address.</p></div>"
        f"{notice}"
        f'<form method="post" action="/oauth/authorize">{hidden}'
        '<label>API key <input type="password" name="key" autofocus autocomplete="off"></label>'
        '<button type="submit">Approve</button></form>'
    )
    return html_page(_document("Taguru — authorize a client", inner))


def refusal_page(reason: str) -> web.Response:
    """400: the request cannot be trusted enough to redirect back."""
    inner = f"<h1>Cannot continue</h1><p>{escape(reason)}</p>"
    return html_page(_document("Taguru — cannot continue", inner), status=400)


def throttled_page(wait: int) -> web.Response:
    """429: too many failed attempts from this address."""
    inner = "<h1>Too many attempts</h1><p>There were too many failed attempts. Try again shortly.</p>"
    return html_page(_document("Taguru — too many attempts", inner), status=429, headers={"Retry-After": str(wait)})
