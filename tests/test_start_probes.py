"""While a single process opens its store (the boot's integrity check of a changed store reads every
page), its address already answers: `/live` 200, every other request 503 `unhealthy` saying what the
start waits for, with `Retry-After: 1`; when the store is open the socket is handed on, still listening."""

from __future__ import annotations

import http.client
import json
import socket

from taguru_server.cli.shared_start import answering_on


def ask(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_the_address_answers_while_the_store_opens_and_stays_listening() -> None:
    sock = socket.create_server(("127.0.0.1", 0), backlog=16)
    sock.setblocking(False)  # as `serve` binds it
    port = sock.getsockname()[1]
    try:
        with answering_on(sock) as progress:
            assert ask(port, "/live")[0] == 200
            progress.report_check("store.checking", check="quick_check", file_bytes=4096)
            status, headers, body = ask(port, "/ready")
            assert (status, headers["Retry-After"]) == (503, "1")
            answer = json.loads(body)
            assert answer["code"] == "unhealthy"
            assert answer["error"] == "checking the store before it opens (a full-file integrity check)"
            assert ask(port, "/contexts")[0] == 503
            progress.report_check("store.checked", check="quick_check", duration_ms=1.0)
            assert json.loads(ask(port, "/ready")[2])["error"].startswith("loading contexts into memory")
        # handed on: a client connects (queued for the server that takes the socket over)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        sock.close()
