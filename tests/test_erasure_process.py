"""Process level: a real `taguru serve` (with an embedding provider, so vectors are stored too) erases a retracted
source by compaction, and a deleted context, down to the bytes: no file of the data dir (the database, its
write-ahead log and shared-memory file, the index files) holds a marker afterwards, whether the server is
still running or stopped; on PostgreSQL no table row holds it either."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from erasure_support import files_holding, marker_needles, postgres_rows_holding
from pg_support import database_url_for
from process_support import PYTHON, ROOT, Server, free_port

pytestmark = pytest.mark.slow

# one marker per context, so each erasure is checked while the other context still holds its own
A = ("qzxerasedalpha", "秘密の語")
B = ("qzxdeletedbeta", "抹消対象")


def _marker(parts: tuple[str, str]) -> str:
    return parts[0] + parts[1]


@pytest.fixture
def embedder() -> Iterator[str]:
    """The flat fake provider (tests/fake_embedder.py) as its own process; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, str(ROOT / "tests" / "fake_embedder.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1/embeddings"
    try:
        for _ in range(600):  # a readiness wait, not an assertion on time
            if proc.poll() is not None:
                raise AssertionError("the fake embedder exited")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except urllib.error.HTTPError:
                break  # it answers (404 on /)
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def fill(s: Server, name: str, parts: tuple[str, str]) -> None:
    marker = _marker(parts)
    source = f"{marker}.md"
    path = f"/contexts/{name}"
    s.ok("PUT", path, {"description": "d"})
    s.ok(
        "POST",
        f"{path}/associations",
        [
            {"subject": f"{marker}-s", "label": f"{marker}-l", "object": "beta", "weight": 1.0, "source": source},
            {"subject": "alpha", "label": "rel", "object": "beta", "weight": 1.0, "source": "kept.md"},
        ],
    )
    s.ok(
        "POST",
        f"{path}/aliases",
        {"concepts": {f"{marker}-alias": f"{marker}-s"}, "labels": {f"{marker}-la": f"{marker}-l"}},
    )
    s.ok(
        "POST",
        f"{path}/sources",
        {"passages": {source: f"About {marker}.\n\nMore on {parts[0]} and {parts[1]}.", "kept.md": "alpha, beta."}},
    )
    assert s.ok("POST", f"{path}/embeddings/refresh", {})["passages"]["total"] == 3


def test_no_file_of_the_data_dir_keeps_an_erased_marker(tmp_path: Path, embedder: str) -> None:
    data = tmp_path / "data"
    env: dict[str, Any] = {
        "TAGURU_EMBED_URL": embedder,
        "TAGURU_EMBED_MODEL": "fake-flat",
        "TAGURU_EMBED_PASSAGES": "1",
        "TAGURU_INDEX_DIR": str(data / "indexes"),  # index files with PostgreSQL too
    }
    a, b = marker_needles(*A), marker_needles(*B)
    url = database_url_for(data)

    def in_tables(wanted: list[bytes]) -> set[tuple[str, bytes]]:
        return postgres_rows_holding(url, wanted) if url else set()

    s = Server(data, tmp_path / "serve.log", **env)
    try:
        fill(s, "secret", A)
        fill(s, "doomed", B)
    finally:
        s.stop()
    s = Server(data, tmp_path / "serve.log", **env)  # loading them again writes their index files
    try:
        for name in ("secret", "doomed"):
            s.ok("POST", f"/contexts/{name}/query", {"subject": "alpha"})
        for wanted in (a, b):
            held = {path for path, _n in files_holding(data, wanted)}
            assert any(p.startswith("indexes/") for p in held), held
            if url is None:
                assert any(p.startswith("taguru.sqlite3") for p in held), held
            else:
                assert in_tables(wanted)

        source = f"{_marker(A)}.md"
        assert s.ok("POST", "/contexts/secret/sources/retract", {"source": source})["passage_removed"] is True
        outcome = s.ok("POST", "/contexts/secret/compact")
        assert outcome["aliases_dropped"] == 2 and outcome["passages_compacted"] is (url is None)
        assert files_holding(data, a) == set() and in_tables(a) == set()  # while the server runs
        assert files_holding(data, b) and (url is None or in_tables(b))  # the other context still holds its own

        s.ok("DELETE", "/contexts/doomed")
        assert files_holding(data, b) == set() and in_tables(b) == set()
        if url is None:  # what was scanned while it ran: the database, its log and shared memory, the rest
            running = {str(p.relative_to(data)) for p in data.rglob("*") if p.is_file()}
            assert {"taguru.sqlite3", "taguru.sqlite3-wal", "taguru.sqlite3-shm", "STORE_ID", "LOCK"} <= running
        assert s.ok("POST", "/contexts/secret/sources/lookup", {"sources": ["kept.md"]})["missing"] == []
    finally:
        s.stop()
    assert files_holding(data, a) == set() and files_holding(data, b) == set()  # and once it stopped
    assert in_tables(a) == set() and in_tables(b) == set()
    logged = (tmp_path / "serve.log").read_bytes()
    assert logged and not [w for w in a + b if w in logged]  # the server never logged a name or text of them
