"""How a `taguru` command ends when the user, not the program, stops it: a closed pipe or Ctrl-C.

`taguru export … | head` closes stdout under the command: that is a normal end, so it exits
quietly with 141 (128 + SIGPIPE, what a shell reports for a program SIGPIPE ended), and stdout is
pointed at /dev/null so the interpreter's own flush at exit cannot fail a second time. SIGPIPE
itself stays ignored (Python's default), so a socket whose peer went away is an error the command
reports, never a silent death. Ctrl-C ends with one line and 130 (128 + SIGINT).
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable

EXIT_PIPE = 128 + 13
EXIT_INTERRUPTED = 128 + 2


def _stdout_broken() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))
    except (OSError, ValueError):
        return True


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def guarded(run: Callable[[], int]) -> int:
    """run(), turning a closed stdout into a quiet 141 and Ctrl-C into one line and 130."""
    try:
        code = run()
        sys.stdout.flush()
        return code
    except BrokenPipeError as exc:
        if _stdout_broken():
            _silence_stdout()
            return EXIT_PIPE
        print(f"taguru: a connection closed under the command: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        after_echo = "\n" if sys.stderr.isatty() else ""  # past the terminal's ^C
        print(f"{after_echo}taguru: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
