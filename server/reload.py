"""Key reload: SIGHUP and the config-file watch re-derive the three key variables, judge them exactly as the
boot does and swap the armed table whole, or refuse and keep it (docs/operations.md, "Key rotation").

A key variable set in the real environment keeps its boot value (the file cannot override it, and a
process's environment cannot change from outside); every other one comes from the file's current
contents, its absence included. Only the key table reloads: every other setting keeps its boot value.
Reloads are serialized under one lock; requests never take it (they read `Keys.current` once).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from pathlib import Path

import attrs
import structlog

from taguru_server.client.config import MalformedConfig, parse_config_text
from taguru_server.server.config import ConfigError
from taguru_server.server.keyring import KEY_VARIABLES, KeyDiff, Keyring, Keys, diff, parse_keyring
from taguru_server.server.metrics import Metrics

log = structlog.get_logger("taguru.auth")

SIGHUP, CONFIG_WATCH = "sighup", "config-watch"  # the two triggers
WATCH_INTERVAL_SECS = 2.0  # how often the watch reads the file (the reference: 5 s)
DISARM = (
    "the reloaded sources configure no key, but authentication is armed — refusing to open the server "
    "(unset tokens mean the UNAUTHENTICATED localhost mode); restart if that is really intended"
)


@attrs.frozen
class Refused:
    """The reload changes nothing; `error` says why (it never holds a token or a line of the file)."""

    error: str


@attrs.frozen
class Unchanged:
    """The re-derived table has the same keys, tokens and grants as the armed one."""


@attrs.frozen
class Applied:
    """The new table, and how it differs from the one it replaces."""

    keyring: Keyring
    diff: KeyDiff


Outcome = Refused | Unchanged | Applied


def shell_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """The key variables the real environment set at process start (these never reload)."""
    return {name: environ[name] for name in KEY_VARIABLES if name in environ}


def unreadable(path: str, exc: OSError) -> Refused:
    """The refusal of a file that cannot be read."""
    return Refused(f"cannot read config {path}: {exc.strerror or type(exc).__name__}")


def judge(armed: Keyring, shell: Mapping[str, str], data: bytes | None, path: str = "file") -> Outcome:
    """What reloading from the bytes `data` of the file at `path` (None: no config file) does to the `armed`
    table."""
    if data is None:
        return Unchanged()  # nothing can change
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"invalid utf-8 sequence of {exc.end - exc.start} bytes from index {exc.start}"
        return Refused(f"config is not valid UTF-8: {where}")
    try:
        parsed = parse_config_text(text, path)
    except MalformedConfig as exc:
        return Refused(str(exc))
    values = {name: value for name, value in parsed.items() if name in KEY_VARIABLES}
    values.update(shell)
    try:
        new = parse_keyring(values)
    except ConfigError as exc:
        return Refused(str(exc))
    if armed.auth_enabled and not new.auth_enabled:
        return Refused(DISARM)
    change = diff(armed, new)
    return Unchanged() if change.empty else Applied(new, change)


def _read(path: str) -> bytes:
    """The file's bytes now (through symlinks)."""
    return Path(path).read_bytes()


class Reloader:
    """Runs the reloads of one process over its armed table: on SIGHUP and when the watched file changes."""

    def __init__(self, keys: Keys, metrics: Metrics, path: str | None, shell: Mapping[str, str]) -> None:
        self.keys = keys
        self.metrics = metrics
        self.path = path
        self.shell = dict(shell)
        self.lock = asyncio.Lock()
        self.pending: set[asyncio.Task[Outcome]] = set()

    async def reload(self, trigger: str, data: bytes | None = None) -> Outcome:
        """One reload: the file read now (SIGHUP) or the bytes the watch just read, judged, then swapped or refused."""
        async with self.lock:
            outcome: Outcome | None = None
            if data is None and self.path is not None:
                try:
                    data = await asyncio.to_thread(_read, self.path)
                except OSError as exc:
                    outcome = unreadable(self.path, exc)
            if outcome is None:
                outcome = judge(self.keys.current, self.shell, data, self.path or "file")
            self._settle(trigger, outcome)
            return outcome

    def _settle(self, trigger: str, outcome: Outcome) -> None:
        """Swap in an applied table, then log and count the outcome."""
        if isinstance(outcome, Refused):
            self.metrics.keyring_reload_refusals.inc()
            log.error("keyring.reload_refused", error=outcome.error, trigger=trigger)
            return
        self.metrics.keyring_reloads.inc()
        if isinstance(outcome, Unchanged):
            log.info("keyring.reload_unchanged", trigger=trigger)
            return
        self.keys.current = outcome.keyring
        change = outcome.diff
        log.info(
            "keyring.reloaded",
            trigger=trigger,
            added=list(change.added),
            removed=list(change.removed),
            rotated=list(change.rotated),
            rescoped=list(change.rescoped),
            keys=len(outcome.keyring.tokens),
            scoped=len(outcome.keyring.scopes),
        )

    def sighup(self) -> None:
        """The SIGHUP handler: one reload, run on the loop (the handler itself must not wait)."""
        task = asyncio.get_running_loop().create_task(self.reload(SIGHUP))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def watch(self, interval: float = WATCH_INTERVAL_SECS) -> None:
        """Read the file every `interval` seconds (off the loop); a change of its SHA-256 reloads from those bytes.

        The first digest is taken now, and an edit made since the boot read the file (this process
        ignores SIGHUP until its handler is in place) reloads at once; a read that fails is no change and
        keeps the digest, so a refused edit is logged once per change, and reverting it is another change."""
        if self.path is None:
            return
        digest = await self._catch_up()
        while True:
            await asyncio.sleep(interval)
            try:
                data = await asyncio.to_thread(_read, self.path)
            except OSError:
                continue
            seen = hashlib.sha256(data).digest()
            if seen != digest:
                digest = seen
                await self.reload(CONFIG_WATCH, data)

    async def _catch_up(self) -> bytes | None:
        """The file's digest now (None when it cannot be read), after reloading from it if its keys are not
        the armed ones (quietly nothing when they are: the boot armed them)."""
        assert self.path is not None
        try:
            data = await asyncio.to_thread(_read, self.path)
        except OSError:
            return None
        if not isinstance(judge(self.keys.current, self.shell, data, self.path), Unchanged):
            await self.reload(CONFIG_WATCH, data)
        return hashlib.sha256(data).digest()


def arm(loop: asyncio.AbstractEventLoop, reloader: Reloader) -> asyncio.Task[None] | None:
    """Reload on SIGHUP (Unix) and, with a config file, when it changes; the watch's task, to cancel at shutdown.

    A handler that cannot be registered is one warning, and the process runs without signal reload."""
    import signal

    try:
        loop.add_signal_handler(signal.SIGHUP, reloader.sighup)
    except (AttributeError, NotImplementedError, RuntimeError, ValueError) as exc:
        log.warning(
            "keyring.sighup_unavailable",
            message="could not register the SIGHUP keyring-reload handler",
            error=type(exc).__name__,
        )
    return loop.create_task(reloader.watch()) if reloader.path is not None else None
