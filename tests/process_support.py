"""A real `taguru serve` process for process-level tests: the interpreter, a free port, the CLI, the server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pg_support import database_url_for

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PY) if VENV_PY.exists() else sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    # background compaction off unless a test turns it on: a test that retracts and then inspects or
    # compacts the dead edges itself must not race the flush ticker (tests/test_housekeeping.py tests it)
    env.update({"TAGURU_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT), "TAGURU_AUTO_COMPACT": "0"})
    url = database_url_for(data_dir)  # the PostgreSQL pass of the suite: this data dir's schema
    if url:
        env["TAGURU_DATABASE_URL"] = url
    env.update(extra)
    return env


def cli(*args: str, env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "taguru_server.cli", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, **kw
    )


class Server:
    """`python -m taguru_server.cli serve` as a child process on a free port."""

    def __init__(self, data_dir: Path, log: Path, args: tuple[str, ...] = (), **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "taguru_server.cli", "serve", *args],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=base_env(data_dir, TAGURU_ADDR=f"127.0.0.1:{self.port}", **env),
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        for _ in range(600):  # a readiness wait, not an assertion on time
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/live", timeout=2) as resp:
                    if resp.status == 200:
                        self._wait_loaded()
                        return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the server never became ready")

    def _wait_loaded(self) -> None:
        """Past the start-up load: with workers the supervisor answers "loading" until it has forked them."""
        for _ in range(1200):  # a readiness wait, not an assertion on time
            if self.proc.poll() is not None:
                return  # the caller's next request reports it
            try:
                with urllib.request.urlopen(self.url + "/ready", timeout=2):
                    return
            except urllib.error.HTTPError as exc:
                if b"loading contexts into memory" not in exc.read():
                    return  # unhealthy for another reason, which the test itself may be about
            except OSError:
                pass
            time.sleep(0.05)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"} if data else {}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, parsed = self.call(method, path, body)
        assert status == 200, (method, path, parsed)
        return parsed["result"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()
