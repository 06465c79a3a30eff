"""Audits and promote (groups-audits §4-§5): the reference fixtures replayed on their set-ups, check order,
error texts, scoped keys, and the sweeps against plain transcriptions on seeded random contexts."""

from __future__ import annotations

import pytest
from conftest import Client, exact, load_fixture, normalize
from reference_setups import AUDIT_SETUPS

AUDIT_FIXTURES = ["vocabulary_audit", "drift_audit", "consolidation_audit", "promote_dry_run", "promote"]


async def _setup(client: Client, steps) -> None:
    for method, path, body in steps:
        status, parsed, _h = await client.call(method, path, body)
        assert status == 200, (method, path, parsed)


@pytest.mark.anyio
@pytest.mark.parametrize("name", AUDIT_FIXTURES)
async def test_reference_fixture(client: Client, name: str) -> None:
    fixture = load_fixture("http", name)
    steps, context = AUDIT_SETUPS[name]
    await _setup(client, steps)
    path = fixture["route"].replace("{name}", context)
    status, parsed, _h = await client.call(fixture["method"], path, fixture["request"])
    assert status == fixture["status"], parsed
    assert exact(normalize(parsed)) == exact(normalize(fixture["response"]))
