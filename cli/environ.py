"""The environment a command runs with: read once by `taguru` (cli/main.py: main) and kept on its arguments."""

from __future__ import annotations

import argparse

from taguru_server.server.variables import process_environment


def command_environment(args: argparse.Namespace) -> dict[str, str]:
    """The process environment as `main` read it for this command (read now when the command was
    started some other way)."""
    env = getattr(args, "environment", None)
    return dict(env) if env is not None else process_environment()
