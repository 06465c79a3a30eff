"""The boot's full-file store check is skipped only for a database exactly as a clean stop left it.

Pins store/persist/seal.py: a clean close leaves `store.verified`; the next open skips `quick_check` and
says so; a write-ahead log left behind (a crash), any change of the file (a write, a copy back, a touch),
a missing or foreign seal, and damage all bring the full check back; damage found drops the seal; a store
opened only to read writes nothing beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_cli_inspect import imported_offline
from test_store_damage import damage_pages, make_store

from taguru_server.store.errors import StoreRefused
from taguru_server.store.persist.seal import SEAL_FILE, sealed
from taguru_server.store.persist.sqlite import DB_NAME, ReadOnlySqlite, SqlitePersistence

pytestmark = pytest.mark.sqlite_only


def opened(data: Path) -> list[tuple[str, dict[str, Any]]]:
    """What one open of the store reported about its check (then closed cleanly)."""
    events: list[tuple[str, dict[str, Any]]] = []
    SqlitePersistence(data, lambda event, **fields: events.append((event, fields))).close()
    return events


def names(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [event for event, _fields in events]


def test_a_clean_stop_seals_and_the_next_boot_skips_the_check(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_store(data, contexts=3)
    assert (data / SEAL_FILE).exists() and sealed(data / DB_NAME)
    assert opened(data) == [("store.check_skipped", {"reason": "unchanged since the last clean stop"})]
    assert opened(data) == [("store.check_skipped", {"reason": "unchanged since the last clean stop"})]


def test_a_new_store_reports_no_check(tmp_path: Path) -> None:
    assert opened(tmp_path / "fresh") == []
    assert sealed(tmp_path / "fresh" / DB_NAME)  # closed cleanly: the next boot skips


def test_a_crash_leaves_its_log_behind_and_the_next_boot_checks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_store(data)
    store = SqlitePersistence(data)  # never closed: the write-ahead log stays, as after a SIGKILL
    assert (data / (DB_NAME + "-wal")).exists() and not sealed(data / DB_NAME)
    events = opened(data)
    assert names(events) == ["store.checking", "store.checked"]
    assert events[0][1]["check"] == "quick_check" and events[0][1]["file_bytes"] > 0
    assert isinstance(events[1][1]["duration_ms"], float)
    store.db.close()
    store.wdb.close()


@pytest.mark.parametrize("change", ["write", "copy_back", "touch", "no_seal", "foreign_seal", "bad_seal"])
def test_any_change_of_the_file_or_the_seal_brings_the_check_back(tmp_path: Path, change: str) -> None:
    data = tmp_path / "data"
    make_store(data)
    db_file = data / DB_NAME
    if change == "write":
        db = sqlite3.connect(db_file)
        db.execute("INSERT INTO store_meta VALUES('x', 'y')")
        db.commit()
        db.close()
    elif change == "copy_back":
        saved = tmp_path / "saved"
        shutil.copy(db_file, saved)
        shutil.copy(saved, db_file)
    elif change == "touch":
        st = db_file.stat()
        os.utime(db_file, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same times set back: ctime still moves
    elif change == "no_seal":
        (data / SEAL_FILE).unlink()
    elif change == "foreign_seal":
        make_store(tmp_path / "other")
        shutil.copy(tmp_path / "other" / SEAL_FILE, data / SEAL_FILE)
    else:
        (data / SEAL_FILE).write_text("not json", encoding="utf-8")
    assert names(opened(data)) == ["store.checking", "store.checked"]
    assert names(opened(data)) == ["store.check_skipped"]  # and that clean stop sealed it again


def test_damage_is_still_refused_and_drops_the_seal(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_store(data, contexts=400)
    damage_pages(data / DB_NAME)
    with pytest.raises(StoreRefused) as caught:
        SqlitePersistence(data)
    message = str(caught.value)
    assert "damaged" in message or "cannot be opened" in message
    assert not (data / SEAL_FILE).exists()


def test_a_seal_names_only_file_stamps(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_store(data)
    recorded = json.loads((data / SEAL_FILE).read_text(encoding="utf-8"))
    assert sorted(recorded) == ["ctime_ns", "dev", "ino", "mtime_ns", "size", "taguru_store_verified"]


def test_a_store_opened_to_read_writes_no_seal(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_store(data)
    (data / SEAL_FILE).unlink()
    before = sorted(p.name for p in data.iterdir())
    store = ReadOnlySqlite(data / DB_NAME)
    store.close()
    assert sorted(p.name for p in data.iterdir()) == before


def test_a_context_found_unreadable_at_run_time_is_checked_at_the_next_boot(tmp_path: Path) -> None:
    from taguru_server.store.persist.registry import Registry

    data = tmp_path / "data"
    make_store(data)
    registry = Registry(SqlitePersistence(data))
    registry.unreadable.add("c0")  # as a failed read-back marks it (store/persist/registry.py)
    registry.close()
    assert not (data / SEAL_FILE).exists()
    assert names(opened(data)) == ["store.checking", "store.checked"]


def test_an_offline_import_and_compact_leave_the_store_sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from taguru_server.cli.main import main

    data = imported_offline(tmp_path, monkeypatch)
    assert sealed(data / DB_NAME)  # the first serve after an import skips the full check
    monkeypatch.setenv("TAGURU_DATA_DIR", str(data))
    assert main(["compact", "p"]) == 0
    assert sealed(data / DB_NAME)
    assert names(opened(data)) == ["store.check_skipped"]
