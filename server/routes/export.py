"""GET /contexts/{name}/export: the context as an import batch stream (NDJSON), streamed.

The request runs in two phases:

1. **Open (inside the request deadline).** In a worker thread, a read transaction starts on a
   connection of its own to the store file (`store.export`): that is the snapshot the whole stream
   is rendered from. Every refusal happens here, before a header is sent: 404 for a context the
   store does not hold (one created by a write that has not committed is not there yet), 409 for
   the reserved source ids, 500 for an unreadable store, 408 when the budget is already spent or
   runs out while opening. A refusal is the ordinary error envelope.
2. **Stream (after the middlewares returned).** The handler returns an unprepared
   `ExportResponse`; aiohttp prepares it and calls `write_eof`, which renders the snapshot a chunk
   at a time in a worker thread and writes each chunk as it comes (chunked transfer encoding).
   This phase is deliberately not subject to TAGURU_REQUEST_TIMEOUT_SECS: once the 200 is sent the
   stream is completed, never cut at a deadline, so a client gets either a complete stream or an
   error envelope. What bounds it instead is the client: a chunk the client does not take within
   the request timeout closes the connection (a reader that stalls must not hold the snapshot, and
   with it the WAL, forever). Such a cut, or a store failure mid-stream, ends the connection
   without the closing chunk, which every HTTP client reports as an incomplete body.

Memory stays bounded by one chunk (plus SQLite's own page cache and sorter); the event loop only
awaits. Export takes no heavy-operation permit, as in the reference.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.web_request import BaseRequest

from taguru_server.server.call import Call, Route
from taguru_server.server.routes.common import before_start
from taguru_server.store.errors import ApiError, Code, budget_spent
from taguru_server.store.persist.registry import Registry
from taguru_server.store.persist.sqlite import SqlitePersistence
from taguru_server.store.transfer.export import ContextExport

NDJSON = "application/x-ndjson"


def store_file(registry: Registry) -> Path | str:
    """What the export reads: the SQLite file, or the shared PostgreSQL store's URL."""
    persistence = registry.persistence
    if isinstance(persistence, SqlitePersistence):
        return persistence.file
    url = getattr(persistence, "url", None)
    if not isinstance(url, str):
        raise ApiError(Code.INTERNAL, "export cannot read this server's store")
    return url


class ExportResponse(web.StreamResponse):
    """The 200 stream of one opened export, written when aiohttp finishes the response."""

    def __init__(self, export: ContextExport, stall_secs: float) -> None:
        super().__init__(status=200)
        self.content_type = NDJSON
        self.charset = "utf-8"
        self._export = export
        self._stall_secs = stall_secs
        self._request: BaseRequest | None = None
        self._streamed = False
        # a response that is never sent (refused after the handler, client gone) still ends its snapshot
        weakref.finalize(self, export.close)

    async def prepare(self, request: BaseRequest) -> AbstractStreamWriter | None:
        self._request = request
        try:
            return await super().prepare(request)
        except BaseException:
            self._export.close()
            raise

    async def write_eof(self, data: bytes = b"") -> None:
        if not self._streamed:
            self._streamed = True
            if self._request is not None and self._request.method == "HEAD":  # the GET's headers, no body
                await asyncio.to_thread(self._export.close)
            else:
                await self._stream()
        await super().write_eof(data)

    async def collect(self, limit: int | None = None) -> bytes:
        """The stream's bytes, rendered in a worker thread a chunk at a time, for a caller in process (an
        MCP tool); with `limit`, it stops at the first chunk past it. The snapshot is closed either way."""
        self._streamed = True
        chunks = self._export.chunks()
        parts: list[bytes] = []
        size = 0
        try:
            while limit is None or size <= limit:
                chunk = await asyncio.to_thread(_next, chunks)
                if chunk is None:
                    break
                parts.append(chunk)
                size += len(chunk)
        finally:
            await asyncio.to_thread(_finish, chunks, self._export)
        return b"".join(parts)

    async def _stream(self) -> None:
        chunks = self._export.chunks()
        try:
            while True:
                chunk = await asyncio.to_thread(_next, chunks)
                if chunk is None:
                    break
                try:
                    await asyncio.wait_for(self.write(chunk), self._stall_secs)
                except TimeoutError:
                    transport = self._request.transport if self._request is not None else None
                    if transport is not None:
                        transport.close()
                    raise ConnectionResetError("the client stopped reading the export") from None
        finally:
            await asyncio.to_thread(_finish, chunks, self._export)


def _next(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)


def _finish(chunks: Any, export: ContextExport) -> None:
    chunks.close()
    export.close()


async def _open(db_file: Path | str, name: str) -> ContextExport:
    """Open in a worker thread; if the request is cancelled meanwhile, the late result is closed."""
    task = asyncio.ensure_future(asyncio.to_thread(ContextExport.open, db_file, name))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(lambda t: t.result().close() if not t.cancelled() and t.exception() is None else None)
        raise


async def export_context(call: Call) -> web.StreamResponse:
    """GET /contexts/{name}/export (read): refusals as envelopes, then the stream (see the module docstring)."""
    assert call.name is not None
    before_start(call)
    export = await _open(store_file(call.registry), call.name)
    if time.monotonic() > call.deadline:
        export.close()
        raise budget_spent()
    return ExportResponse(export, float(call.settings.request_timeout_secs))


ROUTES: list[Route] = [
    Route("GET", "/contexts/{name}/export", export_context, "read", response="ndjson"),
]
