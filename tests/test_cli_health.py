"""`taguru health`, `taguru version` and bare `taguru`: the container's HEALTHCHECK and the image's
entrypoint, driven in process (the probe against a real test server)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from conftest import Client

from taguru_server.cli.health import run as health
from taguru_server.cli.main import main, normalized
from taguru_server.cli.serve import installed_version


def test_version_prints_the_installed_version_and_refuses_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out == f"taguru {installed_version()}\n"
    assert main(["version", "now"]) == 2
    assert capsys.readouterr().err == "taguru: 'version' takes no argument, got 'now' — try 'taguru --help'\n"


def test_bare_taguru_and_a_leading_config_or_workers_serve() -> None:
    assert normalized([]) == ["serve"]
    assert normalized(["--config", "f.env"]) == ["serve", "--config", "f.env"]
    assert normalized(["--workers=2"]) == ["serve", "--workers=2"]
    assert normalized(["import", "x.jsonl"]) == ["import", "x.jsonl"]


@pytest.mark.anyio
async def test_health_exits_0_on_200_and_1_otherwise(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    assert await asyncio.to_thread(health, [client.base]) == 0
    out = capsys.readouterr().out.splitlines()  # the in-process server logs to stdout too
    assert f'{{"status":"ok","version":"{installed_version()}"}}' in out
    assert await asyncio.to_thread(health, ["--url", client.base + "/nowhere"]) == 1
    assert f"taguru: health: {client.base}/nowhere/health answered 404: " in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert await asyncio.to_thread(health, [closed]) == 1
    assert "taguru: health: " in capsys.readouterr().err


def test_health_targets_taguru_addr_from_the_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from taguru_server.cli.health import target

    config = tmp_path / "taguru.env"
    config.write_text("TAGURU_ADDR=0.0.0.0:9911\n", encoding="utf-8")
    assert target(str(config), None, {}) == "http://127.0.0.1:9911"
    assert target(None, None, {"TAGURU_ADDR": "[::]:9912"}) == "http://[::1]:9912"
    assert target(None, None, {}) == "http://127.0.0.1:8248"
    assert target(None, "http://h:1/", {"TAGURU_URL": "http://x"}) == "http://h:1"
    assert health([], {"TAGURU_ADDR": "127.0.0.1:0"}) == 2
    assert "binds to port 0 (OS-assigned)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["--config"], "--config needs a file path"),
        (["--config", "a", "--config", "b"], "--config given twice"),
        (["--url", "--help"], "--url needs a server URL"),
        (["http://a", "extra"], "'health' takes either --url or a positional URL, not both"),
        (["--url", "http://a", "http://b"], "'health' takes either --url or a positional URL, not both"),
        (["--nope"], "'health' does not take '--nope'"),
    ],
)
def test_health_usage_errors(argv: list[str], text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert health(argv, {}) == 2
    assert capsys.readouterr().err == f"taguru: {text} — try 'taguru --help'\n"
