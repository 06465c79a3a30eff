"""A throwaway PostgreSQL cluster for the tests: initdb into a temp dir, on a free port, as the `postgres` user.

`TAGURU_TEST_BACKEND=postgres` runs the suite against it: the app-level tests get a fresh schema
per store (`fresh_url`), and process-level servers get `TAGURU_DATABASE_URL` the same way.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

BIN_DIRS = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"]
_schemas = itertools.count()


def backend() -> str:
    return os.environ.get("TAGURU_TEST_BACKEND", "sqlite")


def _bin(name: str) -> str:
    for d in BIN_DIRS:
        if Path(d, name).exists():
            return str(Path(d, name))
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql)")
    return found


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """initdb + pg_ctl start on a free port; `url` is the superuser's connection string."""

    def __init__(self, fast: bool = True) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="taguru-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        subprocess.run(
            _as_owner(
                [_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]
            ),
            check=True,
            capture_output=True,
        )
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=300"
        if fast:  # the tests never pull the power: durability of the cluster itself is not what they test
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self.options = options
        self.resume()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pause(self) -> None:
        """Stop the server, keeping its data (an outage as clients see it); `resume` starts it again."""
        subprocess.run(
            _as_owner([_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]),
            check=True,
            capture_output=True,
        )

    def resume(self) -> None:
        """Start the server on the same port and data (again)."""
        subprocess.run(
            _as_owner(
                [_bin("pg_ctl"), "-D", str(self.data), "-o", self.options, "-l", str(self.dir / "log"), "-w", "start"]
            ),
            check=True,
            capture_output=True,
        )

    def fresh_url(self) -> str:
        """A URL whose tables live in a new, empty schema (one per store)."""
        import psycopg

        name = f"t{os.getpid()}_{next(_schemas)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url}?options={quote(f'-csearch_path={name}')}"

    def stop(self) -> None:
        subprocess.run(
            _as_owner([_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]), capture_output=True
        )
        shutil.rmtree(self.dir, ignore_errors=True)


_by_data_dir: dict[str, str] = {}


def database_url_for(data_dir: str | os.PathLike[str]) -> str | None:
    """Under TAGURU_TEST_BACKEND=postgres: the store of this data dir, one schema per data dir (so a
    server restarted on the same data dir finds its data); None for SQLite."""
    base = os.environ.get("TAGURU_TEST_PG_URL")
    if backend() != "postgres" or not base:
        return None
    key = str(Path(data_dir).resolve())
    got = _by_data_dir.get(key)
    if got is None:
        import psycopg

        name = f"t{os.getpid()}_{next(_schemas)}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        got = _by_data_dir[key] = f"{base}?options={quote(f'-csearch_path={name}')}"
    return got


def require_tool(tool: str) -> None:
    """Skip a test whose server program is missing, except in CI, where `.ci/run` installs it (then fail)."""
    import pytest

    if shutil.which(tool) is None and not Path("/usr/lib/postgresql/15/bin", tool).exists():
        if os.environ.get("CI"):
            raise AssertionError(f"{tool} is not installed; .ci/run installs it")
        pytest.skip(f"{tool} is not installed")
