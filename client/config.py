"""The KEY=VALUE settings file shared by the server and its command-line clients, and the one rule that
merges it with the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def read_config_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and # comments are skipped."""
    return parse_config_text(Path(path).read_text(encoding="utf-8"))


def parse_config_text(text: str) -> dict[str, str]:
    """The variables of a settings file's text (`read_config_file`); a later duplicate wins."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
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
