"""What both forms of `taguru export` share: the one-line failure, the store settings, the server check."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from taguru_server.cli.environ import command_environment
from taguru_server.client.config import MalformedConfig
from taguru_server.client.http import TransportError

if TYPE_CHECKING:
    from taguru_server.server.config import Settings

EXPORT_TIMEOUT_SECS = 600


class ExportFailed(Exception):
    """One line for stderr."""


def store_settings(args: argparse.Namespace) -> Settings:
    """The server's settings of the command (which store to read), or ExportFailed with the one line."""
    from taguru_server.server.config import ConfigError, load_configuration

    try:
        return load_configuration(command_environment(args), args.config).server()
    except ConfigError as exc:
        raise ExportFailed(f"configuration refused: {exc}") from None
    except MalformedConfig as exc:
        raise ExportFailed(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a UTF-8 text file"
        raise ExportFailed(f"cannot read the config file: {reason}") from None


def schema_format_check(client: Any, base: str) -> None:
    """A server that writes schema records in a format this CLI cannot read is refused before anything is
    fetched (a server that reports no `schema_formats` writes none)."""
    try:
        reply = client.send_sync("GET", "/version")
        formats = json.loads(reply.body).get("schema_formats") if reply.status == 200 else None
    except (TransportError, ValueError, AttributeError):
        return  # the export request itself reports an unreachable server
    if isinstance(formats, list) and 1 not in formats:
        raise ExportFailed(
            f"this CLI reads schema format 1 but the server at {base} writes {json.dumps(formats)} — nothing was "
            "fetched; upgrade this CLI"
        )
