"""The optional HTTP reranker: Cohere/Jina/TEI-style protocol, bounded retries, a circuit breaker.

The provider only ever returns a verdict (a permutation, or a reason token); it never raises
into the request. Candidate text goes to the provider and nowhere else.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import attrs
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from taguru_server.server.providers.retry import (
    AttemptFailed,
    Breaker,
    RetryPolicy,
    breaker_families,
    with_retries,
)
from taguru_server.server.variables import default_int
from taguru_server.stages.model import RerankVerdict

log = structlog.get_logger("taguru.rerank")

OUTCOMES = (
    "ok",
    "not_configured",
    "model_mismatch",
    "empty_pool",
    "invalid_permutation",
    "circuit_open",
    "timeout",
    "provider_error",
)
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
RETRY_PAUSE_SECS = 0.1
BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
RETRY = RetryPolicy(attempts=2, pause_secs=RETRY_PAUSE_SECS)


@attrs.frozen
class RerankSettings:
    url: str
    model: str
    api_key: str | None
    timeout_secs: int


def rerank_settings(env: Mapping[str, str]) -> RerankSettings | None:
    """Read TAGURU_RERANK_*; both URL and MODEL are needed, else it stays off (with a warning)."""
    url = env.get("TAGURU_RERANK_URL", "").strip()
    model = env.get("TAGURU_RERANK_MODEL", "").strip()
    if not url or not model:
        if url or model:
            log.warning(
                f"TAGURU_RERANK_URL and TAGURU_RERANK_MODEL must both be set (url set: {str(bool(url)).lower()}, "
                f"model set: {str(bool(model)).lower()}); the reranker stays off"
            )
        return None
    raw = env.get("TAGURU_RERANK_TIMEOUT_SECS", "").strip()
    timeout = default_int("TAGURU_RERANK_TIMEOUT_SECS")
    if raw:
        try:
            timeout = max(1, int(raw))
        except ValueError:
            log.warning("TAGURU_RERANK_TIMEOUT_SECS is not an integer; using the default of 5 seconds")
    key = env.get("TAGURU_RERANK_API_KEY")
    log.info("evidence reranker enabled", model=model)
    return RerankSettings(url, model, key, timeout)


class RerankMetrics:
    """The taguru_rerank_* families (breaker ones only when a provider is configured)."""

    def __init__(self, registry: CollectorRegistry, configured: bool) -> None:
        self.duration = Histogram(
            "taguru_rerank_duration_seconds",
            "Reranker decision time per requested rerank",
            buckets=BUCKETS,
            registry=registry,
        )
        self.outcomes = Counter(
            "taguru_rerank_outcomes", "Reranker outcomes per requested rerank", ["outcome"], registry=registry
        )
        for outcome in OUTCOMES:
            self.outcomes.labels(outcome)
        self.configured = configured
        self.breaker = breaker_families("taguru_rerank", "Calls refused while open", registry) if configured else None

    def observe(self, outcome: str, seconds: float) -> None:
        self.duration.observe(seconds)
        self.outcomes.labels(outcome).inc()


def _log_retry(attempt: int, failure: AttemptFailed) -> None:
    log.warning("transient reranker failure; retrying", attempt=attempt, reason=failure.reason)


class HttpReranker:
    """A reorder-only provider over HTTP; one shared aiohttp session; never raises."""

    configured = True

    def __init__(
        self,
        settings: RerankSettings,
        session: aiohttp.ClientSession,
        breaker: Breaker,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.model: str | None = settings.model
        self.session = session
        self.breaker = breaker
        self.sleep = sleep

    async def rerank(self, query: str, documents: list[str], remaining: Callable[[], float | None]) -> RerankVerdict:
        body = json.dumps(
            {"model": self.settings.model, "query": query, "documents": documents, "top_n": len(documents)},
            ensure_ascii=False,
        ).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.settings.api_key is not None:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"

        async def attempt(_n: int) -> list[int] | RerankVerdict:
            left = remaining()
            if left is not None and left <= 0:
                return RerankVerdict(None, "timeout")
            if not self.breaker.allow():
                return RerankVerdict(None, "circuit_open")
            try:
                order = await self._attempt(body, headers, left)
            except AttemptFailed:
                self.breaker.failure()
                raise
            self.breaker.success()
            return order

        try:
            outcome = await with_retries(RETRY, attempt, remaining=remaining, sleep=self.sleep, on_retry=_log_retry)
        except AttemptFailed as failure:
            return RerankVerdict(None, failure.reason)
        if isinstance(outcome, RerankVerdict):
            return outcome
        n = len(documents)
        if len(outcome) != n or sorted(outcome) != list(range(n)):
            return RerankVerdict(None, "invalid_permutation")
        return RerankVerdict(tuple(outcome), None)

    async def _attempt(self, body: bytes, headers: dict[str, str], left: float | None) -> list[int]:
        timeout = float(self.settings.timeout_secs) if left is None else min(float(self.settings.timeout_secs), left)
        deadline_bound = left is not None and left <= self.settings.timeout_secs
        try:
            async with self.session.post(
                self.settings.url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
                allow_redirects=False,
            ) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise AttemptFailed("provider_error", True)
                if not 200 <= resp.status < 300:
                    raise AttemptFailed("provider_error", False)
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.content.iter_chunked(65536):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_RESPONSE_BYTES:
                        raise AttemptFailed("provider_error", False)
                raw = b"".join(chunks)
        except TimeoutError:
            raise AttemptFailed("timeout" if deadline_bound else "provider_error", not deadline_bound) from None
        except aiohttp.ClientError:
            raise AttemptFailed("provider_error", True) from None
        try:
            doc = json.loads(raw)
        except ValueError:
            raise AttemptFailed("provider_error", False) from None
        results = doc.get("results") if isinstance(doc, dict) else None
        if not isinstance(results, list):
            raise AttemptFailed("provider_error", False)
        order = []
        for entry in results:
            index = entry.get("index") if isinstance(entry, dict) else None
            if type(index) is not int or index < 0:
                raise AttemptFailed("provider_error", False)
            order.append(index)
        return order
