"""A one-line progress bar with count, rate and ETA for the command-line tools, drawn only on a terminal.

Off a terminal (a pipe, a file, a test) it writes nothing, so scripted runs keep clean output.
Redraws are throttled (at most ten a second); `close()` wipes the line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

BAR_WIDTH = 24
REDRAW_SECS = 0.1
LABEL_CHARS = 40


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _rate(per_sec: float) -> str:
    if per_sec >= 100:
        return f"{per_sec:,.0f}"
    return f"{per_sec:.1f}"


class Progress:
    """`name [#####.....] 120/500 24% 35.2 unit/s ETA 0:11 note` on a terminal; silent otherwise."""

    def __init__(
        self,
        name: str,
        total: int,
        stream: TextIO,
        *,
        unit: str = "items",
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.total = max(0, total)
        self.unit = unit
        self.stream = stream
        self.enabled = (hasattr(stream, "isatty") and stream.isatty()) if enabled is None else enabled
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.note = ""
        self._drawn = 0.0
        self._shown = False

    def line(self) -> str:
        """The bar as text (what `update` draws); with no total known, the count, rate and time so far."""
        elapsed = max(self.clock() - self.started, 1e-9)
        if self.total <= 0:
            so_far = _rate(self.done / elapsed)
            text = f"{self.name} {self.done} {self.unit} {so_far} {self.unit}/s in {_clock(elapsed)}"
            return text + (f" {self.note}" if self.note else "")
        total = max(self.total, self.done)
        share = self.done / total if total else 1.0
        filled = int(BAR_WIDTH * share)
        rate = self.done / elapsed
        if self.done >= total:
            eta = f"in {_clock(elapsed)}"
        elif rate > 0:
            eta = f"ETA {_clock((total - self.done) / rate)}"
        else:
            eta = "ETA --:--"
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        note = self.note if len(self.note) <= LABEL_CHARS else self.note[: LABEL_CHARS - 1] + "…"
        text = f"{self.name} [{bar}] {self.done}/{total} {share:4.0%} {_rate(rate)} {self.unit}/s {eta}"
        return text + (f" {note}" if note else "")

    def update(self, done: int | None = None, *, advance: int = 0, total: int | None = None, note: str = "") -> None:
        if done is not None:
            self.done = done
        self.done += advance
        if total is not None:
            self.total = total
        if note:
            self.note = note
        if not self.enabled:
            return
        now = self.clock()
        if self._shown and now - self._drawn < REDRAW_SECS and (self.total <= 0 or self.done < self.total):
            return
        self._drawn = now
        self._shown = True
        self.stream.write("\r\x1b[2K" + self.line())
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = False
