"""Generated attack: schemathesis over `/openapi.json` of a real seeded server, and what it has found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import Client
from substrate_support import ctx_path

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.slow
def test_generated_cases_meet_the_published_schema(tmp_path: Path) -> None:
    """Every schemathesis check over every operation, and not one failure: no 5xx (but the contract's 501),
    every answer one `/openapi.json` declares, schema-valid requests accepted, schema-violating ones
    refused, a missing or wrong token refused, 405s with `Allow`."""
    sys.path.insert(0, str(BENCH))
    from attack import ATTACK_SETTINGS, CHECKS, attack, render, served

    assert CHECKS == ("all",)
    with served(tmp_path / "data", tmp_path / "server.log", ATTACK_SETTINGS) as url:
        passes = attack(url, examples=10, seed_value=20261201, work=tmp_path / "attack")
    report = render(passes)
    assert all(p.clean for p in passes), report
    seeded, names = passes
    assert names.tested == names.operations >= 60, report  # every operation
    assert seeded.tested == seeded.operations - 1, report  # all but DELETE /contexts/{name}
    assert sum(p.cases for p in passes) >= 5000, report


@pytest.mark.anyio
async def test_a_context_name_may_hold_a_newline(client: Client) -> None:
    """`%0A` in the name segment is routed like any other byte: the envelope, never the framework's plain 404."""
    status, parsed, headers = await client.call("POST", ctx_path("no\nsuch", "query"), {"label": "x"})
    assert status == 404 and isinstance(parsed, dict) and parsed["status"] == "error", parsed
    assert headers["Content-Type"].startswith("application/json")
    status, parsed, _h = await client.call("PUT", ctx_path("two\nlines"), content_type=None)
    assert status == 200 and parsed["result"] is True, parsed
    status, parsed, _h = await client.call("GET", ctx_path("two\nlines"))
    assert status == 200 and parsed["result"]["name"] == "two\nlines", parsed
