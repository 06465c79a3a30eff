"""The KEY=VALUE settings file shared by the server and its command-line clients."""

from __future__ import annotations

import os
from pathlib import Path


def read_config_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and # comments are skipped."""
    out: dict[str, str] = {}
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out
