"""Where the grant store is kept: `<data_dir>/oauth.json` (clients and refresh grants), written atomically.

One process keeps codes and access tokens in memory only. Worker processes of one `taguru serve`
share the data dir: then codes and access grants (hashes only) are kept in `oauth.live.json` beside
it, every change is made under an exclusive lock on `oauth.lock`, and each process re-reads the
files when another one changed them, so any worker can answer any step of the flow.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import structlog

from taguru_server.server.oauth.grants import GrantStore
from taguru_server.server.oauth.tokens import now_secs

log = structlog.get_logger("taguru.oauth")

UNREADABLE = "oauth store is unreadable; starting empty — every client must re-register and re-authorize"
NOT_READ = "oauth store could not be read; starting empty — every client must re-register and re-authorize"

T = TypeVar("T")
Signature = tuple[int, int, int] | None


def _signature(path: Path) -> Signature:
    """What tells a rewritten file from the one last read: inode, size and modification time."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def write_atomically(path: Path, text: str) -> None:
    """Write a file owner-only through a temporary file, fsync it, rename it over the old one, fsync the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class OAuthState:
    """The grant store of this process, kept in step with its files (and with the other workers)."""

    def __init__(self, data_dir: str | Path, shared: bool, clock: Callable[[], float] = time.time) -> None:
        folder = Path(data_dir)
        self.path = folder / "oauth.json"
        self.live_path = folder / "oauth.live.json"
        self.lock_path = folder / "oauth.lock"
        self.shared = shared
        self.clock = clock
        self.store = GrantStore()
        self._mutex = threading.Lock()
        self._seen: tuple[Signature, Signature] = (None, None)
        self._written: tuple[Any, Any] = (None, None)

    def now(self) -> int:
        """Whole Unix seconds (ClockBeforeEpoch before 1970)."""
        return now_secs(self.clock())

    def boot(self) -> None:
        """Load the persisted store: a missing file is an empty store, an unreadable one too (with a warning)."""
        with self._mutex:
            self._reload(force=True)

    def current(self) -> GrantStore:
        """The store, re-read first when another worker changed its files."""
        if self.shared:
            with self._mutex:
                self._reload()
        return self.store

    def change(self, action: Callable[[GrantStore, int], T]) -> T:
        """Run one change on the store (re-read first, under the workers' lock), then write what it changed."""
        with self._mutex, self._exclusive():
            self._reload()
            result = action(self.store, self.now())
            self._save()
            return result

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """The workers' lock on `oauth.lock` (nothing with one process)."""
        if not self.shared:
            yield
            return
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _reload(self, force: bool = False) -> None:
        """Read the files again when they are not the ones last read or written."""
        seen = (_signature(self.path), _signature(self.live_path) if self.shared else None)
        if not force and seen == self._seen:
            return
        if force or seen[0] != self._seen[0]:
            self._load_durable()
        if self.shared and seen[1] != self._seen[1]:
            self._load_live()
        self._seen = seen
        self._written = (self.store.durable(), self.store.live() if self.shared else None)

    def _load_durable(self) -> None:
        """Clients and refresh grants from `oauth.json`; nothing old is trusted when it cannot be read."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self.store.load_durable({"clients": [], "refresh": []})
            return
        except OSError:
            log.warning(NOT_READ)
            self.store.load_durable({"clients": [], "refresh": []})
            return
        try:
            self.store.load_durable(json.loads(text))
        except ValueError:
            log.warning(UNREADABLE)
            self.store.load_durable({"clients": [], "refresh": []})

    def _load_live(self) -> None:
        """Codes and access grants shared by the workers (an unreadable file: none)."""
        try:
            self.store.load_live(json.loads(self.live_path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            self.store.load_live({"codes": [], "access": []})

    def _save(self) -> None:
        """Write the parts that changed; a failed write only logs a warning."""
        durable = self.store.durable()
        live = self.store.live() if self.shared else None
        try:
            if durable != self._written[0]:
                write_atomically(self.path, json.dumps(durable, indent=2, ensure_ascii=True) + "\n")
            if self.shared and live != self._written[1]:
                write_atomically(self.live_path, json.dumps(live, ensure_ascii=True))
        except OSError as exc:
            log.warning("oauth.persist_failed", error_type=type(exc).__name__)
        self._written = (durable, live)
        self._seen = (_signature(self.path), _signature(self.live_path) if self.shared else None)
