"""The `taguru` command: read the environment once, warn about unknown settings, dispatch to the
command the parser chose (cli/parser.py)."""

from __future__ import annotations

import argparse
import sys

from taguru_server.cli.datadir import LOCKED, DataDirBusy, DataDirLock
from taguru_server.cli.environ import EXIT_OK, EXIT_USAGE
from taguru_server.cli.parser import build_parser
from taguru_server.cli.serve import log_format_before_settings
from taguru_server.client.config import with_config_file
from taguru_server.server.variables import check_contracts_requested, process_environment

__all__ = ["LOCKED", "DataDirBusy", "DataDirLock", "build_parser", "main"]


def _warn_unknown_settings(args: argparse.Namespace, env: dict[str, str]) -> None:
    """A did-you-mean warning for each TAGURU_* name (environment or --config file) that nothing reads."""
    if getattr(args, "worker", False):
        return  # the supervisor already said it
    from taguru_server.cli.envcheck import warn_unknown

    config = getattr(args, "config", None)
    try:
        names = set(with_config_file(env, config))
    except (OSError, ValueError):
        names = set(env)  # the command itself says why the file cannot be read
    if args.command == "serve" and log_format_before_settings(config, env) == "json":
        _log_unknown_settings(names, env)  # every line `serve` writes is then one JSON object
        return
    warn_unknown(names, sys.stderr)


def _log_unknown_settings(names: set[str], env: dict[str, str]) -> None:
    """The did-you-mean warnings as `config.unknown_variable` events (the json log format)."""
    from taguru_server.cli.envcheck import unknown
    from taguru_server.server.logging import configure_logging, lenient_log_settings

    found = unknown(names)
    if not found:
        return
    import structlog

    configure_logging(fmt="json", logs=lenient_log_settings(env), final=False)
    log = structlog.get_logger("taguru.serve")
    for name, close in found:
        hint = f" (did you mean {close}?)" if close else ""
        log.warning(
            "config.unknown_variable",
            message=f"{name} is not a taguru setting and is ignored{hint}",
            name=name,
            did_you_mean=close,
        )


SERVE_FIRST = ("--config", "--workers")  # a first argument that makes the whole list `serve`'s


def normalized(argv: list[str]) -> list[str]:
    """Bare `taguru` serves (the image's entrypoint); `taguru --config F …` and `--workers N …` are `serve …`."""
    if not argv:
        return ["serve"]
    first = argv[0].split("=", 1)[0]
    return ["serve", *argv] if first in SERVE_FIRST else argv


def version_command(rest: list[str]) -> int:
    """`taguru version`: the installed version, nothing started."""
    if rest:
        print(f"taguru: 'version' takes no argument, got '{rest[0]}' — try 'taguru --help'", file=sys.stderr)
        return EXIT_USAGE
    from taguru_server.cli.serve import installed_version

    print(f"taguru {installed_version()}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args_in = normalized(list(sys.argv[1:] if argv is None else argv))
    # the two commands that must start fast and never touch the settings: no parser, no server imports
    if args_in[0] == "health":
        from taguru_server.cli.health import run as health

        return health(args_in[1:])
    if args_in[0] == "version":
        return version_command(args_in[1:])
    return _main(args_in)


def _main(argv: list[str]) -> int:
    from taguru_server.cli.guard import guarded

    def run() -> int:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            return EXIT_USAGE if exc.code else EXIT_OK
        env = process_environment()  # the one read of the environment; the command takes it from `args`
        args.environment = env
        args.entry = main  # what a forked worker of `serve` runs
        if check_contracts_requested(env):
            from taguru_server.pipeline import check_contracts

            check_contracts(True)
        _warn_unknown_settings(args, env)
        return int(args.func(args))

    return guarded(run)
