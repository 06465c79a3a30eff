"""`taguru serve --workers N`: N worker processes serving one address over one store.

The supervisor reserves the address (a bound socket with SO_REUSEPORT that never listens, so a
port 0 is resolved once), holds the data-dir lock (so an offline `taguru import` is refused
whatever the worker count), starts the workers, restarts a worker that dies, and on SIGTERM/SIGINT
asks every worker to drain and stop. Each worker listens on the same address with SO_REUSEPORT,
so the kernel spreads new connections evenly over the workers (one shared listening socket
would let whichever worker wakes first take nearly all of them). Each worker is a
whole server over the same store in shared mode (`Registry(shared=True)`): reads catch up with the
change log first, writes run under the store's write lock (see `store/registry.py`).
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import structlog

log = structlog.get_logger("taguru.workers")

DRAIN_SECS = 30.0
RESTART_BACKOFF_SECS = (0.1, 0.5, 1.0, 2.0, 5.0)


def listen_failure(where: str, exc: OSError) -> str:
    """The one line for an address that cannot be bound (a busy port above all)."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason = "the address is already in use (another server on that port?)"
    return f"cannot listen on {where}: {reason}"


def worker_command(workers: int, config: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "taguru_server.cli", "serve", "--worker", "--workers", str(workers)]
    return cmd + (["--config", config] if config else [])


class Supervisor:
    """Starts, watches and stops the worker processes."""

    def __init__(self, address: str, workers: int, config: str | None) -> None:
        self.env = dict(os.environ, TAGURU_ADDR=address)
        self.cmd = worker_command(workers, config)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * workers
        self.crashes = [0] * workers
        self.started = [0.0] * workers
        self.stopping = False

    def spawn(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL)
        self.started[i] = time.monotonic()

    def watch(self) -> None:
        """Restart dead workers (backing off when one keeps dying at once) until asked to stop."""
        while not self.stopping:
            for i, proc in enumerate(self.procs):
                if proc is None or proc.poll() is None:
                    continue
                quick = time.monotonic() - self.started[i] < 5.0
                self.crashes[i] = self.crashes[i] + 1 if quick else 0
                delay = RESTART_BACKOFF_SECS[min(self.crashes[i], len(RESTART_BACKOFF_SECS) - 1)]
                log.warning("worker.exited", worker=i, pid=proc.pid, returncode=proc.returncode, restart_in_s=delay)
                time.sleep(delay)
                if not self.stopping:
                    self.spawn(i)
                    log.info("worker.started", worker=i, pid=self.procs[i].pid)  # type: ignore[union-attr]
            time.sleep(0.1)

    def stop(self, *_args: Any) -> None:
        self.stopping = True

    def drain(self) -> int:
        """SIGTERM every worker (each finishes its in-flight requests), SIGKILL what is left after DRAIN_SECS."""
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + DRAIN_SECS
        for p in live:
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return 0


def supervise(host: str, port: int, workers: int, config: str | None, data_dir: str) -> int:
    """Bind, print the listening line, run the workers until SIGTERM/SIGINT; returns the exit code."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        print(f"taguru: {listen_failure(f'{host}:{port}', exc)}", file=sys.stderr)
        return 1
    bound = sock.getsockname()
    supervisor = Supervisor(f"{bound[0]}:{bound[1]}", workers, config)
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGINT, supervisor.stop)
    for i in range(workers):
        supervisor.spawn(i)
    print(f"listening on {bound[0]}:{bound[1]}", flush=True)
    print(
        f"taguru: serving {data_dir} on http://{bound[0]}:{bound[1]} with {workers} workers (pid {os.getpid()})",
        file=sys.stderr,
        flush=True,
    )
    try:
        supervisor.watch()
    finally:
        supervisor.drain()
        sock.close()
    return 0
