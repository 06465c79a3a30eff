"""A warning for a `TAGURU_*` variable nothing reads (a misspelling is otherwise silently ignored).

The known names are not kept as a second list beside the code that reads them: they are every
`TAGURU_…` name that appears in the installed packages' source, so a variable a module starts
reading is known the moment it is written there. The closest known name is offered with difflib.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO

PACKAGES = ("pipeline", "stages", "store", "server", "evaluate", "cli", "client")
PREFIX = "TAGURU_"
_NAME = re.compile(r"\bTAGURU_[A-Z0-9_]*[A-Z0-9]\b")
# names the test harness sets for itself; the service never reads them
_HARNESS = "TAGURU_TEST_"


@functools.cache
def known_names() -> frozenset[str]:
    """Every TAGURU_* name the installed packages' source mentions."""
    names: set[str] = set()
    for package in PACKAGES:
        spec = importlib.util.find_spec(f"taguru_server.{package}")
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for source in Path(folder).rglob("*.py"):
                try:
                    names.update(_NAME.findall(source.read_text(encoding="utf-8")))
                except (OSError, UnicodeDecodeError):
                    continue
    return frozenset(names)


def unknown(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """(name, the closest known name or None) for each TAGURU_* name that nothing reads."""
    candidates = [n for n in names if n.startswith(PREFIX) and not n.startswith(_HARNESS)]
    if not candidates:
        return []
    known = known_names()
    if not known:  # the sources are not where they should be: say nothing rather than something wrong
        return []
    out: list[tuple[str, str | None]] = []
    for name in sorted(candidates):
        if name in known:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        out.append((name, close[0] if close else None))
    return out


def warn_unknown(names: Iterable[str], stream: IO[str]) -> None:
    """One warning line per unknown TAGURU_* name, with a did-you-mean when one is close."""
    for name, close in unknown(names):
        hint = f" (did you mean {close}?)" if close else ""
        print(f"taguru: warning: {name} is not a taguru setting and is ignored{hint}", file=stream, flush=True)
