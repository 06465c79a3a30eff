"""The modules the PostgreSQL pass leaves out (`conftest.BACKEND_FREE`) never reach a store: none of them
names a way to open one, start a server or run a command, so their SQLite pass is their whole run."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import BACKEND_FREE

TESTS = Path(__file__).resolve().parent
# what a test module would use to reach a backend (the fixtures, the store, servers, commands)
REACHES = re.compile(
    r"\b(client|auth_client|settings_factory|start_client|open_store|Registry|RowStore|database_url_for|"
    r"pg_support|process_support|SpawnedServer|served|subprocess|TAGURU_DATABASE_URL)\b|\bServer\("
)
STATIC = {"test_architecture"}  # reads the source tree as text: the names appear only inside its checks


def test_every_backend_free_module_exists_and_reaches_no_backend() -> None:
    for name in sorted(BACKEND_FREE):
        path = TESTS / f"{name}.py"
        assert path.exists(), name
        if name in STATIC:
            continue
        found = REACHES.findall(path.read_text(encoding="utf-8"))
        assert found == [], (name, sorted(set(found)))
