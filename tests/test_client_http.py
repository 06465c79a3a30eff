"""The one HTTP client of a taguru server: envelopes, error replies, transport failures, the sync path."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from conftest import Client

from taguru_server.client.config import read_config_file
from taguru_server.client.http import (
    ConfigFileError,
    NotEnvelope,
    Reply,
    ServerError,
    TaguruClient,
    TransportError,
    environment,
)


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_decode_reads_the_envelope_and_error_replies() -> None:
    client = TaguruClient("http://h/")
    assert client.base == "http://h"
    assert client.decode(Reply(200, b'{"result":{"a":1}}', {}), "u") == {"a": 1}
    with pytest.raises(NotEnvelope) as bad:
        client.decode(Reply(200, b"[1]", {}), "u")
    assert bad.value.message == "u: not a taguru response: [1]" and bad.value.status == 200
    with pytest.raises(ServerError) as err:
        client.decode(Reply(404, b'{"error":"no such context","code":"not_found"}', {"Retry-After": "3"}), "u")
    assert (err.value.status, err.value.code, err.value.error) == (404, "not_found", "no such context")
    assert err.value.message == "u answered 404: no such context (Retry-After: 3)"
    with pytest.raises(ServerError) as plain:
        client.decode(Reply(502, b" bad gateway\n", {}), "u")
    assert (plain.value.code, plain.value.error, plain.value.message) == (None, None, "u answered 502: bad gateway")


def test_config_file_and_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "taguru.conf"
    cfg.write_text("# comment\n\nTAGURU_ADDR = 127.0.0.1:1\nTAGURU_API_TOKEN=file\nnot a pair\n", encoding="utf-8")
    assert read_config_file(cfg) == {"TAGURU_ADDR": "127.0.0.1:1", "TAGURU_API_TOKEN": "file"}
    env = environment(str(cfg), {"TAGURU_API_TOKEN": "real"})
    assert env == {"TAGURU_ADDR": "127.0.0.1:1", "TAGURU_API_TOKEN": "real"}
    with pytest.raises(ConfigFileError) as err:
        environment(str(tmp_path / "missing.conf"), {})
    assert isinstance(err.value.cause, OSError) and str(err.value).startswith("cannot read config file ")


def test_sync_transport_failure() -> None:
    with pytest.raises(TransportError) as err:
        TaguruClient(dead_url(), timeout=5).send_sync("GET", "/live")
    assert err.value.reached is False and not err.value.timed_out


@pytest.mark.anyio
async def test_async_calls_against_a_server(client: Client) -> None:
    async with TaguruClient(client.base) as api:
        await api.health()
        with pytest.raises(ServerError) as err:
            await api.call("GET", ["contexts", "no such"])
        assert err.value.status == 404 and err.value.code is not None
    async with TaguruClient(dead_url(), timeout=5) as dead:
        with pytest.raises(TransportError) as gone:
            await dead.health()
    assert gone.value.reached is False
