"""The one line that refuses a server URL given to a command (`--url`, TAGURU_URL)."""

from __future__ import annotations

from taguru_server.client.http import SetupError, check_url


def url_refusal(url: str, given_as: str = "--url") -> str | None:
    """Why `url` cannot be a server's base URL (None when it can): one line naming where it came
    from, echoing the value only when it carries no credentials."""
    try:
        check_url(url)
        if not url.lower().startswith(("http://", "https://")):
            raise SetupError("the --url value must be an http:// or https:// URL")
    except SetupError as exc:
        text = str(exc).replace("the --url value", f"the {given_as} value")
        return text if "@" in url else f"{text} (got '{url}')"
    return None
