"""The HTTP connection handler: requests aiohttp cannot parse still get the error envelope, a log line and a metric."""

from __future__ import annotations

import asyncio
import errno
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from taguru_server.server.errors import HttpError, error_response
from taguru_server.server.routing import UNMATCHED
from taguru_server.server.state import METRICS_KEY, SETTINGS_KEY
from taguru_server.store.errors import Code

log = structlog.get_logger("taguru.http")

TOO_LONG = "a request line or header exceeds 8190 bytes"
UNPARSABLE = "the request is not valid HTTP/1.1 (request line or headers)"
INTERNAL = "internal error; the server log has details"


class EnvelopeRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering parser failures with the JSON envelope instead of echoed request text.

    It also closes a connection whose request headers are not complete within TAGURU_HEADER_TIMEOUT_SECS of their
    first byte (or of the connection opening), so clients trickling header bytes cannot hold connections open.
    """

    __slots__ = ("_header_timer", "_header_timeout")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        app = getattr(self._manager, "taguru_app", None)
        self._header_timeout = float(app[SETTINGS_KEY].header_timeout_secs) if app is not None else 0.0
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count > before:
            self._cancel_header_timer()
        elif self._header_timer is None and not self._request_in_progress and not self._messages:
            self._arm_header_timer()  # the start of the next request's headers on a kept-alive connection

    def _arm_header_timer(self) -> None:
        if self._header_timeout > 0:
            self._header_timer = self._loop.call_later(self._header_timeout, self._headers_overdue, self._request_count)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_overdue(self, count_when_armed: int) -> None:
        self._header_timer = None
        if self._request_count == count_when_armed and not self._request_in_progress and self.transport is not None:
            log.info("connection.header_timeout", timeout_secs=self._header_timeout)
            self.force_close()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The envelope for a request that never reached the app; nothing of the request is logged or echoed."""
        started = time.perf_counter()
        if request.writer.output_size > 0:
            raise ConnectionError("the response was already being sent")
        if status >= 500:
            err = HttpError(Code.INTERNAL, INTERNAL, status=status)
        else:
            err = HttpError(
                Code.MALFORMED_REQUEST, TOO_LONG if isinstance(exc, LineTooLong) else UNPARSABLE, status=status
            )
        response = error_response(err, started)
        response.headers["X-Request-Id"] = uuid.uuid4().hex
        response.force_close()
        app = getattr(self._manager, "taguru_app", None)
        if app is not None:
            metrics = app[METRICS_KEY]
            metrics.requests.labels("-", UNMATCHED, str(status)).inc()
            metrics.duration.labels("-", UNMATCHED).observe(0.0)
        log.info(
            "request.finished",
            method="-",
            route=UNMATCHED,
            status=status,
            duration_ms=0.0,
            error_type=type(exc).__name__ if exc is not None else None,
        )
        return response


class EnvelopeServer(web.Server):
    """aiohttp's connection factory, making `EnvelopeRequestHandler`s."""

    def __call__(self) -> RequestHandler:
        return EnvelopeRequestHandler(self, loop=self._loop, **self._kwargs)


class AppRunner(web.AppRunner):
    """An `aiohttp.web.AppRunner` whose connections answer parser failures through the app's envelope and metrics."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = EnvelopeServer  # same layout; only the handler class it makes differs
        server.taguru_app = self.app  # type: ignore[attr-defined]
        return server


RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_LOG_INTERVAL_SECS = 10.0


def accept_error_handler(
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """A loop exception handler logging out-of-resource accept errors as one event per interval, not tracebacks."""
    last = [float("-inf")]
    suppressed = [0]

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not (isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS):
            loop.default_exception_handler(context)
            return
        now = clock()
        if now - last[0] < ACCEPT_LOG_INTERVAL_SECS:
            suppressed[0] += 1
            return
        log.error(
            "server.accept_failed",
            errno=errno.errorcode.get(exc.errno or 0, str(exc.errno)),
            suppressed_since_last=suppressed[0],
        )
        last[0] = now
        suppressed[0] = 0

    return handle
