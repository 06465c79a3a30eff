"""Operations through the real commands: `taguru serve` with a storage quota from its environment refuses a
growth write with 507 and lets shrinking writes through; `taguru export --out DIR` from that server and
`taguru import DIR` into a fresh data dir restore every context and group, each read equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from process_support import Server, base_env, cli
from test_export_dir import READS, SEED

pytestmark = pytest.mark.slow

CEILING = 3000


def answers(server: Server) -> list[Any]:
    """The export test's reads, with the listing cut to what an import restores (not the store's ids)."""
    out = []
    for method, path, body in READS:
        result = server.ok(method, quote(path), body)
        if path == "/contexts":
            result = [{k: c[k] for k in ("name", "description", "stats")} for c in result["contexts"]]
            for c in result:
                c["stats"] = {k: v for k, v in c["stats"].items() if k in ("associations", "concepts", "sources")}
        out.append(result)
    return out


def test_a_quota_from_the_environment_then_a_directory_backup_restores(tmp_path: Path, servers: list[Server]) -> None:
    quotas = f'{{"big": {{"storage_bytes": {CEILING}}}}}'
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_CONTEXT_QUOTAS=quotas)
    servers.append(server)
    for method, path, body in SEED:
        server.ok(method, quote(path), body)
    server.ok("PUT", "/contexts/big", {"description": "under a ceiling"})
    server.ok("POST", "/contexts/big/sources", {"passages": {"a.md": "蔵の杜氏は高瀬。" * 20}})
    rows = [
        {"subject": f"蔵{i}", "label": "杜氏", "object": f"人{i}", "weight": 1.0, "source": "a.md"} for i in range(40)
    ]
    server.ok("POST", "/contexts/big/associations", rows)
    server.ok("POST", "/flush")  # the disk sizes behind the quota are measured
    before = server.ok("GET", "/contexts/big")
    status, body = server.call("POST", "/contexts/big/associations", [{**rows[0], "object": "新人", "source": "b.md"}])
    assert status == 507 and body["status"] == "error" and body["code"] == "storage_full", body
    assert body["error"].startswith("context 'big' is at its storage quota (")
    assert f" of {CEILING} bytes): retract or compact to shrink it" in body["error"]
    assert server.ok("GET", "/contexts/big") == before  # nothing was applied
    retract = {"subject": "蔵0", "label": "杜氏", "object": "人0"}
    assert server.ok("POST", "/contexts/big/associations/retract", retract)["retracted"] is True
    server.ok("DELETE", "/contexts/big")
    wanted = answers(server)

    backup = tmp_path / "backup"
    env = base_env(tmp_path / "data")
    done = cli("export", "--out", str(backup), "--url", server.url, env=env)
    assert done.returncode == 0, done.stderr
    assert "export: 3 of 3 context(s) and 1 of 1 group(s) written to" in done.stdout, done.stdout
    assert sorted(p.name for p in backup.iterdir()) == [
        "%E9%85%92.jsonl",
        "breweries.group.jsonl",
        "k%2Eg.jsonl",
        "sake.jsonl",
    ]
    fresh = tmp_path / "fresh"
    done = cli("import", "--no-embed", "--data-dir", str(fresh), str(backup), env=base_env(fresh))
    assert done.returncode == 0, done.stderr
    restored = Server(fresh, tmp_path / "fresh.log")
    servers.append(restored)
    assert answers(restored) == wanted
