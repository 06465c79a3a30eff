"""The data dir lock: offline commands (import, export) never race a running server."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO

LOCKED = "the data dir is in use by another process (a running server?); stop it or use --url"


class DataDirRefused(SystemExit):
    """The data dir cannot be locked; exits 1 with the reason when not caught."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"taguru: {reason}")
        self.reason = reason


class DataDirBusy(DataDirRefused):
    """The data dir lock is held elsewhere."""


class DataDirLock:
    """An exclusive lock on the data dir, so an offline import never races a server."""

    def __init__(self, data_dir: str) -> None:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(data_dir) / "LOCK"
        self.handle: IO[str] | None = None

    def __enter__(self) -> DataDirLock:
        self.handle = open(self.path, "w")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.close()
            self.handle = None
            raise DataDirBusy(LOCKED) from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()


def take_lock(data_dir: str) -> DataDirLock:
    """The data dir's lock, taken (release it with `__exit__`); DataDirRefused naming why not: DataDirBusy when
    another process holds it, else the reason the dir cannot be used."""
    try:
        return DataDirLock(data_dir).__enter__()
    except OSError as exc:
        raise DataDirRefused(f"the data dir {data_dir} cannot be used: {exc.strerror or exc}") from None
