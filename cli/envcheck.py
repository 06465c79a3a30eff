"""A warning for a `TAGURU_*` variable nothing reads (a misspelling is otherwise silently ignored).

The known names are the registry's (`server/variables.py`), the one list of every variable the code
reads; the closest known name is offered with difflib.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import IO

from taguru_server.server.variables import PREFIX, REGISTRY

# names the test harness sets for itself; the service never reads them
_HARNESS = "TAGURU_TEST_"


def known_names() -> frozenset[str]:
    """Every registered TAGURU_* name."""
    return frozenset(v.name for v in REGISTRY if v.name.startswith(PREFIX))


def unknown(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """(name, the closest known name or None) for each TAGURU_* name that nothing reads."""
    candidates = [n for n in names if n.startswith(PREFIX) and not n.startswith(_HARNESS)]
    if not candidates:
        return []
    known = known_names()
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
