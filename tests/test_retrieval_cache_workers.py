"""Process level: `taguru serve` with 2 workers, each with its own retrieval cache, never serves a body from
before a write another worker acknowledged (the key is made after the read's catch-up)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from process_support import Server

pytestmark = pytest.mark.slow


def test_each_workers_cache_follows_the_other_workers_writes(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_WORKERS="2")
    servers.append(server)
    server.ok("PUT", "/contexts/k", {"description": "workers"})
    recall = {"cue": "蔵"}
    search = {"query": "蔵元"}
    stale = []
    for i in range(40):
        server.ok("POST", "/contexts/k/associations", [{"subject": "蔵", "label": "r", "object": f"o{i}", "weight": 1}])
        server.ok("POST", "/contexts/k/sources", {"passages": {f"d{i}.md": "蔵元の話。"}})
        for _ in range(4):  # fresh connections: both workers answer, from their caches after the first
            got = server.ok("POST", "/contexts/k/recall", recall)
            if got["total"] != i + 1:
                stale.append(("recall", i, got["total"]))
            hits = server.ok("POST", "/contexts/k/sources/search", {**search, "limit": 100})["hits"]
            if len(hits) != i + 1:
                stale.append(("search", i, len(hits)))
    assert stale == []
    text = server.log_path.read_text(errors="replace")
    assert len(set(re.findall(r'"worker_pid": (\d+)', text))) == 2
