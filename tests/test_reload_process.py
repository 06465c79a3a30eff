"""Process level: a real `taguru serve` (one process, or a supervisor and two workers) rotates its keys on SIGHUP
and when its config file changes, keeps them when the new file is refused, and exits 130 on a second stop signal."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from process_support import Server

pytestmark = pytest.mark.slow

WINDOW_SECS = 5.0  # the reference's watch window: a change of the file is armed within it


def status(server: Server, token: str, path: str = "/contexts") -> int:
    """The status of one request with `token` (a new connection each time, so workers take turns)."""
    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def events(server: Server) -> list[dict[str, Any]]:
    """The JSON log lines the server (and its workers) wrote so far."""
    found = []
    for line in server.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def wait_for(check: Callable[[], Any], secs: float) -> Any:
    """Poll `check` until it is truthy; its value, or an assertion after `secs`."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def reload_events(server: Server, event: str | None = None, trigger: str | None = None) -> list[dict[str, Any]]:
    """The `keyring.*` events, of one name and trigger when given."""
    return [
        e
        for e in events(server)
        if e.get("event", "").startswith("keyring.")
        and (event is None or e["event"] == event)
        and (trigger is None or e.get("trigger") == trigger)
    ]


class Prober(threading.Thread):
    """Hits `/live` every few milliseconds until stopped, recording every answer that is not 200."""

    def __init__(self, server: Server) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.failures: list[object] = []
        self.probes = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                with urllib.request.urlopen(self.server.url + "/live", timeout=5) as resp:
                    if resp.status != 200:
                        self.failures.append(resp.status)
            except OSError as exc:
                self.failures.append(repr(exc))
            self.probes += 1
            time.sleep(0.01)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


def start(tmp_path: Path, servers: list[Server], workers: int, config: Path, **env: str) -> Server:
    args = ("--config", str(config)) + (("--workers", str(workers)) if workers > 1 else ())
    server = Server(tmp_path / "data", tmp_path / "server.log", args, TAGURU_LOG_FORMAT="json", **env)
    servers.append(server)
    if workers > 1:  # every worker is serving (a worker ignores SIGHUP until then), not just the first one
        wait_for(lambda: len([e for e in events(server) if e.get("event") == "worker.ready"]) == workers, 20)
    return server


def every_worker(workers: int, items: list[dict[str, Any]]) -> bool:
    """The events come from every process that serves (each worker, or the one process)."""
    return len({e.get("worker_pid") for e in items}) == workers


@pytest.mark.parametrize(("workers", "worker_start"), [(1, "fork"), (2, "fork"), (2, "exec")])
def test_sighup_rotates_a_key_in_every_worker_and_the_port_keeps_answering(
    tmp_path: Path, servers: list[Server], workers: int, worker_start: str
) -> None:
    config = tmp_path / "taguru.env"
    config.write_text("TAGURU_API_TOKENS=ci:tok-old,ops:tok-ops\n")
    # a started (exec) worker gets the supervisor's environment, never the file's values: its keys still reload
    server = start(tmp_path, servers, workers, config, TAGURU_WORKER_START=worker_start)
    assert status(server, "tok-old") == 200
    prober = Prober(server)
    prober.start()
    try:
        config.write_text("TAGURU_API_TOKENS=ci:tok-new,ops:tok-ops\n")
        os.kill(server.proc.pid, signal.SIGHUP)
        # each serving process handled the signal (the watch may arm the same edit a moment earlier: then the
        # signal finds no change), and each armed the rotation
        wait_for(lambda: every_worker(workers, reload_events(server, trigger="sighup")), 10)
        wait_for(lambda: every_worker(workers, reload_events(server, "keyring.reloaded")), 10)
        time.sleep(0.2)
    finally:
        prober.stop()
    assert prober.failures == [] and prober.probes > 5
    assert server.proc.poll() is None
    assert not [e for e in events(server) if e.get("event") == "worker.exited"]
    for _ in range(6 * workers):  # new connections each time: every worker is asked
        assert status(server, "tok-old") == 401
        assert status(server, "tok-new") == 200
    applied = reload_events(server, "keyring.reloaded")
    assert [(e["rotated"], e["added"], e["removed"], e["keys"]) for e in applied] == [(["ci"], [], [], 2)] * workers
    assert "tok-" not in server.log_path.read_text()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_config_file_change_rotates_within_the_window_and_a_broken_one_keeps_the_keys(
    tmp_path: Path, servers: list[Server], workers: int
) -> None:
    config = tmp_path / "taguru.env"
    config.write_text('TAGURU_API_TOKENS=ci:tok-old\nTAGURU_KEY_SCOPES={"ci":"read"}\n')
    server = start(tmp_path, servers, workers, config)
    assert status(server, "tok-old") == 200
    config.write_text("TAGURU_API_TOKENS=ci:tok-new\n")
    changed = time.monotonic()
    wait_for(lambda: every_worker(workers, reload_events(server, "keyring.reloaded", "config-watch")), 10)
    assert time.monotonic() - changed < WINDOW_SECS
    for _ in range(6 * workers):
        assert status(server, "tok-old") == 401
        assert status(server, "tok-new") == 200
    applied = reload_events(server, "keyring.reloaded")
    assert {(tuple(e["rotated"]), tuple(e["rescoped"]), e["scoped"]) for e in applied} == {(("ci",), ("ci",), 0)}

    # a pasted token without its name: refused, the table in force stays armed, nothing of the file is logged
    config.write_text("TAGURU_API_TOKENS=tok-pasted-alone\n")
    refused = wait_for(
        lambda: (r := reload_events(server, "keyring.reload_refused")) and every_worker(workers, r) and r,
        WINDOW_SECS + 5,
    )
    assert {(e["error"], e["trigger"], e["level"]) for e in refused} == {
        ("TAGURU_API_TOKENS entry #1 is not name:token", "config-watch", "error")
    }
    time.sleep(2.5)  # another tick of the watch: the refusal is logged once per change, not once per tick
    assert len(reload_events(server, "keyring.reload_refused")) == workers
    for _ in range(4 * workers):
        assert status(server, "tok-new") == 200
    assert "tok-" not in server.log_path.read_text()
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    # one scrape shows the whole server: each worker reloaded (and refused) once, and the counts add up
    assert f"taguru_keyring_reload_refusals_total {workers}.0" in text
    assert f"taguru_keyring_reloads_total {workers}.0" in text


@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_stop_signal_during_the_drain_exits_130(tmp_path: Path, servers: list[Server], workers: int) -> None:
    config = tmp_path / "taguru.env"
    config.write_text("TAGURU_MIN_BODY_RATE=0\n")
    server = start(tmp_path, servers, workers, config)
    # a request whose body never completes holds the drain (bounded only by its request deadline)
    held = socket.create_connection(("127.0.0.1", server.port))
    try:
        held.sendall(
            b"POST /contexts/held/associations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100000\r\n\r\n{"associations": ['
        )
        time.sleep(0.5)
        server.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: any(e.get("event") == "server.stopping" for e in events(server)), 10)
        time.sleep(1.0)
        assert server.proc.poll() is None  # still draining
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(timeout=10) == 130
        assert time.monotonic() - sent < 5
    finally:
        held.close()
    forced = [e for e in events(server) if e.get("event") == "server.forced_exit"]
    assert forced and forced[-1]["message"] == "second shutdown signal received — forcing an immediate exit"
    assert forced[-1]["level"] == "warning"
