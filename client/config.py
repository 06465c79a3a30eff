"""The KEY=VALUE settings file shared by the server and its command-line clients, and the one rule that
merges it with the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


class MalformedConfig(ValueError):
    """A line of the settings file is not KEY=VALUE; the message names the file and the line number and
    never shows the line (it may be a pasted secret)."""


EXPORT_PREFIX = "export "  # a shell-style `export KEY=VALUE` line reads as `KEY=VALUE`


def read_config_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """KEY=VALUE lines (`parse_config_text`) of the file at `path`."""
    return parse_config_text(Path(path).read_text(encoding="utf-8"), os.fspath(path))


def parse_config_text(text: str, path: str) -> dict[str, str]:
    """The variables of a settings file's text: a leading BOM and a shell `export ` prefix are dropped, the
    last of a repeated key wins; blank lines, # comments and lines without `=` are skipped.
    MalformedConfig (naming `path` and the line number) when the name before `=` is empty or holds
    whitespace."""
    out: dict[str, str] = {}
    text = text.removeprefix("\ufeff")
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        if line.startswith(EXPORT_PREFIX):
            line = line[len(EXPORT_PREFIX) :].lstrip()
        key, _, value = line.partition("=")
        key = key.strip()
        if not key or any(ch.isspace() for ch in key):
            raise MalformedConfig(f"config {path}: line {number}: the name before '=' is not a variable name")
        out[key] = value.strip()
    return out


def config_file_path(config_file: str | None, env: Mapping[str, str]) -> str | None:
    """The settings file a command reads: its `--config`, else TAGURU_CONFIG, else none."""
    return config_file or env.get("TAGURU_CONFIG") or None


def with_config_file(env: Mapping[str, str], config_file: str | None) -> dict[str, str]:
    """`env` over the settings file (`config_file_path`): a variable set in `env` wins. OSError or
    UnicodeDecodeError when the file cannot be read."""
    merged = dict(env)
    path = config_file_path(config_file, merged)
    if not path:
        return merged
    values = read_config_file(path)
    values.update(merged)
    return values
