"""structlog set-up: one JSON object per line, or a console renderer (TAGURU_LOG_FORMAT, TAGURU_LOG_LEVEL).

Under `json` every line the process writes to stderr is one JSON object: structlog events, the
standard library's loggers (aiohttp, asyncio), Python warnings and uncaught exceptions all go
through the same renderer. Exceptions are logged by type and frames only, never their messages
(which may carry request data). The one plain line is `listening on HOST:PORT` on stdout, which
launchers (the official SDK's test harness among them) read.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
import threading
import traceback
from collections.abc import Mapping, MutableMapping
from types import TracebackType
from typing import Any

import attrs
import structlog

LOG_FORMATS = ("json", "console")
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# the fields a request's handlers add to its one `request.finished` line (a dict shared by the
# request's tasks: the deadline's task sees the same object the outer middleware created)
_REQUEST_NOTES: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("request_notes", default=None)


def start_request_notes() -> dict[str, Any]:
    """A fresh set of notes for the current request (the middleware logs them when it ends)."""
    notes: dict[str, Any] = {}
    _REQUEST_NOTES.set(notes)
    return notes


def note_request(**fields: Any) -> None:
    """Add fields to the current request's `request.finished` line (no-op outside a request)."""
    notes = _REQUEST_NOTES.get()
    if notes is not None:
        notes.update(fields)


def default_format(stream: Any = None) -> str:
    """`console` on a terminal, `json` otherwise."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def parse_log_format(raw: str | None) -> str | None:
    """A TAGURU_LOG_FORMAT value: `json` or `console` (any case); None when unset; ValueError otherwise."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip().lower()
    if text not in LOG_FORMATS:
        raise ValueError("TAGURU_LOG_FORMAT must be 'json' or 'console'")
    return text


def parse_log_level(raw: str | None) -> str | None:
    """A TAGURU_LOG_LEVEL value: debug, info, warning or error (any case); None when unset; ValueError otherwise."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip().lower()
    if text == "warn":
        text = "warning"
    if text not in LOG_LEVELS:
        raise ValueError("TAGURU_LOG_LEVEL must be one of debug, info, warning, error")
    return text


@attrs.frozen
class LogSettings:
    """The log form and level (TAGURU_LOG_FORMAT, TAGURU_LOG_LEVEL); None: the default (json unless stderr
    is a terminal; info)."""

    format: str | None = None
    level: str | None = None


def lenient_log_settings(env: Mapping[str, str]) -> LogSettings:
    """The variables as far as they parse (before the settings are read; a bad value is refused there)."""
    try:
        fmt = parse_log_format(env.get("TAGURU_LOG_FORMAT"))
    except ValueError:
        fmt = None
    try:
        level = parse_log_level(env.get("TAGURU_LOG_LEVEL"))
    except ValueError:
        level = None
    return LogSettings(fmt, level)


def _add_worker_pid(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event["worker_pid"] = os.getpid()
    return event


def _frames(tb: TracebackType | None) -> list[str]:
    return [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}:{f.name}" for f in traceback.extract_tb(tb)][-8:]


def _exc_by_type(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Replace `exc_info` by the exception's type and frames: its message may carry request data."""
    info = event.pop("exc_info", None)
    if info is True:
        info = sys.exc_info()
    elif isinstance(info, BaseException):
        info = (type(info), info, info.__traceback__)
    if isinstance(info, tuple) and info[0] is not None:
        event["error_type"] = info[0].__name__
        event["frames"] = _frames(info[2])
    return event


def _stdlib_message(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A standard-library record names its logger."""
    record = event.get("_record")
    if record is not None:
        event["logger"] = record.name
    return event


def _renderer(fmt: str) -> structlog.typing.Processor:
    if fmt == "console":
        return structlog.dev.ConsoleRenderer()
    return structlog.processors.JSONRenderer()


def _excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    structlog.get_logger("taguru.process").critical(
        "process.uncaught_exception", error_type=kind.__name__, frames=_frames(tb)
    )


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    structlog.get_logger("taguru.process").error(
        "thread.uncaught_exception",
        thread=args.thread.name if args.thread is not None else None,
        error_type=args.exc_type.__name__,
        frames=_frames(args.exc_traceback),
    )


def _route_stdlib(level: int, fmt: str, shared: list[structlog.typing.Processor]) -> None:
    """The standard library's loggers (aiohttp, asyncio, py.warnings) through the same renderer, on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, _stdlib_message, _exc_by_type],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _renderer(fmt)],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook


def configure_logging(
    level: int | str | None = None,
    worker: bool = False,
    fmt: str | None = None,
    logs: LogSettings | None = None,
    final: bool = True,
) -> None:
    """Configure structlog (and the standard library's logging) for the process.

    `fmt`/`level`, when given, win; left None they come from `logs` (the settings' logging part, or
    before the settings are read `lenient_log_settings` of the environment), then default to
    json-unless-a-TTY and info. Call with `final=False` to log the settings' own warnings before
    they are parsed, then once more with them.
    """
    logs = logs or LogSettings()
    fmt = fmt or logs.format or default_format()
    if isinstance(level, str):
        level = LOG_LEVELS[level]
    if level is None:
        level = LOG_LEVELS[logs.level] if logs.level else logging.INFO
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        *([_add_worker_pid] if worker else []),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, _exc_by_type, _renderer(fmt)],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # one write per line (print() writes the line and its newline separately, and stderr to a file is
        # write-through: lines of processes sharing it, workers above all, could interleave)
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=final,
    )
    _route_stdlib(level, fmt, shared)
