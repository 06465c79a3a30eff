"""The one line that refuses a server URL given to a command (`--url`, TAGURU_URL), and what counts as a
loopback host."""

from __future__ import annotations

import ipaddress

from taguru_server.client.http import SetupError, check_url


def is_loopback_host(host: str | None) -> bool:
    """`localhost` exactly, an IPv4 address in 127.0.0.0/8, or the IPv6 loopback (a URL's parsed hostname)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
