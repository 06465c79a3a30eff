"""The reference's metric families in process: every fixed row rendered from the start, one
`taguru_searches_total` per served search of every operation (direct, cross-context per target, and
inside evidence), `taguru_errors_total` by cause (a refused durable write is `wal_refused` though it
answers 503; a full disk's 507 is not counted), `taguru_requests_shed_total` at the in-flight
ceiling only, the store gauges, and the supervisor's sweep of metric directories left behind."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Client, start_client
from test_evidence_endpoint import seed_sake
from test_store_health import refusing, serving

from taguru_server.server import metrics as metrics_module
from taguru_server.server.metrics import ERROR_KINDS, SEARCH_OPS
from taguru_server.server.metrics_shared import SharedMetricsDir
from taguru_server.server.state import INFLIGHT_KEY, REGISTRY_KEY

pytestmark = pytest.mark.anyio

SUMS = ("resident_bytes", "dead_edges", "dead_attributions", "unsourced_edges", "unsourced_weight")


async def scrape(client: Client) -> dict[str, float]:
    """Every sample of one scrape, by its name and labels as rendered."""
    status, text, headers = await client.call("GET", "/metrics")
    assert status == 200 and headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    rows = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            rows[name] = float(value)
    return rows


def searches(rows: dict[str, float]) -> dict[tuple[str, str], float]:
    found = {}
    for name, value in rows.items():
        m = re.fullmatch(r'taguru_searches_total\{op="(\w+)",outcome="(\w+)"\}', name)
        if m:
            found[(m.group(1), m.group(2))] = value
    return found


def errors(rows: dict[str, float]) -> dict[str, float]:
    return {kind: rows[f'taguru_errors_total{{kind="{kind}"}}'] for kind in ERROR_KINDS}


async def test_the_fixed_rows_are_rendered_before_anything_happens(client: Client) -> None:
    rows = await scrape(client)
    assert searches(rows) == {(op, outcome): 0.0 for op in SEARCH_OPS for outcome in ("hit", "empty")}
    assert len(searches(rows)) == 18
    assert errors(rows) == dict.fromkeys(ERROR_KINDS, 0.0)
    assert rows["taguru_requests_shed_total"] == 0.0
    assert (rows["taguru_contexts_registered"], rows["taguru_groups_registered"]) == (0.0, 0.0)
    assert rows["taguru_contexts_resident"] == 0.0
    await seed_sake(client)
    await client.ok("PUT", "/groups/all", {"members": ["sake"]})
    rows = await scrape(client)
    assert (rows["taguru_contexts_registered"], rows["taguru_groups_registered"]) == (1.0, 1.0)
    assert rows["taguru_contexts_resident"] == rows["taguru_contexts_loaded"] == 1.0


async def test_every_served_search_counts_once_by_operation_and_outcome(client: Client) -> None:
    await seed_sake(client)
    await client.ok("PUT", "/contexts/empty")
    before = searches(await scrape(client))
    calls: list[tuple[str, dict[str, Any]]] = [
        ("resolve", {"cue": "青嶺酒造"}),
        ("resolve", {"cue": "zzzz"}),
        ("resolve_label", {"cue": "杜氏"}),
        ("recall", {"cue": "青嶺酒造"}),
        ("query", {"subject": ["青嶺酒造"]}),
        ("query", {"subject": ["nobody"]}),
        ("activate", {"origins": ["青嶺酒造"]}),
        ("sources/search", {"query": "青嶺酒造 蔵元"}),
        ("sources/search", {"query": "qqqq"}),
        ("explore", {"origins": ["青嶺酒造"]}),
        ("paths", {"origins": ["青嶺酒造"], "targets": ["高瀬"]}),
    ]
    for route, body in calls:
        await client.ok("POST", f"/contexts/sake/{route}", body)
    await client.ok("POST", "/recall", {"contexts": ["sake", "empty"], "cue": "青嶺酒造"})
    await client.ok("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造", "zzzz"], "labels": ["杜氏"]})
    after = searches(await scrape(client))
    counted = {key: after[key] - before[key] for key in after if after[key] != before[key]}
    assert counted == {
        ("resolve", "hit"): 2,  # one direct, one evidence origin
        ("resolve", "empty"): 2,
        ("resolve_label", "hit"): 1,
        ("recall", "hit"): 2,  # direct, and the cross call's target `sake`
        ("recall", "empty"): 1,  # the cross call's target `empty`
        ("query", "hit"): 2,  # direct, and evidence's query lane
        ("query", "empty"): 1,
        ("activate", "hit"): 2,
        ("search_passages", "hit"): 2,
        ("search_passages", "empty"): 1,
        ("explore", "hit"): 1,
        ("paths", "hit"): 1,
    }


async def test_errors_count_by_cause_and_a_refused_durable_write_is_wal_refused(settings_factory: Any) -> None:
    async with serving(settings_factory()) as world:
        client, store = world.client, world.registry.persistence
        store._run_prepared = refusing("unavailable")  # type: ignore[method-assign]
        got, body, _h = await client.call("POST", "/contexts/k/associations", [{"subject": "a", "label": "r"}])
        assert got == 400, body  # refused before the store is asked: no error
        edge = [{"subject": "a", "label": "r", "object": "b", "weight": 1.0}]
        got, body, _h = await client.call("POST", "/contexts/k/associations", edge)
        assert (got, body["code"]) == (503, "unhealthy")
        store._run_prepared = refusing("storage_full")  # type: ignore[method-assign]
        got, _body, _h = await client.call("POST", "/contexts/k/associations", edge)
        assert got == 507  # a full disk is the quota's answer, not counted
        rows = await scrape(client)
        assert errors(rows) == {"io": 0.0, "load": 0.0, "panic": 0.0, "wal_refused": 1.0}


async def test_a_context_that_cannot_be_loaded_counts_load_and_a_crash_counts_panic(
    settings_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_factory()
    server, client, session = await start_client(settings)
    try:
        await seed_sake(client)
    finally:
        await session.close()
        await server.close()
    server, client, session = await start_client(settings_factory(TAGURU_PRELOAD="none"))
    try:
        from taguru_server.server.routes import graph

        def broken(*_args: Any) -> Any:
            raise RuntimeError("a bug")

        monkeypatch.setattr(server.app[REGISTRY_KEY].persistence, "load", broken)
        got, body, _h = await client.call("POST", "/contexts/sake/recall", {"cue": "青嶺酒造"})
        assert (got, body["code"]) == (500, "internal"), body
        monkeypatch.undo()
        monkeypatch.setattr(graph.lane_wire, "describe", broken)
        got, body, _h = await client.call("POST", "/contexts/sake/describe", {"concept": "青嶺酒造"})
        assert (got, body["code"]) == (500, "internal"), body
        assert errors(await scrape(client)) == {"io": 0.0, "load": 1.0, "panic": 1.0, "wal_refused": 0.0}
    finally:
        await session.close()
        await server.close()


async def test_only_the_in_flight_ceiling_sheds(settings_factory: Any) -> None:
    server, client, session = await start_client(
        settings_factory(TAGURU_MAX_CONCURRENT_REQUESTS="2", TAGURU_RATE_LIMIT_PER_MIN="1000")
    )
    try:
        server.app[INFLIGHT_KEY].count = 2
        for _ in range(3):
            assert (await client.call("GET", "/contexts"))[0] == 503
            assert (await client.call("PUT", "/contexts/x", {"description": "a body"}))[0] == 503
        server.app[INFLIGHT_KEY].count = 0
        rows = await scrape(client)
        assert rows["taguru_requests_shed_total"] == 6.0
        assert errors(rows) == dict.fromkeys(ERROR_KINDS, 0.0)  # an overload is no error
    finally:
        await session.close()
        await server.close()


async def until(client: Client, ready: Any) -> dict[str, float]:
    """A scrape once `ready` holds for it (the sums are brought up to date in the background)."""
    for _ in range(200):  # a readiness wait, not an assertion on time
        rows = await scrape(client)
        if ready(rows):
            return rows
        await asyncio.sleep(0.02)
    raise AssertionError("the sums never caught up")


async def test_the_store_sums_follow_writes_in_the_background(
    settings_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_module, "STATS_REFRESH_SECS", 0.02)
    monkeypatch.setattr(metrics_module, "STATS_SLICE", 1)  # one association per slice: the sum spans slices
    server, client, session = await start_client(settings_factory())
    try:
        rows = await scrape(client)
        assert [rows[f"taguru_{name}"] for name in SUMS] == [0.0] * len(SUMS)
        await seed_sake(client)
        edge = {"subject": "a", "label": "r", "object": "b", "weight": 2.0}  # no source: unsourced
        await client.ok("POST", "/contexts/sake/associations", [edge, {**edge, "object": "c", "weight": 0.5}])
        rows = await until(client, lambda rows: rows["taguru_unsourced_edges"] == 2.0)
        assert rows["taguru_unsourced_weight"] == 2.5 and rows["taguru_dead_edges"] == 0.0
        assert rows["taguru_resident_bytes"] > 1024
        await client.ok("POST", "/contexts/sake/associations/retract", {"subject": "a", "label": "r", "object": "b"})
        rows = await until(client, lambda rows: rows["taguru_dead_edges"] == 1.0)
        assert (rows["taguru_unsourced_edges"], rows["taguru_unsourced_weight"]) == (1.0, 0.5)
        stats = (await client.ok("GET", "/contexts/sake"))["result"]["stats"]
        assert (stats["dead_edges"], stats["unsourced_edges"], stats["dead_attributions"]) == (
            rows["taguru_dead_edges"],
            rows["taguru_unsourced_edges"],
            rows["taguru_dead_attributions"],
        )
    finally:
        await session.close()
        await server.close()


async def test_figures_computed_before_a_fork_are_taken_not_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork loader computes each context's sums (`precompute_sums`): a worker must not read every
    association again (each read would copy the pages holding them into the worker)."""
    from taguru_server.store.model.context import Context, Meta

    ctx = Context(1, "c", Meta(description="sums"))
    ctx.assert_association("a", "r", "b", 2.0, None, None)  # unsourced: the sums are not all zero
    fresh = metrics_module.ContextSums(lambda: [ctx])
    await fresh.update(ctx)
    expected = fresh.seen[ctx]
    assert expected[1]["unsourced_edges"] == 1.0 and expected[1]["unsourced_weight"] == 2.0
    metrics_module.precompute_sums(ctx)
    assert ctx.read_cache[metrics_module.SUMS_CACHE_KEY] == expected

    def forbidden(*_args: Any) -> Any:
        raise AssertionError("the figures were recomputed")

    monkeypatch.setattr(Context, "edge_sums", forbidden)
    monkeypatch.setattr(Context, "footprint_bytes", forbidden)
    worker = metrics_module.ContextSums(lambda: [ctx])
    await worker.update(ctx)
    assert worker.seen[ctx] == expected
    ctx.meta.rev_graph += 1  # a write after the fork: recomputed
    with pytest.raises(AssertionError, match="recomputed"):
        await worker.update(ctx)


def test_a_supervisor_start_removes_the_metric_dirs_of_gone_supervisors(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphan = tmp_path / f"taguru-metrics-{gone.pid}-abc"
    orphan.mkdir()
    (orphan / "counter_1.db").write_bytes(b"\0" * 8)
    alive = tmp_path / f"taguru-metrics-{os.getpid()}-def"  # a running supervisor's: kept
    alive.mkdir()
    other = tmp_path / "taguru-metrics-notapid"
    other.mkdir()
    shared = SharedMetricsDir(str(tmp_path))
    try:
        assert not orphan.exists() and alive.exists() and other.exists()
        assert Path(shared.path).name.startswith(f"taguru-metrics-{os.getpid()}-")
        assert oct(Path(shared.path).stat().st_mode & 0o777) == "0o700"
    finally:
        shared.remove()
    assert not Path(shared.path).exists()
