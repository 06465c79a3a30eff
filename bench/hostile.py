"""Hostile clients against a seeded server: what normal traffic sees while hundreds of connections misbehave.

    .venv/bin/python bench/hostile.py                              # 300 slow bodies, 300 header tricklers, own server
    .venv/bin/python bench/hostile.py --slow 600 --tricklers 600 --duration 30
    .venv/bin/python bench/hostile.py --url http://127.0.0.1:8248  # a running server holding the demo corpus

Two phases over the same server, each with the same stream of normal requests (`GET /health` and
`POST /contexts/demo/evidence`, alternating, on a few keep-alive connections):

* `baseline`: the normal stream alone;
* `hostile`: the normal stream while `--slow` clients announce a 100 kB evidence body and send it
  at 1 byte/s, `--tricklers` clients send request-header bytes at 2 bytes/s, and, halfway
  through, 5 concurrent ≈ 4 MB evidence bodies arrive (each refused with a 4xx once decoded)
  while a probe times `GET /health` on its own connection.

A started server runs with its default limits unless `--header-timeout`, `--request-timeout` or
`--min-body-rate` are given; it is seeded like the attack run (the demo corpus, context `demo`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import attrs
from attack import served

EVIDENCE = {"origins": ["青嶺酒造"], "budget": {"max_items": 10}}
SLOW_HEAD = (
    b"POST /contexts/demo/evidence HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100000\r\n\r\n{"
)
TRICKLED_HEAD = b"GET /contexts HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
BIG_BODY = json.dumps({"origins": ["abc"] * 600_000}).encode()  # ≈ 4.2 MB, past the origins limit


@attrs.frozen
class Phase:
    """The normal stream of one phase: per-request start (seconds into the phase), latency and status (0: none)."""

    name: str
    seconds: float
    starts: list[float]
    latencies: list[float]
    statuses: list[int]

    @property
    def slowest_at(self) -> float:
        """When the slowest request started, seconds into the phase."""
        return self.starts[self.latencies.index(max(self.latencies))] if self.latencies else 0.0

    @property
    def not_200(self) -> int:
        return sum(1 for s in self.statuses if s != 200)


@attrs.frozen
class Cut:
    """One hostile connection: whether the server ended it, after how long, and what it answered (0: nothing)."""

    cut: bool
    seconds: float
    status: int


@attrs.frozen
class Hostile:
    """Everything the hostile phase measured besides the normal stream."""

    slow: list[Cut]
    tricklers: list[Cut]
    big_statuses: list[int]
    big_seconds: float
    health_waits: list[float]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.") else 0


async def slow_body(host: str, port: int, give_up: float) -> Cut:
    """Announce a 100 kB body, then send one byte a second until the server answers or closes."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return Cut(False, time.perf_counter() - started, -1)
    try:
        writer.write(SLOW_HEAD)
        while time.perf_counter() - started < give_up:
            try:
                data = await asyncio.wait_for(reader.read(1024), 1.0)
            except TimeoutError:
                writer.write(b" ")
                await writer.drain()
                continue
            return Cut(True, time.perf_counter() - started, _status(data))
        return Cut(False, time.perf_counter() - started, 0)
    except ConnectionError:
        return Cut(True, time.perf_counter() - started, 0)
    finally:
        writer.close()


async def trickler(host: str, port: int, give_up: float) -> Cut:
    """Send request-header bytes one at a time, twice a second, until the server closes the connection."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return Cut(False, time.perf_counter() - started, -1)
    try:
        for i in range(len(TRICKLED_HEAD)):
            if time.perf_counter() - started > give_up:
                break
            writer.write(TRICKLED_HEAD[i : i + 1])
            await writer.drain()
            try:
                data = await asyncio.wait_for(reader.read(1024), 0.5)
            except TimeoutError:
                continue
            return Cut(True, time.perf_counter() - started, _status(data))
        return Cut(False, time.perf_counter() - started, 0)
    except ConnectionError:
        return Cut(True, time.perf_counter() - started, 0)
    finally:
        writer.close()


async def big_body(host: str, port: int) -> int:
    """One ≈ 4 MB evidence body on a fresh connection; the answer's status (0: none)."""
    head = (
        b"POST /contexts/demo/evidence HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BIG_BODY)
    )
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head + BIG_BODY)
        await writer.drain()
        return _status(await asyncio.wait_for(reader.read(), 60))
    except (ConnectionError, TimeoutError):
        return 0
    finally:
        writer.close()


async def health_probe(host: str, port: int, stop: asyncio.Event) -> list[float]:
    """`GET /health` over one keep-alive connection every 20 ms until `stop`; each wait (inf: not 200)."""
    waits: list[float] = []
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while not stop.is_set():
            started = time.perf_counter()
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
            await reader.readexactly(length)
            waits.append(time.perf_counter() - started if head.startswith(b"HTTP/1.1 200") else float("inf"))
            await asyncio.sleep(0.02)
    finally:
        writer.close()
    return waits


async def normal_loop(
    session: aiohttp.ClientSession, url: str, stop_at: float, interval: float, out: list[tuple[float, float, int]]
) -> None:
    """Alternate `GET /health` and an evidence request, `interval` apart, until `stop_at`."""
    n = 0
    while time.perf_counter() < stop_at:
        n += 1
        started = time.perf_counter()
        try:
            if n % 2:
                request = session.get(url + "/health")
            else:
                request = session.post(url + "/contexts/demo/evidence", json=EVIDENCE)
            async with request as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError):
            status = 0
        out.append((started, time.perf_counter() - started, status))
        await asyncio.sleep(interval)


async def normal_stream(url: str, name: str, duration: float, connections: int, interval: float) -> Phase:
    out: list[tuple[float, float, int]] = []
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections), timeout=timeout) as session:
        started = time.perf_counter()
        stop_at = started + duration
        await asyncio.gather(*(normal_loop(session, url, stop_at, interval, out) for _ in range(connections)))
        seconds = time.perf_counter() - started
    return Phase(name, seconds, [a - started for a, _t, _s in out], [t for _a, t, _s in out], [s for _a, _t, s in out])


async def big_bodies(host: str, port: int, delay: float, count: int) -> tuple[list[int], float, list[float]]:
    """After `delay`, `count` concurrent big bodies while `/health` is probed; (statuses, seconds, probe waits)."""
    await asyncio.sleep(delay)
    stop = asyncio.Event()
    probe = asyncio.create_task(health_probe(host, port, stop))
    await asyncio.sleep(0.1)
    started = time.perf_counter()
    statuses = await asyncio.gather(*(big_body(host, port) for _ in range(count)))
    seconds = time.perf_counter() - started
    await asyncio.sleep(0.1)
    stop.set()
    return list(statuses), seconds, await probe


async def hostile_phase(
    url: str, slow: int, tricklers: int, duration: float, connections: int, interval: float, big: int
) -> tuple[Phase, Hostile]:
    """The normal stream while the slow, trickling and big clients run; hostile clients give up after `duration`."""
    parsed = urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    slow_tasks = [asyncio.create_task(slow_body(host, port, duration)) for _ in range(slow)]
    trickle_tasks = [asyncio.create_task(trickler(host, port, duration)) for _ in range(tricklers)]
    big_task = asyncio.create_task(big_bodies(host, port, duration / 2, big))
    phase = await normal_stream(url, "hostile", duration, connections, interval)
    statuses, big_seconds, waits = await big_task
    figures = Hostile(
        list(await asyncio.gather(*slow_tasks)),
        list(await asyncio.gather(*trickle_tasks)),
        statuses,
        big_seconds,
        waits,
    )
    return phase, figures


async def run(
    url: str,
    slow: int = 300,
    tricklers: int = 300,
    duration: float = 20.0,
    baseline: float = 10.0,
    connections: int = 4,
    interval: float = 0.02,
    big: int = 5,
) -> tuple[list[Phase], Hostile]:
    """Both phases against `url`: the baseline first, then the hostile one."""
    base = await normal_stream(url, "baseline", baseline, connections, interval)
    phase, figures = await hostile_phase(url, slow, tricklers, duration, connections, interval, big)
    return [base, phase], figures


def _cut_line(what: str, cuts: list[Cut], verb: str) -> str:
    done = [c.seconds for c in cuts if c.cut]
    answers = Counter(c.status for c in cuts if c.cut)
    share = len(done) / len(cuts) if cuts else 0.0
    spread = f"p50 {percentile(done, 0.5):.1f} s, max {max(done, default=0.0):.1f} s"
    said = ", ".join(f"{'closed' if s == 0 else s} x{n}" for s, n in sorted(answers.items()))
    return f"{what}: {len(cuts)} opened, {len(done)} {verb} ({share:.0%}) after {spread} ({said or 'none'})"


def render(phases: list[Phase], figures: Hostile) -> str:
    lines = [
        f"{'phase':<9} {'normal':>7} {'req/s':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'max at s':>8} {'non-200':>8}"
    ]
    for p in phases:
        lines.append(
            f"{p.name:<9} {len(p.statuses):>7} {len(p.statuses) / p.seconds:>6.0f} "
            f"{percentile(p.latencies, 0.5) * 1000:>7.1f} {percentile(p.latencies, 0.99) * 1000:>7.1f} "
            f"{max(p.latencies, default=0.0) * 1000:>7.1f} {p.slowest_at:>8.1f} {p.not_200:>8}"
        )
    lines.append(_cut_line("slow bodies", figures.slow, "cut off"))
    lines.append(_cut_line("header tricklers", figures.tricklers, "closed"))
    big = Counter(figures.big_statuses)
    waits = figures.health_waits
    lines.append(
        f"big bodies: {len(figures.big_statuses)} x {len(BIG_BODY) / 1e6:.1f} MB in {figures.big_seconds:.2f} s "
        f"({', '.join(f'{s} x{n}' for s, n in sorted(big.items()))}); /health during them: "
        f"{len(waits)} probes, max wait {max(waits, default=0.0) * 1000:.0f} ms"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=300, help="slow-body clients")
    parser.add_argument("--tricklers", type=int, default=300, help="header-trickling clients")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of the hostile phase")
    parser.add_argument("--baseline", type=float, default=10.0, help="seconds of the baseline phase")
    parser.add_argument("--connections", type=int, default=4, help="keep-alive connections of the normal stream")
    parser.add_argument("--interval", type=float, default=0.02, help="pause between one connection's requests")
    parser.add_argument("--big", type=int, default=5, help="concurrent ≈ 4 MB bodies halfway through")
    parser.add_argument("--url", help="a running server already holding the demo corpus")
    parser.add_argument("--header-timeout", help="TAGURU_HEADER_TIMEOUT_SECS of a started server")
    parser.add_argument("--request-timeout", help="TAGURU_REQUEST_TIMEOUT_SECS of a started server")
    parser.add_argument("--min-body-rate", help="TAGURU_MIN_BODY_RATE of a started server")
    args = parser.parse_args()
    knobs = (args.slow, args.tricklers, args.duration, args.baseline, args.connections, args.interval, args.big)
    if args.url:
        phases, figures = asyncio.run(run(args.url.rstrip("/"), *knobs))
    else:
        settings = {
            key: value
            for key, value in (
                ("TAGURU_HEADER_TIMEOUT_SECS", args.header_timeout),
                ("TAGURU_REQUEST_TIMEOUT_SECS", args.request_timeout),
                ("TAGURU_MIN_BODY_RATE", args.min_body_rate),
            )
            if value is not None
        }
        with tempfile.TemporaryDirectory() as tmp:
            with served(Path(tmp) / "data", Path(tmp) / "server.log", settings) as url:
                phases, figures = asyncio.run(run(url, *knobs))
    print(render(phases, figures))
    return 0 if all(p.not_200 == 0 for p in phases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
