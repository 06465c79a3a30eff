"""The one retry policy of the outbound provider clients: bounded attempts, a pause, a deadline, a breaker."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge

T = TypeVar("T")

Remaining = Callable[[], float | None]
Sleep = Callable[[float], Awaitable[Any]]


class AttemptFailed(Exception):
    """One failed attempt; `reason` is a short token or text without request content."""

    def __init__(self, reason: str, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


@attrs.frozen
class RetryPolicy:
    """How many attempts, and the pause after attempt n: `pause_secs * backoff ** (n - 1)`."""

    attempts: int
    pause_secs: float
    backoff: float = 1.0

    def pause_after(self, attempt: int) -> float:
        """The pause before the attempt that follows attempt `attempt` (counted from 1)."""
        return self.pause_secs * self.backoff ** (attempt - 1)


def _no_deadline() -> float | None:
    return None


async def with_retries(
    policy: RetryPolicy,
    attempt: Callable[[int], Awaitable[T]],
    *,
    remaining: Remaining = _no_deadline,
    sleep: Sleep = asyncio.sleep,
    on_retry: Callable[[int, AttemptFailed], None] | None = None,
) -> T:
    """Run `attempt(1)`, `attempt(2)`, … until one returns; AttemptFailed from the last one propagates.

    Only an AttemptFailed marked retryable is retried, and only while attempts are left and the
    deadline (`remaining()` seconds, None for none) has not passed; a pause never outlasts it.
    """
    n = 1
    while True:
        try:
            return await attempt(n)
        except AttemptFailed as failure:
            left = remaining()
            if n >= policy.attempts or not failure.retryable or (left is not None and left <= 0):
                raise
            if on_retry is not None:
                on_retry(n, failure)
            pause = policy.pause_after(n)
            await sleep(pause if left is None else min(pause, left))
            n += 1


FAILURE_THRESHOLD = 3
COOLDOWN_SECS = 30.0
CLOSED, OPEN, HALF_OPEN = 0, 1, 2


@attrs.frozen
class BreakerFamilies:
    """The breaker's metric families of one configured provider (`<prefix>_breaker_*`)."""

    state: Gauge
    failures: Gauge
    opened: Counter
    short_circuits: Counter


def breaker_families(prefix: str, short_circuit_help: str, registry: CollectorRegistry) -> BreakerFamilies:
    """Register a provider's breaker families: its state, failures toward opening, openings and short circuits.

    Each worker of `serve --workers N` has its own breaker: a scrape shows the worst (`livemax`)."""
    return BreakerFamilies(
        Gauge(
            f"{prefix}_breaker_state", "0 closed, 1 open, 2 half-open", registry=registry, multiprocess_mode="livemax"
        ),
        Gauge(
            f"{prefix}_breaker_consecutive_failures",
            "Failures toward opening",
            registry=registry,
            multiprocess_mode="livemax",
        ),
        Counter(f"{prefix}_breaker_opened", "Breaker openings", registry=registry),
        Counter(f"{prefix}_breaker_short_circuits", short_circuit_help, registry=registry),
    )


class BreakerMetrics(Protocol):
    """A provider's metrics: the breaker families are there only when that provider is configured."""

    breaker: BreakerFamilies | None


@attrs.frozen
class Refusal:
    """Why the breaker keeps an attempt off the network: `open` (with whole seconds left) or `probing`."""

    kind: str
    seconds_left: int = 0


class Breaker:
    """Opens after 3 consecutive failed attempts; 30 s cooldown; one half-open probe at a time.

    The state is only touched between awaits (never across a provider round trip), so one
    event loop needs no lock.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        metrics: BreakerMetrics | None = None,
        threshold: int = FAILURE_THRESHOLD,
        cooldown: float = COOLDOWN_SECS,
    ) -> None:
        self.clock = clock
        self.metrics = metrics
        self.threshold = threshold
        self.cooldown = cooldown
        self.state = CLOSED
        self.failures = 0
        self.opened_at = 0.0
        self.probe_started: float | None = None
        self._publish()

    def allow(self) -> bool:
        """May an attempt go out now? (A refusal counts as a short circuit.)"""
        return self.refusal(claim=True) is None

    def refusal(self, claim: bool = True) -> Refusal | None:
        """None when an attempt may go out now, else why not (counted as a short circuit).

        `claim=False` is the pre-flight check: it answers whether an attempt would be admitted
        without taking the half-open probe slot.
        """
        now = self.clock()
        if self.state == CLOSED:
            return None
        if self.state == OPEN and now - self.opened_at >= self.cooldown:
            if not claim:
                return None
            self.state = HALF_OPEN
            self.probe_started = None
        if self.state == HALF_OPEN and (self.probe_started is None or now - self.probe_started >= self.cooldown):
            if claim:
                self.probe_started = now
                self._publish()
            return None
        if self.metrics is not None and self.metrics.breaker is not None:
            self.metrics.breaker.short_circuits.inc()
        self._publish()
        if self.state == OPEN:
            left = self.cooldown - (now - self.opened_at)
            return Refusal("open", max(1, math.floor(left)))
        return Refusal("probing")

    def success(self) -> None:
        self.state = CLOSED
        self.failures = 0
        self.probe_started = None
        self._publish()

    def failure(self) -> None:
        if self.state == HALF_OPEN:
            self._open()
            return
        self.failures += 1
        if self.failures >= self.threshold:
            self._open()
        self._publish()

    def _open(self) -> None:
        self.state = OPEN
        self.failures = self.threshold
        self.opened_at = self.clock()
        self.probe_started = None
        if self.metrics is not None and self.metrics.breaker is not None:
            self.metrics.breaker.opened.inc()
        self._publish()

    def _publish(self) -> None:
        if self.metrics is not None and self.metrics.breaker is not None:
            self.metrics.breaker.state.set(self.state)
            self.metrics.breaker.failures.set(self.failures)
