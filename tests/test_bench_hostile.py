"""Process level: the hostile-client and crash-safety benchmarks at small scale (bench/hostile.py, bench/faults.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_sigkills_under_concurrent_writes_lose_no_acknowledged_write(tmp_path: Path) -> None:
    """8 writers, 2 SIGKILLs: every write answered 200 is there after the restart, and nothing nobody sent."""
    sys.path.insert(0, str(BENCH))
    from faults import crash_run, render

    outcome = crash_run(tmp_path / "faults", writers=8, kills=2, gap=(0.5, 1.5), seed=3)
    report = render(outcome, 8)
    assert outcome.lost == [] and outcome.phantoms == [], report
    assert outcome.acked > 100 and len(outcome.kills) == 2, report
    assert outcome.present >= outcome.acked and outcome.tracebacks == 0, report


def test_normal_requests_stay_200_next_to_hostile_clients(tmp_path: Path) -> None:
    """50 slow bodies and 50 header tricklers plus 5 big bodies: every normal request is answered 200, and the
    server ends the hostile connections itself."""
    sys.path.insert(0, str(BENCH))
    from attack import served
    from hostile import render, run

    settings = {"TAGURU_HEADER_TIMEOUT_SECS": "2", "TAGURU_REQUEST_TIMEOUT_SECS": "3"}
    # the hostile clients hold on for 7 s: a slow body is cut by the 3 s deadline
    with served(tmp_path / "data", tmp_path / "server.log", settings) as url:
        phases, figures = asyncio.run(run(url, slow=50, tricklers=50, duration=7.0, baseline=1.0))
    report = render(phases, figures)
    assert [p.name for p in phases] == ["baseline", "hostile"], report
    for phase in phases:
        assert phase.statuses and phase.not_200 == 0, report
    assert all(c.cut for c in figures.slow) and all(c.cut for c in figures.tricklers), report
    assert all(400 <= s < 500 for s in figures.big_statuses) and figures.health_waits, report
