"""The shipped dashboard and alert rules (deploy/observability/): the dashboard is the reference's
(settings and its nine panels verbatim), every metric either of them reads is a family a real
server exports (scraped after some requests, with an embedding provider and a reranker
configured so their breaker families render), and `promtool check rules` accepts the rules
(required in CI, skipped locally without promtool)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client
from fake_embedder import FRUITY, FakeEmbedder, table
from test_evidence_endpoint import seed_sake

from taguru_server.server.app import build_app
from taguru_server.server.cache_config import parse_quotas
from taguru_server.server.providers.reranker import RerankSettings

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "observability" / "grafana" / "dashboards" / "taguru.json"
RULES = ROOT / "deploy" / "observability" / "prometheus" / "alerts.yml"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
# families the retrieval cache and the per-context storage work export (not rendered by this server yet)
NAME = re.compile(r"\btaguru_[a-z0-9_]+\b")

# the reference's panels: id, title, type, expression, legend, unit
PANELS = [
    (1, "Request rate by route", "timeseries", "sum(rate(taguru_http_requests_total[5m])) by (route, status)",
     "{{route}} {{status}}", None),
    (2, "Request duration p95 by route", "timeseries",
     "histogram_quantile(0.95, sum(rate(taguru_http_request_duration_seconds_bucket[5m])) by (le, route))",
     "{{route}}", "s"),
    (3, "In-flight requests", "stat", "taguru_inflight_requests", None, None),
    (4, "Requests shed (rate limit) total", "stat", "taguru_requests_shed_total", None, None),
    (5, "Build info", "table", "taguru_build_info", None, None),
    (6, "Errors by kind", "timeseries", "sum(rate(taguru_errors_total[5m])) by (kind)", "{{kind}}", None),
    (7, "Search outcomes by op", "timeseries", "sum(rate(taguru_searches_total[5m])) by (op, outcome)",
     "{{op}} {{outcome}}", None),
    (8, "Retrieval cache hit ratio", "timeseries",
     'sum(rate(taguru_retrieval_cache_total{outcome="hit"}[5m])) / sum(rate(taguru_retrieval_cache_total[5m]))',
     "hit ratio", "percentunit"),
    (9, "Context disk bytes by file", "timeseries", "taguru_context_disk_bytes", "{{context}} {{file}}", "bytes"),
]  # fmt: skip


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def rule_expressions() -> list[str]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


def test_the_dashboard_is_the_references() -> None:
    board = dashboard()
    assert (board["title"], board["uid"], board["schemaVersion"], board["refresh"]) == (
        "taguru",
        "taguru-overview",
        39,
        "10s",
    )
    assert board["time"]["from"] == "now-1h" and board["templating"]["list"] == []
    panels = {panel["id"]: panel for panel in board["panels"]}
    for pid, title, kind, expr, legend, unit in PANELS:
        panel = panels[pid]
        assert (panel["title"], panel["type"]) == (title, kind)
        [target] = panel["targets"]
        assert target["expr"] == expr and target.get("legendFormat") == legend
        assert panel["fieldConfig"]["defaults"].get("unit") == unit
    for panel in board["panels"]:
        assert panel["datasource"] == DATASOURCE and all(t["datasource"] == DATASOURCE for t in panel["targets"])
    assert len(set(panels)) == len(board["panels"])


async def exported_names(settings_factory: Any) -> set[str]:
    """The sample names of one scrape of a server that served some requests (evidence with a rerank,
    searches, a refused call, a flush), an embedding provider, a reranker and a storage quota configured."""
    provider = TestServer(FakeEmbedder(table(FRUITY)).app())
    await provider.start_server()
    settings = attrs.evolve(
        settings_factory(TAGURU_EMBED_URL=str(provider.make_url("/v1/embeddings")), TAGURU_EMBED_MODEL="m"),
        quotas=parse_quotas('{"sake": {"storage_bytes": 100000000}}'),
    )
    rerank = RerankSettings("http://127.0.0.1:9/rerank", "stub-reranker", None, 1)
    server = TestServer(build_app(settings, rerank=rerank))
    await server.start_server()
    session = ClientSession()
    client = Client(session, str(server.make_url("")).rstrip("/"))
    try:
        await seed_sake(client)
        await client.ok("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"], "rerank": {}})
        await client.ok("POST", "/contexts/sake/sources/search", {"query": "青嶺酒造"})
        assert (await client.call("GET", "/contexts/ghost"))[0] == 404
        await client.ok("POST", "/flush", content_type=None)  # the disk sizes are measured
        status, text, _h = await client.call("GET", "/metrics")
        assert status == 200
    finally:
        await session.close()
        await server.close()
        await provider.close()
    return {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and line[0] != "#"}


@pytest.mark.anyio
async def test_every_metric_the_dashboard_and_the_rules_read_is_exported(settings_factory: Any, monkeypatch) -> None:
    monkeypatch.setenv("TAGURU_METRICS_PER_CONTEXT", "1")  # the per-context disk and quota rows
    exported = await exported_names(settings_factory)
    used = {name for expr in dashboard_expressions() + rule_expressions() for name in NAME.findall(expr)}
    assert len(used) >= 12  # the expressions were read
    assert not used - exported, f"not exported by the server: {sorted(used - exported)}"
    for expr in rule_expressions():  # the one series Prometheus makes itself
        assert set(re.findall(r"\b([a-z_]+)\{", expr)) <= {"up", *used}


def test_promtool_accepts_the_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (.ci/run installs Debian's prometheus)")
        pytest.skip("promtool is not installed (CI installs it via .ci/run)")
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 11 rules found" in done.stdout
