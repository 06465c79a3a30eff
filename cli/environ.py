"""The environment a command runs with: read once by `taguru` (cli/main.py: main) and kept on its arguments;
what the client commands (evidence, export, communities) share to turn it into a server to talk to."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from taguru_server.client.config import MalformedConfig, config_file_path
from taguru_server.client.http import SetupError, TaguruClient, base_url, bearer_token
from taguru_server.server.variables import process_environment

if TYPE_CHECKING:
    from taguru_server.server.config import Configuration, Settings

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
CONFIG_HELP = "KEY=VALUE settings file (default TAGURU_CONFIG); the environment wins"
# the same option of the commands that open the store themselves (serve, import, migrate)
STORE_CONFIG_HELP = "KEY=VALUE settings file (default TAGURU_CONFIG); a variable set in the environment wins"


class UnreadableConfig(SetupError):
    """The `--config` file (or TAGURU_CONFIG's) of a client command cannot be read."""

    def __init__(self, path: str, cause: OSError | ValueError) -> None:
        self.path = path
        self.reason = str(getattr(cause, "strerror", None) or cause)
        self.malformed = isinstance(cause, MalformedConfig)  # its message names the file and the line
        super().__init__(self.reason if self.malformed else f"cannot read the config file {path}: {self.reason}")


def say(message: str) -> None:
    """One line on stderr, `taguru: …`."""
    print(f"taguru: {message}", file=sys.stderr)


def configuration_or_exit(
    args: argparse.Namespace, refuse: Callable[[str], None] = say
) -> tuple[Configuration, Settings]:
    """The command's settings tree (its environment over its `--config` file) and the server's part of it,
    or `refuse` says why not (one line) and the process exits 2."""
    from taguru_server.server.config import ConfigError, load_configuration

    env = command_environment(args)
    config = getattr(args, "config", None)
    try:
        configuration = load_configuration(env, config)
        return configuration, configuration.server()
    except ConfigError as exc:
        refuse(f"configuration refused: {exc}")
        raise SystemExit(EXIT_USAGE) from None
    except MalformedConfig as exc:
        refuse(str(exc))
        raise SystemExit(EXIT_USAGE) from None
    except (OSError, UnicodeDecodeError) as exc:
        path = config or env.get("TAGURU_CONFIG", "")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a UTF-8 text file"
        refuse(f"cannot read the config file {path}: {reason}")
        raise SystemExit(EXIT_USAGE) from None


def settings_or_exit(args: argparse.Namespace, refuse: Callable[[str], None] = say) -> Settings:
    """The server's settings of the command, or `refuse` says why not (one line) and the process exits 2."""
    return configuration_or_exit(args, refuse)[1]


def command_environment(args: argparse.Namespace) -> dict[str, str]:
    """The process environment as `main` read it for this command (read now when the command was
    started some other way)."""
    env = getattr(args, "environment", None)
    return dict(env) if env is not None else process_environment()


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """The `--config FILE` option of a client command."""
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)


def add_server_options(parser: argparse.ArgumentParser, url_help: str) -> None:
    """`--url URL` (worded by the command) and `--config FILE`."""
    parser.add_argument("--url", metavar="URL", help=url_help)
    add_config_option(parser)


def client_environment(args: argparse.Namespace) -> dict[str, str]:
    """The command's environment over its `--config` file (a real variable wins); UnreadableConfig when the
    file cannot be read."""
    return dict(client_configuration(args).values)


def client_configuration(args: argparse.Namespace) -> Configuration:
    """The settings tree of a client command (`client_environment`)."""
    from taguru_server.server.config import load_configuration

    env = command_environment(args)
    try:
        return load_configuration(env, args.config)
    except (OSError, ValueError) as exc:
        raise UnreadableConfig(config_file_path(args.config, env) or "", exc) from None


def server_url(flag: str | None, env: Mapping[str, str]) -> str:
    """--url, else TAGURU_URL, else http://$TAGURU_ADDR (127.0.0.1:8248): the client commands' one rule."""
    chosen = flag or env.get("TAGURU_URL", "").strip() or None
    url = base_url(chosen, env)
    if not url.lower().startswith(("http://", "https://")):
        raise SetupError(f"the server URL must start with http:// or https:// (got '{chosen or url}')")
    return url


def remote_url(args: argparse.Namespace) -> str | None:
    """The server a command that also works offline (import, export) talks to: `--url`, else TAGURU_URL
    (the environment over the `--config` file), unless `--data-dir` asks for the data directory; None
    means offline."""
    if getattr(args, "url", None):
        return str(args.url)
    if getattr(args, "data_dir", None):
        return None
    try:
        values = client_environment(args)
    except UnreadableConfig:
        values = command_environment(args)  # the command itself says why the file cannot be read
    return values.get("TAGURU_URL", "").strip() or None


def connect(url: str, env: Mapping[str, str], timeout: float) -> TaguruClient:
    """A client of the server at `url` with the environment's token (TAGURU_API_TOKEN, else TAGURU_API_TOKENS)."""
    return TaguruClient(url, bearer_token(env), timeout=timeout)
