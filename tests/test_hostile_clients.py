"""Process level: hostile clients (slow bodies, big bodies, malformed requests) neither starve nor leak."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from process_support import Server

pytestmark = pytest.mark.slow


async def raw_request(port: int, head: bytes, body: bytes = b"", timeout: float = 10.0) -> tuple[int, bytes, float]:
    """Send bytes on a fresh connection; (status, whole reply, seconds taken); status 0 when closed without a reply."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + body)
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), timeout)
    except (ConnectionError, TimeoutError):
        reply = b""
    finally:
        writer.close()
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.") else 0
    return status, reply, time.perf_counter() - started


async def slow_body_client(port: int, give_up: float) -> tuple[bool, float]:
    """Announce a 100 kB body and send one byte a second; (cut off by the server, seconds until then)."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /contexts/slow/evidence HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n{"
    )
    try:
        while time.perf_counter() - started < give_up:
            try:
                data = await asyncio.wait_for(reader.read(1024), 1.0)
            except TimeoutError:
                writer.write(b" ")
                await writer.drain()
                continue
            return (not data or data.startswith(b"HTTP/1.1 408")), time.perf_counter() - started
        return False, time.perf_counter() - started
    except ConnectionError:
        return True, time.perf_counter() - started
    finally:
        writer.close()


def test_slow_bodies_do_not_hold_the_in_flight_slots(tmp_path: Path, servers: list[Server]) -> None:
    """300 clients trickling bodies at 1 byte/s: 20/20 normal requests answered 200 within 3 s each, and the
    slow clients cut off within the request timeout plus a few seconds."""
    timeout = 3
    server = Server(
        tmp_path / "data",
        tmp_path / "server.log",
        TAGURU_MAX_CONCURRENT_REQUESTS="16",
        TAGURU_REQUEST_TIMEOUT_SECS=str(timeout),
    )
    servers.append(server)

    async def scenario() -> tuple[list[tuple[bool, float]], list[tuple[int, bytes, float]]]:
        slow = [asyncio.create_task(slow_body_client(server.port, timeout + 6)) for _ in range(300)]
        await asyncio.sleep(1.0)  # every slow client has sent its headers
        normal = []
        for _ in range(20):
            normal.append(
                await raw_request(server.port, b"GET /contexts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            )
        return list(await asyncio.gather(*slow)), normal

    slow, normal = asyncio.run(scenario())
    assert [status for status, _r, _t in normal] == [200] * 20, [r[:120] for _s, r, _t in normal]
    assert max(took for _s, _r, took in normal) < 3.0
    cut = [took for ok, took in slow if ok]
    assert len(cut) >= 0.95 * len(slow)
    assert max(cut) < timeout + 1.5  # the deadline, not the 5 s minimum-rate grace, cuts them off
    server.stop()
    assert b"Traceback" not in server.log_path.read_bytes()


BIG_BODIES = {
    # about 4 MB each, every one refused only after the whole body is decoded
    "evidence": json.dumps({"origins": ["abc"] * 600_000}).encode(),  # past the origins limit
    "associations": json.dumps([{"subject": "a", "label": "b", "object": "c", "weight": 1}] * 70_000).encode(),
    "import": b"\n".join(
        [b'{"taguru_batch": 1, "context": "big", "source": "s", "create": {}}']
        + [b'{"subject": "a", "label": "b", "object": "c", "weight": 1.0}'] * 70_000
        + [b"{not json"]
    ),
}


@pytest.mark.parametrize("route", sorted(BIG_BODIES))
def test_big_bodies_do_not_freeze_the_server(tmp_path: Path, servers: list[Server], route: str) -> None:
    """5 concurrent 4 MB bodies: /health never waits 300 ms, and each big body gets its 4xx."""
    server = Server(tmp_path / "data", tmp_path / "server.log")
    servers.append(server)
    body = BIG_BODIES[route]
    path = b"/import" if route == "import" else b"/contexts/big/" + route.encode()
    head = (
        b"POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (path, len(body))
    )

    async def health_waits(stop: asyncio.Event) -> list[float]:
        waits = []
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            while not stop.is_set():
                started = time.perf_counter()
                writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
                await reader.readexactly(length)
                assert head.startswith(b"HTTP/1.1 200")
                waits.append(time.perf_counter() - started)
                await asyncio.sleep(0.02)
        finally:
            writer.close()
        return waits

    async def scenario() -> tuple[list[tuple[int, bytes, float]], list[float]]:
        stop = asyncio.Event()
        probe = asyncio.create_task(health_waits(stop))
        await asyncio.sleep(0.2)
        big = await asyncio.gather(*(raw_request(server.port, head, body, timeout=30) for _ in range(5)))
        await asyncio.sleep(0.1)
        stop.set()
        return list(big), await probe

    big, waits = asyncio.run(scenario())
    assert [400 <= status < 500 for status, _r, _t in big] == [True] * 5, [r[:120] for _s, r, _t in big]
    assert len(waits) > 5
    assert max(waits) < 0.3, sorted(waits)[-5:]


def test_malformed_requests_get_the_envelope_and_leak_nothing(tmp_path: Path, servers: list[Server]) -> None:
    token = "tok-" + "k" * 28
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_API_TOKEN=token)
    servers.append(server)
    secret = b"SECRETPREFIX" + b"s" * 9000

    async def scenario() -> list[tuple[int, bytes, float]]:
        requests = [
            b"GET /contexts/a%0Ab HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"GET /contexts/a%0Ab HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + token.encode()
            + b"\r\nConnection: close\r\n\r\n",
            b"GET /contexts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n" % secret,
            b"GET /%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % secret,
        ]
        return [await raw_request(server.port, head) for head in requests]

    (s401, r401, _), (s404, r404, _), (s_header, r_header, _), (s_line, r_line, _) = asyncio.run(scenario())
    assert s401 == 401 and b"application/json" in r401 and b'"code":"unauthorized"' in r401
    assert s404 == 404 and b"application/json" in r404 and b'"status":"error"' in r404
    for status, reply in ((s_header, r_header), (s_line, r_line)):
        assert 400 <= status < 500 and b"application/json" in reply and b'"code":"malformed_request"' in reply
        assert b"SECRETPREFIX" not in reply and b"sssssssss" not in reply
    server.stop()
    logged = server.log_path.read_bytes()
    assert b"SECRETPREFIX" not in logged and b"sssssssss" not in logged and b"Traceback" not in logged
    assert logged.count(b"request.finished") >= 4


async def trickling_headers_client(port: int, give_up: float) -> tuple[bool, float]:
    """Send request-header bytes one at a time, twice a second; (closed by the server, seconds until then)."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = b"GET /contexts HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    try:
        for i in range(len(head)):
            if time.perf_counter() - started > give_up:
                return False, time.perf_counter() - started
            writer.write(head[i : i + 1])
            await writer.drain()
            try:
                data = await asyncio.wait_for(reader.read(1024), 0.5)
            except TimeoutError:
                continue
            return not data, time.perf_counter() - started
        return False, time.perf_counter() - started
    except ConnectionError:
        return True, time.perf_counter() - started
    finally:
        writer.close()


def test_trickled_headers_are_cut_off(tmp_path: Path, servers: list[Server]) -> None:
    """300 connections trickling header bytes are all closed by the server (well within 40 s); /health stays 200."""
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_HEADER_TIMEOUT_SECS="2")
    servers.append(server)

    async def scenario() -> tuple[list[tuple[bool, float]], tuple[int, bytes, float]]:
        idle = [asyncio.create_task(trickling_headers_client(server.port, 8.0)) for _ in range(300)]
        await asyncio.sleep(0.5)
        normal = await raw_request(server.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return list(await asyncio.gather(*idle)), normal

    idle, (status, _reply, took) = asyncio.run(scenario())
    assert status == 200 and took < 3.0
    cut = [t for closed, t in idle if closed]
    assert len(cut) == len(idle)
    assert max(cut) < 2 + 2.5
    server.stop()
    assert server.log_path.read_bytes().count(b"connection.header_timeout") == len(idle)
