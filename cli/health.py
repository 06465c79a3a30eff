"""`taguru health [--config FILE] [--url URL] [URL]`: exit 0 when a running server's `GET /health` answers 200.

The container HEALTHCHECK: standard library only (it must start in well under a second on a cold
container), no token (the probe is exempt from auth), a 4 s overall timeout. Without a URL the
target is `http://{TAGURU_ADDR}` (the config file read first; an unspecified bind address becomes
its loopback); `TAGURU_URL` is not consulted.
"""

from __future__ import annotations

import http.client
import ipaddress
import sys
import urllib.error
import urllib.request

TIMEOUT_SECS = 4.0
DEFAULT_ADDR = "127.0.0.1:8248"
USAGE = "usage: taguru health [--config FILE] [--url URL] [URL]"


class Usage(Exception):
    """A usage error: one line, exit 2."""


class PortZero(Exception):
    """No URL was given and TAGURU_ADDR binds to an OS-assigned port: nothing to probe (exit 2)."""


def parse(argv: list[str]) -> tuple[str | None, str | None]:
    """(config file, URL) from the arguments, or Usage."""
    config: str | None = None
    url: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--config", "--url"):
            value = argv[i + 1] if i + 1 < len(argv) else None
            if arg == "--config":
                if config is not None:
                    raise Usage("--config given twice")
                if value is None:
                    raise Usage("--config needs a file path")
                config = value
            else:
                if value is None or value.startswith("-"):
                    raise Usage("--url needs a server URL")
                if url is not None:
                    raise Usage("'health' takes either --url or a positional URL, not both")
                url = value
            i += 2
            continue
        if arg.startswith("-"):
            raise Usage(f"'health' does not take '{arg}'")
        if url is not None:
            raise Usage("'health' takes either --url or a positional URL, not both")
        url = arg
        i += 1
    return config, url


def _loopback(addr: str) -> str:
    """An unspecified bind address as its loopback (`0.0.0.0:P` → `127.0.0.1:P`, `[::]:P` → `[::1]:P`)."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        return addr
    bare = host.strip("[]")
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        return addr
    if ip.is_unspecified:
        return f"[::1]:{port}" if ip.version == 6 else f"127.0.0.1:{port}"
    return addr


def target(config: str | None, url: str | None, env: dict[str, str]) -> str:
    """The base URL to probe (PortZero, said on stderr, for an OS-assigned port)."""
    if url is not None:
        return url.rstrip("/")
    from taguru_server.client.config import with_config_file

    values = with_config_file(env, config)
    addr = (values.get("TAGURU_ADDR") or "").strip() or DEFAULT_ADDR
    if addr.rpartition(":")[2] == "0":
        print(
            f"taguru: health: TAGURU_ADDR ({addr}) binds to port 0 (OS-assigned) — the actual port can't be "
            "discovered from here; pass the server's real URL explicitly: 'taguru health http://host:PORT'",
            file=sys.stderr,
        )
        raise PortZero(addr)
    return f"http://{_loopback(addr)}"


def probe(base: str) -> int:
    """One GET {base}/health: the body on stdout and 0 for exactly 200, else one stderr line and 1."""
    url = f"{base}/health"
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=TIMEOUT_SECS) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        print(f"taguru: health: {url}: {reason}", file=sys.stderr)
        return 1
    text = body.decode("utf-8", "replace").strip()
    if status == 200:
        print(text)
        return 0
    print(f"taguru: health: {url} answered {status}: {text}", file=sys.stderr)
    return 1


def run(argv: list[str], env: dict[str, str] | None = None) -> int:
    """The command; `argv` are the arguments after `health`."""
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    try:
        config, url = parse(argv)
    except Usage as exc:
        print(f"taguru: {exc} — try 'taguru --help'", file=sys.stderr)
        return 2
    from taguru_server.client.config import MalformedConfig
    from taguru_server.server.variables import process_environment

    environ = process_environment() if env is None else env
    try:
        base = target(config, url, environ)
    except PortZero:
        return 2
    except MalformedConfig as exc:
        print(f"taguru: health: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"taguru: health: cannot read config {config}: {exc}", file=sys.stderr)
        return 2
    return probe(base)
