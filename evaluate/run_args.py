"""A run's arguments and exit codes, the fatal error that ends it, its warnings and its progress line."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TextIO

from taguru_server.client.progress import Progress as ProgressBar
from taguru_server.evaluate.truncate import Limits

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_THRESHOLDS = 0, 1, 2, 3
DEFAULT_LIMIT = 10
RESOLVE_LIMIT = 5
SOURCES_PAGE = 1000
CONCURRENCY = 1  # cases run sequentially, in file order
REPORT_ONLY = "no --thresholds given — this run is report-only and always exits 0"


@dataclass
class RunArgs:
    eval: str
    context: str
    url: str | None = None
    config: str | None = None
    out: str = "evaluation.json"
    thresholds: str | None = None
    assembly: bool = False
    max_items: int | None = None
    max_bytes: int | None = None
    max_tokens: int | None = None
    rerank: str | None = None
    graph_passages: bool = False  # --graph-passages: evidence requests ask for the graph-passages mode

    @property
    def budget_given(self) -> bool:
        return self.max_items is not None or self.max_bytes is not None or self.max_tokens is not None

    @property
    def limits(self) -> Limits:
        return Limits(
            min(self.max_items or 40, 1000),
            min(self.max_bytes or 65536, 1048576),
            self.max_tokens or 4000,
        )


class Fatal(Exception):
    """Ends the run with an exit code after printing `taguru: evaluate: {msg}`."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def warn(msg: str, err: TextIO | None = None) -> None:
    """One `taguru: evaluate: …` line on `err` (stderr by default)."""
    print(f"taguru: evaluate: {msg}", file=err or sys.stderr, flush=True)


def elapsed_ms(started: float) -> int:
    """Whole milliseconds since `started` (a perf_counter reading)."""
    return int((time.perf_counter() - started) * 1000)


class Progress:
    """The case count, rate and ETA as a one-line bar on a TTY; silent otherwise."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.bar = ProgressBar("taguru evaluate", total, stream, unit="cases")
        self.enabled = self.bar.enabled

    @property
    def done(self) -> int:
        return self.bar.done

    def step(self, case_id: str) -> None:
        self.bar.update(advance=1, note=case_id)

    def close(self) -> None:
        self.bar.close()
