"""The one retry policy of the outbound provider clients: bounded attempts, a pause, a deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

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
