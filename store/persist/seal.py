"""The store's check seal: skip the boot's full-file integrity check of a database unchanged since a clean stop.

`PRAGMA quick_check` reads every page of the database: seconds per GB on a warm page cache, more than a
minute on a cold one for a 1M-paragraph store, and a start with several workers opened the store three
times. The seal (`store.verified` beside the database) records the database file's identity and change
stamps (device, inode, size, mtime and ctime in nanoseconds) as they were when the last process that had
the store open closed it cleanly — its write-ahead log checkpointed and removed — after an open that was
itself checked (or sealed). A boot whose database matches the seal skips `quick_check`; any write, copy,
restore, truncation or replacement changes ctime (which no tool can set back), and a leftover `-wal`
file (a crash, a process still running) never matches, so those boots check the whole file as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SEAL_FILE = "store.verified"
SEAL_FORMAT = 1


def _stamp(db_file: Path) -> dict[str, int] | None:
    """The database's identity and change stamps; None when it has a write-ahead log beside it (or none)."""
    wal = db_file.with_name(db_file.name + "-wal")
    try:
        if wal.exists():
            return None
        st = db_file.stat()
    except OSError:
        return None
    return {
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
    }


def sealed(db_file: Path) -> bool:
    """Whether the database is exactly as the last clean stop left it (its check may be skipped)."""
    stamp = _stamp(db_file)
    if stamp is None:
        return False
    try:
        recorded = json.loads((db_file.parent / SEAL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded == {"taguru_store_verified": SEAL_FORMAT, **stamp}


def seal(db_file: Path) -> bool:
    """Record the database as intact, when no write-ahead log is left (this process closed it last, cleanly).

    Best effort: a seal that cannot be written only means the next boot checks the whole file."""
    stamp = _stamp(db_file)
    if stamp is None:
        return False
    target = db_file.parent / SEAL_FILE
    staging = target.with_name(SEAL_FILE + ".tmp")
    try:
        staging.write_text(json.dumps({"taguru_store_verified": SEAL_FORMAT, **stamp}) + "\n", encoding="utf-8")
        os.replace(staging, target)
    except OSError:
        return False
    return True


def unseal(db_file: Path) -> None:
    """Drop the seal (the store is about to change, or was found damaged)."""
    try:
        (db_file.parent / SEAL_FILE).unlink()
    except OSError:
        pass
