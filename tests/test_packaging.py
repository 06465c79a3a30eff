"""The distribution installs under one namespace and its commands start cleanly."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from taguru_server.cli.main import main
from taguru_server.server.version import VERSION

ROOT = Path(__file__).resolve().parents[1]


def test_version_flag_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"taguru {VERSION}"
    assert importlib.metadata.version("taguru-server") == VERSION


@pytest.mark.slow
def test_wheel_holds_only_the_namespace(tmp_path: Path) -> None:
    """A plain (non-editable) build puts nothing generic such as `server` or `evaluate` at the top."""
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".*", "build", "data", "node_modules", "tests", "bench", "clients", "*.egg-info", "__pycache__"
        ),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("taguru_server-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"taguru_server", f"taguru_server-{VERSION}.dist-info"}
    for package in ("pipeline", "stages", "store", "server", "evaluate", "cli"):
        assert f"taguru_server/{package}/__init__.py" in names
    assert "taguru_server/cli/demo/corpus.jsonl" in names
    for asset in ("index.html", "app.js", "app.css"):  # the inspector page (GET /ui)
        assert f"taguru_server/server/inspector/{asset}" in names
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any(r.startswith("mcp") and "extra" not in r for r in requires)
    # PEP 561 for every sub-package, and `python -m taguru_server` without an __init__.py at the root
    for package in ("pipeline", "stages", "store", "server", "evaluate", "cli", "client"):
        assert f"taguru_server/{package}/py.typed" in names
    assert "taguru_server/__main__.py" in names and "taguru_server/__init__.py" not in names
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    ran = subprocess.run(
        [sys.executable, "-m", "taguru_server", "version"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(unpacked)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (ran.returncode, ran.stdout) == (0, f"taguru {VERSION}\n"), ran.stderr
    probe = "import taguru_server.cli, sys; print(taguru_server.cli.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(unpacked)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(unpacked)), where  # the wheel's copy ran, not the checkout's


def test_mcp_bridge_ends_quietly_on_empty_stdin(tmp_path: Path) -> None:
    """No server and nothing on stdin: the bridge exits 0 without a traceback."""
    env = {"PATH": "/usr/bin:/bin", "TAGURU_URL": "http://127.0.0.1:9", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "taguru_server.cli", "mcp"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0
    assert "Traceback" not in done.stderr
