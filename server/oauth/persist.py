"""Where the grant store is kept, and how the processes that answer OAuth share it.

- SQLite, one process: `<data_dir>/oauth.json` holds clients and refresh grants, written atomically
  (temporary file, fsync, rename, owner-only); codes and access tokens live in memory only.
- SQLite, `serve --workers N`: the processes share the data dir. Codes and access grants (hashes only)
  are kept in `oauth.live.json` beside it, every change is made under an exclusive lock on `oauth.lock`,
  and a process re-reads the files when another one changed them, so any worker answers any step.
- PostgreSQL: the same two documents are rows of the store's `store_meta` table (`oauth`,
  `oauth_live`), changed under an advisory lock of their own, so every replica shares them.
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
from typing import Any, Protocol, TypeVar

import structlog

from taguru_server.server.oauth.grants import GrantStore
from taguru_server.server.oauth.tokens import now_secs
from taguru_server.store import atomic

log = structlog.get_logger("taguru.oauth")

UNREADABLE = "oauth store is unreadable; starting empty — every client must re-register and re-authorize"
NOT_READ = "oauth store could not be read; starting empty — every client must re-register and re-authorize"
DURABLE_ROW, LIVE_ROW = "oauth", "oauth_live"

T = TypeVar("T")
Signature = tuple[int, int, int] | None


class Backing(Protocol):
    """Where the two documents are kept: the durable one (clients, refresh) and, when shared, the live one."""

    shared: bool

    def changed(self) -> tuple[bool, bool]:
        """Whether each document differs from the one last read or written."""

    def read(self, live: bool) -> str | None:
        """A document's text (None: there is none); OSError when it cannot be read."""

    def write(self, durable: str | None, live: str | None) -> None:
        """Replace the documents given (None: unchanged)."""

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Hold the lock every sharing process changes the documents under."""

    def close(self) -> None:
        """Release what the backing holds open."""


def _signature(path: Path) -> Signature:
    """What tells a rewritten file from the one last read: inode, size and modification time."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def write_atomically(path: Path, text: str) -> None:
    """Write a file owner-only and atomically (`store.atomic`), creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_atomically(path, [text.encode("utf-8")])


class FileBacking:
    """`oauth.json` (and, shared by workers, `oauth.live.json` and the lock file `oauth.lock`) in the data dir."""

    def __init__(self, data_dir: str | Path, shared: bool) -> None:
        folder = Path(data_dir)
        self.path = folder / "oauth.json"
        self.live_path = folder / "oauth.live.json"
        self.lock_path = folder / "oauth.lock"
        self.shared = shared
        self._seen: tuple[Signature, Signature] = (None, None)
        self._fresh = True

    def _now_seen(self) -> tuple[Signature, Signature]:
        return (_signature(self.path), _signature(self.live_path) if self.shared else None)

    def changed(self) -> tuple[bool, bool]:
        seen = self._now_seen()
        if self._fresh:
            self._fresh = False
            self._seen = seen
            return True, self.shared
        before, self._seen = self._seen, seen
        return seen[0] != before[0], seen[1] != before[1]

    def read(self, live: bool) -> str | None:
        try:
            return (self.live_path if live else self.path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def write(self, durable: str | None, live: str | None) -> None:
        if durable is not None:
            write_atomically(self.path, durable)
        if live is not None:
            write_atomically(self.live_path, live)
        self._seen = self._now_seen()

    def close(self) -> None:
        """Nothing stays open between changes."""

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
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


class RowBacking:
    """The two documents as rows of PostgreSQL's `store_meta`, shared by every replica."""

    shared = True

    def __init__(self, url: str) -> None:
        from taguru_server.store.persist.documents import SharedDocuments

        self.rows = SharedDocuments(url)
        self._texts: dict[str, str] = {}
        self._seen: dict[str, str] | None = None

    def changed(self) -> tuple[bool, bool]:
        try:
            self._texts = self.rows.read((DURABLE_ROW, LIVE_ROW))
        except Exception as exc:  # the database is away: keep what this replica holds
            log.warning("oauth.read_failed", error_type=type(exc).__name__)
            return False, False
        before, self._seen = self._seen, dict(self._texts)
        if before is None:
            return True, True
        return before.get(DURABLE_ROW) != self._texts.get(DURABLE_ROW), before.get(LIVE_ROW) != self._texts.get(
            LIVE_ROW
        )

    def read(self, live: bool) -> str | None:
        return self._texts.get(LIVE_ROW if live else DURABLE_ROW)

    def write(self, durable: str | None, live: str | None) -> None:
        values = {key: text for key, text in ((DURABLE_ROW, durable), (LIVE_ROW, live)) if text is not None}
        try:
            self.rows.put(values)
        except Exception as exc:
            raise OSError(type(exc).__name__) from exc
        self._texts.update(values)
        self._seen = dict(self._texts)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        return self.rows.locked()

    def close(self) -> None:
        self.rows.close()


class OAuthState:
    """The grant store of this process, kept in step with its backing (and so with the other processes)."""

    def __init__(self, backing: Backing, clock: Callable[[], float] = time.time) -> None:
        self.backing = backing
        self.shared = backing.shared
        self.clock = clock
        self.store = GrantStore()
        self._mutex = threading.Lock()
        self._written: tuple[Any, Any] = (None, None)

    @classmethod
    def in_data_dir(cls, data_dir: str | Path, shared: bool, clock: Callable[[], float] = time.time) -> OAuthState:
        """The store kept in `<data_dir>/oauth.json` (shared by worker processes when `shared`)."""
        return cls(FileBacking(data_dir, shared), clock)

    def now(self) -> int:
        """Whole Unix seconds (ClockBeforeEpoch before 1970)."""
        return now_secs(self.clock())

    def boot(self) -> None:
        """Load the persisted store: a missing document is an empty store, an unreadable one too (with a warning)."""
        with self._mutex:
            self._reload()

    def current(self) -> GrantStore:
        """The store, re-read first when another process changed it."""
        if self.shared:
            with self._mutex:
                self._reload()
        return self.store

    def change(self, action: Callable[[GrantStore, int], T]) -> T:
        """Run one change on the store (re-read first, under the sharing processes' lock), then write what changed."""
        with self._mutex, self.backing.exclusive():
            self._reload()
            result = action(self.store, self.now())
            self._save()
            return result

    def _reload(self) -> None:
        """Read the documents again when they are not the ones last read or written."""
        durable, live = self.backing.changed()
        if durable:
            self._load_durable()
        if live and self.shared:
            self._load_live()
        self._written = (self.store.durable(), self.store.live() if self.shared else None)

    def _load_durable(self) -> None:
        """Clients and refresh grants; nothing old is trusted when the document cannot be read."""
        empty: dict[str, list[Any]] = {"clients": [], "refresh": []}
        try:
            text = self.backing.read(live=False)
        except OSError:
            log.warning(NOT_READ)
            self.store.load_durable(empty)
            return
        try:
            self.store.load_durable(empty if text is None else json.loads(text))
        except ValueError:
            log.warning(UNREADABLE)
            self.store.load_durable(empty)

    def _load_live(self) -> None:
        """Codes and access grants the sharing processes hold (an unreadable document: none)."""
        try:
            text = self.backing.read(live=True)
            self.store.load_live({"codes": [], "access": []} if text is None else json.loads(text))
        except (OSError, ValueError):
            self.store.load_live({"codes": [], "access": []})

    def _save(self) -> None:
        """Write the documents that changed; a failed write only logs a warning."""
        durable = self.store.durable()
        live = self.store.live() if self.shared else None
        try:
            self.backing.write(
                json.dumps(durable, indent=2) + "\n" if durable != self._written[0] else None,
                json.dumps(live) if self.shared and live != self._written[1] else None,
            )
        except OSError as exc:
            log.warning("oauth.persist_failed", error_type=type(exc).__name__)
        self._written = (durable, live)
