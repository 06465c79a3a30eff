"""Per-context storage quotas (TAGURU_CONTEXT_QUOTAS): the declaration's grammar and refusal texts, the 507 at a
declared ceiling for every gated growth write, retractions and deletes let through, a refused write changes
nothing, and the used bytes are the sum the `taguru_context_disk_bytes` rows report (both backends)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
from conftest import Client, start_client
from substrate_support import assert_error

from taguru_server.server.cache_config import Quota, QuotaRefused, parse_quotas

pytestmark = pytest.mark.anyio

SHAPE = 'TAGURU_CONTEXT_QUOTAS is not the documented JSON shape ({"name": {"storage_bytes": …, "cache_bytes": …}})'


def test_the_declaration_grammar() -> None:
    assert parse_quotas(None) == {}
    assert parse_quotas("{}") == {}
    got = parse_quotas('{"sake": {"storage_bytes": 1073741824, "cache_bytes": 134217728}, "later": {"cache_bytes": 1}}')
    assert got == {"sake": Quota(1073741824, 134217728), "later": Quota(None, 1)}


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("", "TAGURU_CONTEXT_QUOTAS is set but empty"),
        ("  ", "TAGURU_CONTEXT_QUOTAS is set but empty"),
        ("{", SHAPE + ": "),
        (
            '{"a": {"storage_bytes": 1, "disk": 2}}',
            SHAPE + ": unknown field `disk`, expected `storage_bytes` or `cache_bytes`",
        ),
        ('{"a": {"storage_bytes": -1}}', SHAPE + ": "),
        ('{"a": {"storage_bytes": 1.5}}', SHAPE + ": "),
        ('{"a": {"storage_bytes": NaN}}', SHAPE + ": "),
        ('{"a": 5}', SHAPE + ": "),
        ("[]", SHAPE + ": "),
        (
            '{"a": {}}',
            "TAGURU_CONTEXT_QUOTAS declares no ceiling for 'a' — give it storage_bytes, cache_bytes, or drop the entry",
        ),
        (
            '{"a": {"storage_bytes": 0}}',
            "TAGURU_CONTEXT_QUOTAS gives 'a' a zero ceiling, which would refuse every write (storage) or every "
            "residency (cache) — scope keys to read-only via TAGURU_KEY_SCOPES if that is the intent",
        ),
    ],
)
def test_a_broken_declaration_is_refused_with_the_reference_text(raw: str, text: str) -> None:
    with pytest.raises(QuotaRefused) as refused:
        parse_quotas(raw)
    message = str(refused.value)
    assert message == text if not text.endswith(": ") else message.startswith(text), message


def expected(name: str, used: int, ceiling: int) -> str:
    return (
        f"context '{name}' is at its storage quota ({used} of {ceiling} bytes): retract or compact to shrink it, "
        "or raise its TAGURU_CONTEXT_QUOTAS entry"
    )


CEILING = 3000


@pytest.fixture
async def quoted(settings_factory, monkeypatch) -> AsyncIterator[Client]:
    monkeypatch.setenv("TAGURU_METRICS_PER_CONTEXT", "1")
    settings = attrs.evolve(
        settings_factory(),
        quotas=parse_quotas(f'{{"sake": {{"storage_bytes": {CEILING}}}, "free": {{"cache_bytes": 9}}}}'),
    )
    server, client, session = await start_client(settings)
    try:
        yield client
    finally:
        await session.close()
        await server.close()


async def disk_rows(client: Client) -> dict[str, dict[str, float]]:
    await client.ok("POST", "/flush", content_type=None)
    async with client.session.get(client.base + "/metrics") as resp:
        text = (await resp.read()).decode()
    rows: dict[str, dict[str, float]] = {}
    for name, file, value in re.findall(
        r'^taguru_context_disk_bytes\{context="([^"]*)",file="([^"]*)"\} (\S+)$', text, re.M
    ):
        rows.setdefault(name, {})[file] = float(value)
    return rows


async def metric(client: Client, sample: str) -> float:
    async with client.session.get(client.base + "/metrics") as resp:
        text = (await resp.read()).decode()
    line = next(line for line in text.splitlines() if line.startswith(sample + " "))
    return float(line.rsplit(" ", 1)[1])


def rows_of(n: int, source: str) -> list[dict[str, Any]]:
    return [
        {"subject": f"蔵{i}", "label": "杜氏", "object": f"人{i}", "weight": 1.0, "source": source} for i in range(n)
    ]


async def test_a_growth_write_at_the_ceiling_is_refused_and_changes_nothing(quoted: Client) -> None:
    client = quoted
    for name in ("sake", "free"):
        await client.ok("PUT", f"/contexts/{name}", {"description": "d"})
    # under the ceiling at the start: the write lands whole, even though it crosses the ceiling
    await client.ok("POST", "/contexts/sake/sources", {"passages": {"a.md": "蔵の杜氏は高瀬。" * 20}})
    await client.ok("POST", "/contexts/sake/associations", rows_of(40, "a.md"))
    sizes = await disk_rows(client)
    assert set(sizes) == {"free", "sake"} and set(sizes["sake"]) == {
        "image",
        "passages",
        "passages_wal",
        "sidecars",
        "wal",
    }
    used = int(sum(sizes["sake"].values()))
    assert used >= CEILING and sizes["sake"]["passages"] > 0 and sizes["sake"]["wal"] == 0
    before = (await client.ok("GET", "/contexts/sake"))["result"]
    refusal = expected("sake", used, CEILING)
    growth = [
        ("/contexts/sake/associations", rows_of(1, "b.md")),
        ("/contexts/sake/aliases", {"concepts": {"くら": "蔵0"}}),
        ("/contexts/sake/sources", {"passages": {"b.md": "新しい段落。"}}),
    ]
    for path, body in growth:
        assert_error(await client.call("POST", path, body), 507, "storage_full", refusal)
    assert (await client.ok("GET", "/contexts/sake"))["result"] == before  # nothing was applied
    assert await metric(client, "taguru_storage_quota_refusals_total") == 3
    # a context without a storage ceiling grows freely
    await client.ok("POST", "/contexts/free/associations", rows_of(60, "f.md"))
    # shrinking writes are let through at the ceiling
    retract = {"subject": "蔵0", "label": "杜氏", "object": "人0"}
    assert (await client.ok("POST", "/contexts/sake/associations/retract", retract))["result"]["retracted"] is True
    await client.ok("POST", "/contexts/sake/sources/retract", {"source": "a.md"})
    await client.ok("POST", "/contexts/sake/compact", content_type=None)
    await client.ok("PATCH", "/contexts/sake", {"description": "still writable"})
    shrunk = await disk_rows(client)
    assert sum(shrunk["sake"].values()) < CEILING  # under it again: growth is accepted
    await client.ok("POST", "/contexts/sake/associations", rows_of(1, "c.md"))
    await client.ok("DELETE", "/contexts/sake", content_type=None)
    rows = await disk_rows(client)
    assert "sake" not in rows


async def test_the_quota_gauge_rows_name_the_declared_ceilings(quoted: Client) -> None:
    client = quoted
    await client.ok("PUT", "/contexts/free", {"description": "d"})
    await client.ok("PUT", "/contexts/sake", {"description": "d"})
    async with client.session.get(client.base + "/metrics") as resp:
        text = (await resp.read()).decode()
    assert 'taguru_context_quota_bytes{context="free",resource="cache"} 9.0' in text
    assert f'taguru_context_quota_bytes{{context="sake",resource="storage"}} {CEILING}.0' in text
    assert 'context="free",resource="storage"' not in text


def stream(*batches: tuple[str, int]) -> bytes:
    """An import stream: per (source, n) one batch into `sake` with n associations."""
    lines: list[dict[str, Any]] = []
    for source, n in batches:
        lines.append({"taguru_batch": 1, "context": "sake", "source": source, "create": {"description": "d"}})
        lines += [{"subject": f"{source}{i}", "label": "杜氏", "object": f"人{i}", "weight": 1.0} for i in range(n)]
    return ("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n").encode()


async def test_an_import_stops_at_the_batch_that_finds_its_context_at_the_quota(quoted: Client) -> None:
    client = quoted
    await client.ok("PUT", "/contexts/sake", {"description": "d"})
    ndjson = "application/x-ndjson"
    # batch 1 lands under the ceiling and crosses it; batch 2 is not attempted
    resp = await client.call("POST", "/import", raw=stream(("a", 40), ("b", 1), ("c", 1)), content_type=ndjson)
    used = int(sum((await disk_rows(client))["sake"].values()))
    body = assert_error(
        resp,
        507,
        "storage_full",
        "batch 2 of 3 (context 'sake', source 'b') not attempted — the 1 batch(es) before it landed durably; "
        "retracting or compacting the context (or raising its quota), then re-POSTing the remaining stream is exact "
        "(each batch replaces its own source): " + expected("sake", used, CEILING),
    )
    assert body["integrity"] == "durable_prefix" and body["durable_batches"] == 1, body
    assert (await client.ok("GET", "/contexts/sake"))["result"]["stats"]["associations"] == 40
    # one batch: no prefix, nothing written; a dry run is not judged
    single = await client.call("POST", "/import", raw=stream(("d", 1)), content_type=ndjson)
    body = assert_error(single, 507, "storage_full", expected("sake", used, CEILING))
    assert body["integrity"] == "nothing_written", body
    await client.ok("POST", "/import?dry_run=true", raw=stream(("d", 1)), content_type=ndjson)
    # a header-only batch (a pure source retraction) is let through
    header = json.dumps({"taguru_batch": 1, "context": "sake", "source": "a"}) + "\n"
    await client.ok("POST", "/import", raw=header, content_type=ndjson)
    assert await metric(client, "taguru_storage_quota_refusals_total") == 2


async def test_a_promote_into_a_destination_at_its_quota_lands_the_prefix_then_stops(quoted: Client) -> None:
    client = quoted
    for name in ("scratch", "sake"):
        await client.ok("PUT", f"/contexts/{name}", {"description": "d"})
    for source, n in (("a", 40), ("b", 1)):
        rows = [{**row, "source": source} for row in rows_of(n, source)]
        rows = [{**row, "subject": f"{source}{i}"} for i, row in enumerate(rows)]
        await client.ok("POST", "/contexts/scratch/associations", rows)
    body = {"into": "sake", "sources": ["a", "b"]}
    preview = await client.ok("POST", "/contexts/scratch/promote?dry_run=true", body)  # a dry run is not judged
    assert len(preview["result"]["batches"]) == 2
    resp = await client.call("POST", "/contexts/scratch/promote", body)
    used = int(sum((await disk_rows(client))["sake"].values()))
    refused = assert_error(
        resp,
        507,
        "storage_full",
        "batch 2 of 2 (context 'sake', source 'b') not attempted — the 1 batch(es) before it landed durably; "
        "retracting or compacting the destination (or raising its quota), then re-calling promote is exact "
        "(each batch replaces its own source): " + expected("sake", used, CEILING),
    )
    assert refused["integrity"] == "durable_prefix" and refused["durable_batches"] == 1, refused
    assert (await client.ok("GET", "/contexts/sake"))["result"]["stats"]["associations"] == 40
