"""`--workers N` with one load: the supervisor loads the contexts, then forks the workers, which share them.

Each worker used to load every context itself, so N workers held N copies. Now the supervisor
loads the contexts `TAGURU_PRELOAD` names once (their BM25 indexes mapped from their files),
freezes them out of the garbage collector, closes its store connection, and forks the workers:
each starts with the contexts in memory (copy-on-write: a page is copied only when a worker
writes to it, and the frozen objects are never re-scanned by a collection), opens its own store
connection, and applies what the change log holds beyond the position the supervisor read at
(`Registry.adopt`), so a worker started later (a replacement for one that died) is current too.

While the supervisor loads, it answers on the address itself: `/live` 200, `/ready` and every
other request 503 `unhealthy` ("loading contexts into memory", `Retry-After: 1`), so probes see
the same answers as a single process's. It stops answering before the first fork (no thread
crosses a fork).
"""

from __future__ import annotations

import gc
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from taguru_server.server.errors import error_body
from taguru_server.store.errors import ApiError, Code
from taguru_server.store.wire import dumps_bytes

log = structlog.get_logger("taguru.workers")

# (context, change-log position read before it) the supervisor loaded; a forked worker adopts them
INHERITED: list[tuple[Any, int]] = []


class _Progress:
    """How far the start is (what a starting `/ready` says): the store check, then the supervisor's load."""

    loaded = 0
    expected = 0
    waiting: str | None = None  # before the load: what the start waits for

    def message(self) -> str:
        if self.waiting is not None:
            return self.waiting
        return f"loading contexts into memory: {self.loaded} loaded, {self.expected} to preload"

    def report_check(self, event: str, **fields: Any) -> None:
        """`open_registry`'s report: logged, and a full-file check is what `/ready` says it waits for."""
        from taguru_server.server.app import report_check

        report_check(event, **fields)
        if event == "store.checking":
            self.waiting = "checking the store before it opens (a full-file integrity check)"
        elif event in ("store.checked", "store.check_skipped"):
            self.waiting = None


class _Probes(ThreadingHTTPServer):
    daemon_threads = True
    progress = _Progress()


def _probes(host: str, port: int, progress: _Progress) -> _Probes | None:
    """A server for the start-up answers on the workers' address (bound as a worker binds it), or None."""
    try:
        if not host and socket.has_dualstack_ipv6():
            sock = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, reuse_port=True)
        else:
            family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
            sock = socket.create_server((host, port), family=family, reuse_port=True)
    except OSError as exc:  # the workers will bind it; meanwhile nobody answers
        log.warning("startup_probes.unavailable", error_type=type(exc).__name__)
        return None
    server = _Probes((host, port), _Answer, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_address = sock.getsockname()
    server.progress = progress
    return server


class _Answer(BaseHTTPRequestHandler):
    server: _Probes
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        started = time.perf_counter()
        if self.path.split("?", 1)[0] == "/live":
            self._send(200, b"ok", "text/plain; charset=utf-8")
            return
        message = self.server.progress.message()
        body = dumps_bytes(error_body(ApiError(Code.UNHEALTHY, message), time.perf_counter() - started))
        self._send(503, body, "application/json; charset=utf-8", {"Retry-After": "1"})  # as a loading worker says

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return  # the start-up answers are not logged one by one


def load_before_fork(settings: Any, host: str, port: int) -> None:
    """Load the contexts the preload policy names into INHERITED, answering probes meanwhile."""
    from taguru_server.server.app import open_registry
    from taguru_server.server.metrics import precompute_sums
    from taguru_server.server.preload import log_loaded, wanted_names
    from taguru_server.store.index.index_file import release_mapped

    counts = _Progress()
    probes = _probes(host, port, counts)
    serving = None
    if probes is not None:
        serving = threading.Thread(target=probes.serve_forever, name="taguru-start-probes", daemon=True)
        serving.start()
    try:
        # `serve` checked the store under the data-dir lock just before
        registry = open_registry(settings, checked=True, report=counts.report_check)
        try:
            names = wanted_names(registry, settings.preload, registry.unloaded_names())
            counts.expected = len(names)
            log.info("contexts.loading", contexts=len(names), preload=settings.preload, shared_by_workers=True)
            began = time.perf_counter()
            for name in names:
                started = time.perf_counter()
                try:
                    read = registry.read_context(name)
                except Exception as exc:  # the workers load it themselves (and report an unreadable store)
                    log.error("context.load_failed", context=name, error_type=type(exc).__name__)
                    continue
                if read is None:
                    continue
                precompute_sums(read[0])  # what each worker's metrics would otherwise read (and copy) itself
                INHERITED.append(read)
                counts.loaded += 1
                log_loaded(log, read[0], started)
            took = round((time.perf_counter() - began) * 1000, 1)
            log.info("contexts.ready", contexts=len(INHERITED), duration_ms=took)
            release_mapped()  # the supervisor serves nothing: the workers fault in the pages they read
        finally:
            registry.close()
    finally:
        if probes is not None and serving is not None:
            probes.shutdown()
            probes.server_close()
            serving.join()
    gc.freeze()  # the workers inherit these objects: no collection of theirs writes to (copies) their pages


def adopt_inherited(registry: Any) -> None:
    """In a forked worker: hold the contexts the supervisor loaded, brought up to date from the change log."""
    worker_log = structlog.get_logger("taguru.preload")  # this process's logging (the module's was the supervisor's)
    for ctx, seq in INHERITED:
        started = time.perf_counter()
        if registry.adopt(ctx, seq):
            worker_log.info(
                "context.inherited",
                context=ctx.name,
                duration_ms=round((time.perf_counter() - started) * 1000, 1),
                from_change=seq,
            )
