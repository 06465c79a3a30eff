"""Process level: a PostgreSQL outage under a running `taguru serve`.

While the database is down `/health` answers 503 `unhealthy` (before and after a write is tried),
`/live` stays 200, every write is refused with 503, and the refusals are logged once per cause
with nothing of what was written; when the database is back, `/health` says 200 again and writes
land, without a restart.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pg_support import Cluster
from process_support import Server

pytestmark = [pytest.mark.slow, pytest.mark.first_pass_only]

SECRET = "秘密の主語-c41e"  # stored and requested text: it must never reach a log line
WITHIN_SECS = 10.0


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _until(url: str, status: int) -> tuple[float, bytes]:
    """Poll until `url` answers `status`: the seconds it took and the body."""
    began = time.monotonic()
    while True:
        got, body = _get(url)
        if got == status:
            return time.monotonic() - began, body
        assert time.monotonic() - began < WITHIN_SECS, (url, got, body)
        time.sleep(0.1)


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]


def test_a_postgres_outage_is_unhealthy_refuses_writes_logs_each_cause_once_and_recovers(
    tmp_path: Path, cluster: Cluster
) -> None:
    log = tmp_path / "server.log"
    server = Server(tmp_path / "data", log, TAGURU_DATABASE_URL=cluster.fresh_url(), TAGURU_LOG_FORMAT="json")
    try:
        server.ok("PUT", "/contexts/k", {"description": "outage"})
        server.ok("POST", "/contexts/k/associations", [{"subject": SECRET, "label": "r", "object": "o", "weight": 1}])
        assert _get(server.url + "/health")[0] == 200 and _get(server.url + "/ready")[0] == 200

        cluster.pause()
        took, body = _until(server.url + "/health", 503)  # before any write is tried
        doc = json.loads(body)
        assert (doc["status"], doc["code"]) == ("error", "unhealthy")
        assert doc["error"].startswith("the store cannot take writes: the database does not answer ("), doc
        assert took < 5.0  # a probe at most every 2 s, answering within 3 s
        assert _get(server.url + "/live") == (200, b"ok")
        refused = 0
        for i in range(5):
            status, answer = server.call(
                "POST", "/contexts/k/associations", [{"subject": SECRET, "label": "r", "object": f"x{i}", "weight": 1}]
            )
            assert (status, answer["code"]) == (503, "unhealthy"), answer
            refused += 1
        assert _get(server.url + "/health")[0] == 503

        cluster.resume()
        took, _body = _until(server.url + "/health", 200)
        status, answer = server.call(
            "POST", "/contexts/k/associations", [{"subject": SECRET, "label": "r", "object": "back", "weight": 1}]
        )
        assert status == 200, answer
        objects = {m["object"] for m in server.ok("POST", "/contexts/k/query", {"subject": SECRET})["matches"]}
        assert objects == {"o", "back"}  # nothing refused landed; the write after the outage did
        assert _get(server.url + "/health")[0] == 200 and _get(server.url + "/ready")[0] == 200
    finally:
        server.stop()

    events = _events(log)
    lines = [e for e in events if e["event"] == "store.write_refused"]
    causes = [(e["kind"], e["reason"]) for e in lines]
    # every refusal came within one 10 s interval: each cause has its one line, the rest were left out
    assert 1 <= len(lines) < refused and len(causes) == len(set(causes)), causes
    assert all(e["kind"] == "unavailable" and e["level"] == "warning" for e in lines), lines
    assert all(e["suppressed_since_last"] == 0 for e in lines), lines
    assert [e["event"] for e in events if e["event"] in ("store.unwritable", "store.writable")] == [
        "store.unwritable",
        "store.writable",
    ]
    assert SECRET not in log.read_text()
