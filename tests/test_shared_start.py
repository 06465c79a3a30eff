"""The supervisor's start-up answers while it loads the contexts for forked workers."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

from process_support import free_port

from taguru_server.cli import shared_start


def _call(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_live_answers_and_everything_else_says_loading() -> None:
    port = free_port()
    progress = shared_start._Progress()
    progress.expected, progress.loaded = 3, 1
    probes = shared_start._probes("127.0.0.1", port, progress)
    assert probes is not None
    serving = threading.Thread(target=probes.serve_forever, daemon=True)
    serving.start()
    try:
        base = f"http://127.0.0.1:{port}"
        assert _call(base + "/live")[0::2] == (200, b"ok")
        assert _call(base + "/live", "HEAD")[0::2] == (200, b"")
        for path, method in (("/ready", "GET"), ("/contexts/x/evidence", "POST")):
            status, headers, body = _call(base + path, method)
            doc = json.loads(body)
            assert status == 503 and headers["Retry-After"] == "1"
            assert (doc["status"], doc["code"]) == ("error", "unhealthy")
            assert doc["error"] == "loading contexts into memory: 1 loaded, 3 to preload"
    finally:
        probes.shutdown()
        probes.server_close()
        serving.join()


def test_an_address_that_cannot_be_bound_leaves_no_probes() -> None:
    assert shared_start._probes("203.0.113.1", free_port(), shared_start._Progress()) is None
