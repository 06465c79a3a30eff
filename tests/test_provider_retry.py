"""The one retry policy of the outbound provider clients."""

from __future__ import annotations

import pytest

from taguru_server.server.providers.retry import AttemptFailed, RetryPolicy, with_retries


class Script:
    """Attempts that fail as scripted, then answer; pauses are recorded instead of slept."""

    def __init__(self, *failures: AttemptFailed) -> None:
        self.failures = list(failures)
        self.attempts: list[int] = []
        self.pauses: list[float] = []

    async def attempt(self, n: int) -> str:
        self.attempts.append(n)
        if self.failures:
            raise self.failures.pop(0)
        return "answer"

    async def sleep(self, secs: float) -> None:
        self.pauses.append(secs)


@pytest.mark.anyio
async def test_retryable_failures_are_retried_with_backoff() -> None:
    script = Script(AttemptFailed("a", True), AttemptFailed("b", True))
    policy = RetryPolicy(3, 0.5, backoff=2.0)
    assert await with_retries(policy, script.attempt, sleep=script.sleep) == "answer"
    assert script.attempts == [1, 2, 3] and script.pauses == [0.5, 1.0]


@pytest.mark.anyio
async def test_the_last_failure_propagates() -> None:
    script = Script(AttemptFailed("a", True), AttemptFailed("b", True))
    with pytest.raises(AttemptFailed, match="b"):
        await with_retries(RetryPolicy(2, 0.1), script.attempt, sleep=script.sleep)
    assert script.attempts == [1, 2] and script.pauses == [0.1]


@pytest.mark.anyio
async def test_a_final_failure_is_not_retried() -> None:
    script = Script(AttemptFailed("refused", False))
    with pytest.raises(AttemptFailed, match="refused"):
        await with_retries(RetryPolicy(3, 0.1), script.attempt, sleep=script.sleep)
    assert script.attempts == [1] and script.pauses == []


@pytest.mark.anyio
async def test_the_deadline_bounds_retries_and_pauses() -> None:
    script = Script(AttemptFailed("a", True))
    assert await with_retries(RetryPolicy(2, 0.1), script.attempt, remaining=lambda: 0.03, sleep=script.sleep)
    assert script.pauses == [0.03]
    script = Script(AttemptFailed("a", True))
    with pytest.raises(AttemptFailed):
        await with_retries(RetryPolicy(2, 0.1), script.attempt, remaining=lambda: 0.0, sleep=script.sleep)
    assert script.attempts == [1] and script.pauses == []


@pytest.mark.anyio
async def test_on_retry_sees_each_retried_failure() -> None:
    seen: list[tuple[int, str]] = []
    script = Script(AttemptFailed("a", True))
    await with_retries(
        RetryPolicy(2, 0.0), script.attempt, sleep=script.sleep, on_retry=lambda n, f: seen.append((n, f.reason))
    )
    assert seen == [(1, "a")]
