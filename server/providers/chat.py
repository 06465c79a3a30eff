"""The optional OpenAI-compatible chat-completions client (TAGURU_EXTRACT_*), with bounded retries.

Messages go to the provider and nowhere else: failures name the provider URL, the HTTP status or
the failure kind, never the request's text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import aiohttp

from taguru_server.server.communities.summaries import chat_answer, chat_body
from taguru_server.server.providers.retry import AttemptFailed, RetryPolicy, with_retries
from taguru_server.server.variables import default_int

DEFAULT_EXTRACT_TIMEOUT_SECS = default_int("TAGURU_EXTRACT_TIMEOUT_SECS")
PROVIDER_ATTEMPTS = 3
BACKOFF_SECS = 0.5
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})  # and every 5xx


class ChatConfigError(Exception):
    """The TAGURU_EXTRACT_* settings cannot be acted on."""


class ChatFailed(Exception):
    """The chat provider gave no usable answer; the message says what failed and what to check."""


class ProviderConfig:
    """The optional OpenAI-compatible chat provider (TAGURU_EXTRACT_*)."""

    def __init__(self, url: str, model: str, api_key: str, timeout_secs: float) -> None:
        self.url = url
        self.model = model
        self.api_key = api_key
        self.timeout_secs = timeout_secs

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProviderConfig | None:
        """The configured provider, None when neither URL nor model is set; ChatConfigError when half set."""
        url = env.get("TAGURU_EXTRACT_URL", "").strip()
        model = env.get("TAGURU_EXTRACT_MODEL", "").strip()
        if not url and not model:
            return None
        if not url or not model:
            raise ChatConfigError(
                "TAGURU_EXTRACT_URL and TAGURU_EXTRACT_MODEL must be set together to use a chat "
                "provider for summaries (unset both for the extractive summaries)"
            )
        raw = env.get("TAGURU_EXTRACT_TIMEOUT_SECS", "").strip()
        try:
            timeout = float(raw) if raw else DEFAULT_EXTRACT_TIMEOUT_SECS
        except ValueError:
            raise ChatConfigError("TAGURU_EXTRACT_TIMEOUT_SECS must be a number of seconds") from None
        if not timeout > 0:
            raise ChatConfigError("TAGURU_EXTRACT_TIMEOUT_SECS must be positive")
        return cls(url, model, env.get("TAGURU_EXTRACT_API_KEY", "").strip(), timeout)


class ChatProvider:
    """Answers from an OpenAI-compatible /chat/completions endpoint, with a timeout and bounded retries."""

    def __init__(
        self, config: ProviderConfig, session: aiohttp.ClientSession, backoff_secs: float = BACKOFF_SECS
    ) -> None:
        self.config = config
        self.session = session
        self.backoff_secs = backoff_secs
        self.retry = RetryPolicy(PROVIDER_ATTEMPTS, backoff_secs, backoff=2.0)
        self.calls = 0

    async def complete(self, messages: list[dict[str, str]]) -> str:
        """The trimmed answer to `messages`; ChatFailed when the provider refuses or keeps failing."""
        cfg = self.config
        headers = {"Content-Type": "application/json"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        body = json.dumps(chat_body(cfg.model, messages), ensure_ascii=False).encode("utf-8")

        async def attempt(_n: int) -> str:
            self.calls += 1
            return await self._attempt(body, headers)

        try:
            return await with_retries(self.retry, attempt)
        except AttemptFailed as failure:
            raise ChatFailed(
                f"the summary provider at {cfg.url} failed {self.retry.attempts} times; last: {failure.reason}"
            ) from None

    async def _attempt(self, body: bytes, headers: dict[str, str]) -> str:
        cfg = self.config
        try:
            timeout = aiohttp.ClientTimeout(total=cfg.timeout_secs)
            async with self.session.post(cfg.url, data=body, headers=headers, timeout=timeout) as resp:
                if resp.status == 200:
                    try:
                        return chat_answer(await resp.json(content_type=None))
                    except ValueError as exc:
                        raise ChatFailed(f"the summary provider at {cfg.url} gave an unusable answer: {exc}") from None
                last = f"HTTP {resp.status}"
                if resp.status not in RETRYABLE_STATUSES and resp.status < 500:
                    raise ChatFailed(
                        f"the summary provider at {cfg.url} refused the request ({last}); check "
                        "TAGURU_EXTRACT_URL, TAGURU_EXTRACT_MODEL and TAGURU_EXTRACT_API_KEY"
                    )
                raise AttemptFailed(last, True)
        except TimeoutError:
            raise AttemptFailed(f"no answer within {cfg.timeout_secs:g}s (TAGURU_EXTRACT_TIMEOUT_SECS)", True) from None
        except aiohttp.ClientError as exc:
            raise AttemptFailed(f"connection failed ({type(exc).__name__})", True) from None
