"""`taguru export` as a process: offline under the data dir lock, and --url against a running server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pg_support import backend
from process_support import Server, base_env, cli

pytestmark = pytest.mark.slow

STREAM = "".join(
    json.dumps(r, ensure_ascii=False) + "\n"
    for r in (
        {"taguru_batch": 1, "context": "酒 kura", "source": "b.md", "create": {"description": "d", "dice_floor": 0.5}},
        {"passage": "one.\n\ntwo.", "stored_at": 1700000000, "tags": ["t"]},
        {"paragraph": 1, "section": "S"},
        {"subject": "x", "label": "r", "object": "y", "weight": 0.1, "paragraph": 1},
        {"subject": "x", "label": "r", "object": "y", "weight": 0.2},
        {"alias": "X", "canonical": "x", "kind": "concept"},
        {"taguru_batch": 1, "context": "酒 kura", "source": "a.md"},
        {"subject": "y", "label": "r", "object": "z", "weight": -1e-7},
    )
)
EXPECTED = (
    '{"taguru_batch":1,"context":"酒 kura","source":"a.md","create":{"description":"d","dice_floor":0.5}}\n'
    '{"subject":"y","label":"r","object":"z","weight":-1e-7}\n'
    '{"taguru_batch":1,"context":"酒 kura","source":"b.md"}\n'
    '{"passage":"one.\\n\\ntwo.","stored_at":1700000000,"tags":["t"]}\n'
    '{"paragraph":1,"section":"S"}\n'
    # 0.1 + 0.2 averaged: the reference's shortest f64 digits
    '{"subject":"x","label":"r","object":"y","weight":0.15000000000000002,"paragraph":1}\n'
    '{"subject":"x","label":"r","object":"y","weight":0.15000000000000002}\n'
    '{"alias":"X","canonical":"x","kind":"concept"}\n'
)


def test_export_offline_and_over_http(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = base_env(data)
    (tmp_path / "in.jsonl").write_text(STREAM, encoding="utf-8")
    assert cli("import", str(tmp_path / "in.jsonl"), env=env).returncode == 0

    offline = tmp_path / "offline.jsonl"
    done = cli("export", "酒 kura", "-o", str(offline), env=env)
    assert done.returncode == 0, done.stderr
    assert offline.read_text(encoding="utf-8") == EXPECTED
    assert "2 batch(es), 3 association line(s), 1 alias(es), 1 passage(s)" in done.stderr
    if backend() == "sqlite":  # --data-dir names an SQLite store
        to_stdout = cli("export", "酒 kura", "--data-dir", str(data), env=base_env(tmp_path / "elsewhere"))
    else:
        to_stdout = cli("export", "酒 kura", env=env)
    assert to_stdout.returncode == 0 and to_stdout.stdout == EXPECTED

    missing = cli("export", "nope", "-o", str(tmp_path / "nope.jsonl"), env=env)
    assert missing.returncode == 1 and missing.stderr == "taguru export: context 'nope': context 'nope' not found\n"
    assert not (tmp_path / "nope.jsonl").exists()
    no_store = cli("export", "x", "--data-dir", str(tmp_path / "void"), env=env)
    assert no_store.returncode == 1 and "holds no store" in no_store.stderr and "Traceback" not in no_store.stderr

    server = Server(data, tmp_path / "server.log")
    try:
        locked = cli("export", "酒 kura", "-o", str(tmp_path / "locked.jsonl"), env=env)
        if backend() == "sqlite":  # the data-dir lock: a running server owns the SQLite store
            assert locked.returncode == 1 and "in use by another process" in locked.stderr
            assert len(locked.stderr.splitlines()) == 1 and not (tmp_path / "locked.jsonl").exists()
        else:  # PostgreSQL: an offline export is one more reader of the shared store
            assert locked.returncode == 0 and (tmp_path / "locked.jsonl").read_text(encoding="utf-8") == EXPECTED

        remote = tmp_path / "remote.jsonl"
        done = cli("export", "酒 kura", "--url", server.url, "-o", str(remote), env=env)
        assert done.returncode == 0, done.stderr
        assert remote.read_bytes() == offline.read_bytes()

        # a write after the first export shows up in the next one (the store holds every answered write)
        server.ok(
            "POST",
            "/contexts/%E9%85%92%20kura/associations",
            [{"subject": "q", "label": "r", "object": "w", "weight": 2}],
        )
        again = cli("export", "酒 kura", "--url", server.url, env=env)
        assert again.stdout.endswith(
            '"source":"export:unsourced"}\n{"subject":"q","label":"r","object":"w","weight":2.0}\n'
            '{"alias":"X","canonical":"x","kind":"concept"}\n'
        )

        gone = cli("export", "nope", "--url", server.url, "-o", str(tmp_path / "gone.jsonl"), env=env)
        assert gone.returncode == 1 and gone.stderr == "taguru export: context 'nope': context 'nope' not found\n"
        assert not (tmp_path / "gone.jsonl").exists()
        both = cli("export", "x", "--url", server.url, "--data-dir", str(data), env=env)
        assert both.returncode == 2
    finally:
        server.stop()
    unreachable = cli("export", "x", "--url", server.url, env=env)
    assert unreachable.returncode == 1 and "cannot reach the server" in unreachable.stderr
