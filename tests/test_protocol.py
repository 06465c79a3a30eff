"""Out-of-resource accept errors are one rate-limited log event, other loop errors keep the default handling."""

from __future__ import annotations

import errno
from typing import Any

from structlog.testing import capture_logs

from taguru_server.server.protocol import ACCEPT_LOG_INTERVAL_SECS, accept_error_handler


class Loop:
    def __init__(self) -> None:
        self.defaulted: list[dict[str, Any]] = []

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.defaulted.append(context)


def test_emfile_on_accept_is_logged_once_per_interval() -> None:
    now = [100.0]
    handle = accept_error_handler(lambda: now[0])
    loop = Loop()
    emfile = {"message": "socket.accept() out of system resource", "exception": OSError(errno.EMFILE, "x")}
    with capture_logs() as logs:
        for _ in range(50):
            handle(loop, emfile)  # type: ignore[arg-type]
        now[0] += ACCEPT_LOG_INTERVAL_SECS
        handle(loop, emfile)  # type: ignore[arg-type]
    events = [e for e in logs if e["event"] == "server.accept_failed"]
    assert [(e["errno"], e["suppressed_since_last"]) for e in events] == [("EMFILE", 0), ("EMFILE", 49)]
    assert loop.defaulted == []


def test_other_loop_errors_keep_the_default_handler() -> None:
    handle = accept_error_handler()
    loop = Loop()
    other = {"message": "boom", "exception": ValueError("x")}
    handle(loop, other)  # type: ignore[arg-type]
    handle(loop, {"message": "no exception"})  # type: ignore[arg-type]
    assert loop.defaulted == [other, {"message": "no exception"}]
