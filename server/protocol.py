"""The HTTP connection handler: requests aiohttp cannot parse still get the error envelope, a log line and a metric."""

from __future__ import annotations

import time
import uuid

import structlog
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from taguru_server.server.errors import HttpError, error_response
from taguru_server.server.routing import UNMATCHED
from taguru_server.server.state import METRICS_KEY

log = structlog.get_logger("taguru.http")

TOO_LONG = "a request line or header exceeds 8190 bytes"
UNPARSABLE = "the request is not valid HTTP/1.1 (request line or headers)"
INTERNAL = "internal error; the server log has details"


class EnvelopeRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering parser failures with the JSON envelope instead of echoed request text."""

    __slots__ = ()

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
            err = HttpError("internal", INTERNAL, status=status)
        else:
            err = HttpError(
                "malformed_request", TOO_LONG if isinstance(exc, LineTooLong) else UNPARSABLE, status=status
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
