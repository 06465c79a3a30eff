"""Process level: with `taguru serve --workers 2` one scrape of `/metrics` shows the whole server.

The workers share the port, so requests and scrapes land on either worker; every scrape must count
every request whichever worker served it (the workers' shared metric files), list each live
worker's process families under its own `pid`, and keep a replaced worker's counts.
"""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from process_support import Server

pytestmark = pytest.mark.slow

REQUESTS = 40
ROW = re.compile(r'^taguru_http_requests_total\{method="GET",route="/contexts",status="200"\} (\S+)$', re.M)


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(resp.read().decode("utf-8"))


def _listed(text: str) -> float:
    found = ROW.search(text)
    assert found is not None, "no GET /contexts row"
    return float(found.group(1))


def _worker_pids(text: str) -> set[int]:
    return {int(p) for p in re.findall(r'^process_cpu_seconds_total\{pid="(\d+)"\}', text, re.M)}


def _until_workers(url: str, ready: Callable[[set[int]], bool]) -> set[int]:
    """The worker pids a scrape lists, once `ready` holds for them (a worker may still be starting)."""
    for _ in range(400):  # a readiness wait, not an assertion on time
        try:  # a connection the kernel had queued for a killed worker is reset
            pids = _worker_pids(_scrape(url))
        except OSError:
            pids = set()
        if ready(pids):
            return pids
        time.sleep(0.05)
    raise AssertionError("the workers never showed up")


def _get(url: str) -> None:
    with urllib.request.urlopen(url + "/contexts", timeout=10) as resp:  # a new connection each time
        assert resp.status == 200


@pytest.mark.parametrize("start", ["fork", "exec"])
def test_one_scrape_counts_the_requests_of_every_worker(tmp_path: Path, servers: list[Server], start: str) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log", ("--workers", "2"), TAGURU_WORKER_START=start)
    servers.append(server)
    pids = _until_workers(server.url, lambda pids: len(pids) == 2)
    assert server.proc.pid not in pids
    for _ in range(REQUESTS):
        _get(server.url)
    scrapes = [_scrape(server.url) for _ in range(6)]
    assert [_listed(text) for text in scrapes] == [REQUESTS] * 6
    assert all(_worker_pids(text) == pids for text in scrapes)
    for text in scrapes:
        assert "taguru_inflight_requests 0.0" in text and "taguru_ready 1.0" in text
        assert 'taguru_errors_total{kind="panic"} 0.0' in text and "\ntaguru_requests_shed_total 0.0" in text
        assert text.count("\n# TYPE taguru_http_requests_total counter") == 1
        assert "python_info{" in text and "_created" not in text
        assert re.search(r'^taguru_build_info\{python="[^"]+",version="[^"]+"\} 1\.0$', text, re.M)

    os.kill(min(pids), signal.SIGKILL)  # the supervisor starts a replacement; the dead worker's counts stay
    _until_workers(server.url, lambda now: min(pids) not in now and len(now) == 2)
    for _ in range(REQUESTS):
        _get(server.url)
    assert {_listed(_scrape(server.url)) for _ in range(4)} == {2 * REQUESTS}


def test_the_per_context_rows_add_up_over_the_workers(tmp_path: Path, servers: list[Server]) -> None:
    env = {"TAGURU_METRICS_PER_CONTEXT": "1"}
    server = Server(tmp_path / "data", tmp_path / "server.log", ("--workers", "2"), **env)
    servers.append(server)
    _until_workers(server.url, lambda pids: len(pids) == 2)
    server.ok("PUT", "/contexts/sake", {"description": "d"})
    schema = {
        "schema": 1,
        "mode": "warn",
        "closed_labels": False,
        "types": {"Brewery": {"is_a": []}, "Person": {"is_a": []}},
        "relations": {"杜氏": {"domain": ["Brewery"], "range": ["Person"]}},
    }
    server.ok("PUT", "/contexts/sake/schema", schema)
    server.ok(
        "POST",
        "/contexts/sake/associations",
        [{"subject": "田中", "label": "schema:type", "object": "Person", "weight": 1.0}],
    )
    found = 0
    for n in range(12):  # each on its own connection: both workers check some
        edge = {"subject": "田中", "label": "杜氏", "object": f"蔵{n}", "weight": 1.0}
        status, body = server.call("POST", "/contexts/sake/associations", [edge])
        assert status == 200, body
        found += body["schema_violations"]
    assert found >= 12
    row = re.compile(r'^taguru_context_schema_violations_total\{context="sake"\} (\S+)$', re.M)
    for _ in range(6):
        text = _scrape(server.url)
        assert float(row.findall(text)[0]) == found
        assert "taguru_shared_schema_violations" not in text  # the rows' source is never rendered as such
