"""`taguru serve --workers N`: N worker processes accepting on one listening socket, over one store.

The supervisor binds the address, holds the data-dir lock (so an offline `taguru import` is refused
whatever the worker count), starts the workers with the listening socket inherited, restarts a
worker that dies, and on SIGTERM/SIGINT asks every worker to drain and stop. Each worker is a
whole server over the same store in shared mode (`Registry(shared=True)`): reads catch up with the
change log first, writes run under the store's write lock (see `store/registry.py`).
"""

from __future__ import annotations

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


def worker_command(fd: int, workers: int, config: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "taguru_server.cli", "serve", "--worker-fd", str(fd), "--workers", str(workers)]
    return cmd + (["--config", config] if config else [])


class Supervisor:
    """Starts, watches and stops the worker processes."""

    def __init__(self, sock: socket.socket, workers: int, config: str | None) -> None:
        self.sock = sock
        self.cmd = worker_command(sock.fileno(), workers, config)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * workers
        self.crashes = [0] * workers
        self.started = [0.0] * workers
        self.stopping = False

    def spawn(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(self.cmd, pass_fds=(self.sock.fileno(),), stdout=subprocess.DEVNULL)
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
    try:
        sock = socket.create_server((host, port), backlog=2048)
    except OSError as exc:
        print(f"taguru: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    sock.set_inheritable(True)
    bound = sock.getsockname()
    supervisor = Supervisor(sock, workers, config)
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
