"""`taguru serve --workers N`: N worker processes serving one address over one store.

The supervisor reserves the address (a bound socket with SO_REUSEPORT that never listens, so a
port 0 is resolved once), holds the data-dir lock (so an offline `taguru import` is refused
whatever the worker count), starts the workers, restarts a worker that dies, and on SIGTERM/SIGINT
asks every worker to drain and stop. Each worker listens on the same address with SO_REUSEPORT,
so the kernel spreads new connections evenly over the workers (one shared listening socket
would let whichever worker wakes first take nearly all of them). Each worker is a
whole server over the same store in shared mode (`Registry(shared=True)`): reads catch up with the
change log first, writes run under the store's write lock (see `store/persist/registry.py`).
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from taguru_server.server.metrics_shared import VARIABLE as SHARED_METRICS_VARIABLE
from taguru_server.server.metrics_shared import SharedMetricsDir
from taguru_server.server.variables import child_environment, export

log = structlog.get_logger("taguru.workers")

DRAIN_SECS = 30.0
FORCED_EXIT = 130  # a second SIGINT/SIGTERM during the drain
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


def _die_with_parent(parent: int) -> None:
    """In a worker: be sent SIGTERM when the supervisor dies, even by SIGKILL (Linux), so no worker
    outlives it holding the address and the store; exit at once if it is already gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(0)


def forced_exit(workers: Iterable[Any] = ()) -> None:
    """A second stop signal: say so, SIGKILL any `workers` (the supervisor's), exit 130 at once, skipping the drain."""
    try:
        log.warning("server.forced_exit", message="second shutdown signal received — forcing an immediate exit")
    except RuntimeError:  # the supervisor's handler interrupted a write to stderr: exit without the line
        pass
    for proc in workers:
        try:
            proc.kill()
        except OSError:
            pass
    sys.stderr.flush()
    os._exit(FORCED_EXIT)


def _started_child(parent: int) -> None:
    """In a started worker before its interpreter runs: die with the supervisor, and ignore SIGHUP (the
    disposition survives the exec) until the worker's own reload handler is in place."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _die_with_parent(parent)


class Forked:
    """A forked worker, watched like a `subprocess.Popen`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]


class Supervisor:
    """Starts, watches and stops the worker processes."""

    def __init__(self, address: str, workers: int, config: str | None, fork: bool = False) -> None:
        self.metrics = SharedMetricsDir()  # one scrape of any worker shows them all (server/metrics_shared.py)
        self.env = child_environment(TAGURU_ADDR=address, **{SHARED_METRICS_VARIABLE: self.metrics.path})
        self.cmd = worker_command(workers, config)
        self.procs: list[subprocess.Popen[bytes] | Forked | None] = [None] * workers
        self.crashes = [0] * workers
        self.started = [0.0] * workers
        self.stopping = False
        self.fork = fork  # fork from this process (sharing what it loaded) rather than start a new interpreter
        self.reserved: socket.socket | None = None
        self.entry: Callable[[list[str]], int] | None = None  # the command's main, run by a forked worker

    def spawn(self, i: int) -> None:
        self.started[i] = time.monotonic()
        parent = os.getpid()
        if not self.fork:
            self.procs[i] = subprocess.Popen(
                self.cmd, env=self.env, stdout=subprocess.DEVNULL, preexec_fn=lambda: _started_child(parent)
            )
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _die_with_parent(parent)
            self._child()
        self.procs[i] = Forked(pid)

    def _child(self) -> None:
        """In a forked worker: serve as a worker started by command line would, then exit without cleanup."""
        code = 70
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the worker's own reload handler replaces it
            if self.reserved is not None:
                self.reserved.close()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)  # as a started worker's stdout: the listening line is the supervisor's alone
            export("TAGURU_ADDR", self.env["TAGURU_ADDR"])
            export(SHARED_METRICS_VARIABLE, self.metrics.path)
            assert self.entry is not None
            code = self.entry(self.cmd[3:])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # never back into the supervisor's loop
            log.error("worker.failed", error_type=type(exc).__name__)
        finally:
            sys.stderr.flush()
            os._exit(code)

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
                self.metrics.worker_exited(proc.pid)
                time.sleep(delay)
                if not self.stopping:
                    self.spawn(i)
                    log.info("worker.started", worker=i, pid=self.procs[i].pid)  # type: ignore[union-attr]
            time.sleep(0.1)

    def stop(self, *_args: Any) -> None:
        """SIGTERM/SIGINT: the first starts the drain; a second kills the workers and exits 130."""
        if self.stopping:
            forced_exit([p for p in self.procs if p is not None])
        self.stopping = True

    def hangup(self, *_args: Any) -> None:
        """SIGHUP: forward it to every live worker (each reloads its own key table); nothing reloads here."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGHUP)
                except OSError:
                    pass

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
        self.metrics.remove()
        return 0


def supervise(
    host: str,
    port: int,
    workers: int,
    config: str | None,
    data_dir: str,
    settings: Any = None,
    entry: Callable[[list[str]], int] | None = None,
) -> int:
    """Bind, print the listening line, run the workers until SIGTERM/SIGINT; returns the exit code.

    With `settings` and `entry` (the command's main), the contexts are loaded here first and the
    workers forked, each running `entry` as a worker (`cli/shared_start.py`)."""
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
    supervisor = Supervisor(f"{bound[0]}:{bound[1]}", workers, config, fork=settings is not None and entry is not None)
    supervisor.reserved = sock
    supervisor.entry = entry
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGINT, supervisor.stop)
    signal.signal(signal.SIGHUP, supervisor.hangup)
    if supervisor.fork:
        from taguru_server.cli.shared_start import load_before_fork

        def interrupt(*_args: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, interrupt)  # a stop during the load ends it at once
        signal.signal(signal.SIGINT, interrupt)
        try:
            load_before_fork(settings, bound[0], bound[1])
        except KeyboardInterrupt:
            sock.close()
            supervisor.metrics.remove()
            log.info("server.stopped")
            return 0
        signal.signal(signal.SIGTERM, supervisor.stop)
        signal.signal(signal.SIGINT, supervisor.stop)
    for i in range(workers):
        supervisor.spawn(i)
    print(f"listening on {bound[0]}:{bound[1]}", flush=True)
    log.info("server.listening", url=f"http://{bound[0]}:{bound[1]}", data_dir=data_dir, workers=workers)
    try:
        supervisor.watch()
    finally:
        log.info("server.stopping")
        supervisor.drain()
        sock.close()
    log.info("server.stopped")
    return 0
