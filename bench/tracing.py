"""What tracing costs an evidence request: CPU time per request, client and server in one process
(aiohttp test server over loopback), tracing off, or on with spans batched (BatchSpanProcessor, as in
production) into memory.

CPU time rather than wall time, so other load on the machine moves the numbers less; compare the
best of several rounds, and runs made one after another on the same machine.

    .venv/bin/python bench/tracing.py [--requests 1000] [--rounds 5] [--on] [--direct]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from taguru_server.server.app import build_app
from taguru_server.server.config import load_settings

BODY = b'{"origins":["alpha","beta"],"labels":["rel"]}'


async def seed(session: ClientSession, base: str) -> None:
    async with session.put(base + "/contexts/b", json={"description": "bench"}) as r:
        assert r.status == 200, await r.text()
    text = {f"d{i}.md": f"alpha beta gamma delta paragraph {i} about alpha and beta." for i in range(50)}
    locs = {k: [{"locator": {"kind": "page", "value": "1"}, "paragraph": 0}] for k in text}
    async with session.post(base + "/contexts/b/sources", json={"locators": locs, "passages": text}) as r:
        assert r.status == 200, await r.text()
    assocs = [
        {"label": "rel", "object": f"o{i}", "paragraph": 0, "source": f"d{i}.md", "subject": "alpha", "weight": 1.0}
        for i in range(50)
    ]
    async with session.post(base + "/contexts/b/associations", json=assocs) as r:
        assert r.status == 200, await r.text()


def make_app(data: Path, on: bool) -> Any:
    settings = load_settings({"TAGURU_DATA_DIR": str(data)})
    if not on:
        return build_app(settings)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    return build_app(settings, tracer_provider=provider)


async def in_process(app: Any, requests: int, rounds: int) -> list[float]:
    """The evidence handler through the app's in-process dispatch (no HTTP, no middlewares)."""
    from taguru_server.server.auth import OPEN
    from taguru_server.server.mcp.tools import JSON, Request
    from taguru_server.server.state import DISPATCH_KEY

    dispatch = app[DISPATCH_KEY]
    out = []
    for _ in range(rounds):
        cpu = time.process_time()
        for _ in range(requests):
            routed = Request("POST", "/contexts/b/evidence", {}, BODY, JSON)
            status, _raw = await dispatch(OPEN, time.monotonic() + 60, routed)
            assert status == 200
        out.append((time.process_time() - cpu) / requests * 1e6)
    return out


async def run(requests: int, rounds: int, on: bool, direct: bool = False) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        app = make_app(Path(tmp), on)
        server = TestServer(app)
        await server.start_server()
        base = str(server.make_url("")).rstrip("/")
        medians = []
        async with ClientSession() as session:
            await seed(session, base)
            if direct:
                medians = await in_process(app, requests, rounds)
                rounds = 0
            headers = {"Content-Type": "application/json"}
            for _ in range(rounds):
                cpu = time.process_time()
                for _ in range(requests):
                    async with session.post(base + "/contexts/b/evidence", data=BODY, headers=headers) as r:
                        await r.read()
                        assert r.status == 200
                medians.append((time.process_time() - cpu) / requests * 1e6)
        await server.close()
        return medians


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--on", action="store_true", help="tracing on, spans kept in memory")
    p.add_argument("--direct", action="store_true", help="the handler in process: no HTTP, no middlewares")
    a = p.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    medians = asyncio.run(run(a.requests, a.rounds, a.on, a.direct))
    rounds = [round(m) for m in medians]
    mode = ("on" if a.on else "off") + (" (handler only)" if a.direct else "")
    print(
        f"tracing {mode}: CPU per request (us) by round {rounds}; "
        f"best {min(medians):.0f} us, median {statistics.median(medians):.0f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
