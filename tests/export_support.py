"""A generated corpus shaped for exact export round trips, and in-process servers to move it between."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from conftest import Client, start_client

from taguru_server.server.config import load_settings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

import generate as bench_generate  # noqa: E402

NDJSON = "application/x-ndjson"
BIG = {"TAGURU_MAX_BODY_BYTES": str(512 * 1024 * 1024), "TAGURU_REQUEST_TIMEOUT_SECS": "600"}


def exact_corpus(paragraphs: int, seed: int = 7) -> tuple[str, dict[str, list[Any]]]:
    """bench/generate.py's corpus, reshaped to avoid the documented round-trip differences (A.4).

    - sources are renamed `{batch:06d}-{name}`, so UTF-8 byte order of source ids is the stream's
      own order: export's batch order then re-creates every id in the original order (no D3);
    - weights are rounded to eighths, and one source gives every assertion of a triple the weight
      of its first, so a record of `n` lines re-adds as `n` equal lines, the same additions in the
      same order (no D6);
    - nothing is retracted and every association is sourced, so there are no dead edges, no
      unlinked records, no sourceless share and no dead aliases (no D1, D2, D4, D5).
    """
    corpus = bench_generate.generate(paragraphs, seed)
    out: list[str] = []
    batch = 0
    first: dict[tuple[str, str, str], float] = {}
    for line in corpus.text.splitlines():
        record = json.loads(line)
        if "taguru_batch" in record:
            batch += 1
            record["source"] = f"{batch:06d}-{record['source']}"
            first = {}
        elif "subject" in record:
            triple = (record["subject"], record["label"], record["object"])
            record["weight"] = first.setdefault(triple, round(record["weight"] * 8) / 8 or 0.125)
        out.append(json.dumps(record, ensure_ascii=False))
    return "\n".join(out) + "\n", bench_generate.queries(corpus, count=30)


@asynccontextmanager
async def server(data_dir: Path, **env: str) -> AsyncIterator[Client]:
    settings = load_settings({"TAGURU_DATA_DIR": str(data_dir), **BIG, **env})
    srv, client, session = await start_client(settings)
    try:
        yield client
    finally:
        await session.close()
        await srv.close()


async def export_bytes(client: Client, name: str) -> bytes:
    async with client.session.get(f"{client.base}/contexts/{quote(name, safe='')}/export") as resp:
        body = await resp.read()
        assert resp.status == 200, body[:500]
        return body


async def import_bytes(client: Client, stream: bytes) -> Any:
    return await client.ok("POST", "/import", raw=stream, content_type=NDJSON)


def without_time(body: Any) -> Any:
    if isinstance(body, dict):
        return {k: without_time(v) for k, v in body.items() if k != "time"}
    if isinstance(body, list):
        return [without_time(v) for v in body]
    return body


async def answers(client: Client, name: str, queries: dict[str, list[Any]]) -> list[Any]:
    """The sources listing, 30 passage searches and 30 evidence packages, minus `time`."""
    path = f"/contexts/{quote(name, safe='')}"
    got = [await client.ok("GET", f"{path}/sources?limit=1000")]
    for q in queries["search"][:30]:
        got.append(await client.ok("POST", f"{path}/sources/search", {"query": q, "limit": 20}))
    for origins in queries["activate"][:30]:
        got.append(await client.ok("POST", f"{path}/evidence", {"origins": origins}))
    return [without_time(x) for x in got]
