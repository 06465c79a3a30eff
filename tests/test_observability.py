"""Logs, metrics and probes in process: TAGURU_LOG_FORMAT/LEVEL/PRELOAD parsing, `/ready` while contexts
load, one `request.finished` line per request, Server-Timing `total`, the new metric families, and the
standard library's log records, warnings and uncaught exceptions rendered as JSON."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
import threading
import warnings
from typing import Any

import pytest
import structlog
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from conftest import Client, start_client
from test_evidence_endpoint import seed_sake

from taguru_server.server import logging as server_logging
from taguru_server.server.app import build_app, open_registry
from taguru_server.server.config import ConfigError, load_settings


def test_log_and_preload_settings() -> None:
    base = {"TAGURU_DATA_DIR": "unused"}
    settings = load_settings(base)
    assert (settings.log_format, settings.log_level, settings.preload) == (None, "info", "all")
    settings = load_settings({**base, "TAGURU_LOG_FORMAT": " JSON ", "TAGURU_LOG_LEVEL": "Debug"})
    assert (settings.log_format, settings.log_level) == ("json", "debug")
    assert load_settings({**base, "TAGURU_LOG_LEVEL": "warn"}).log_level == "warning"
    assert load_settings({**base, "TAGURU_PRELOAD": "pinned"}).preload == "pinned"
    assert load_settings({**base, "TAGURU_PRELOAD": "a, b,,a"}).preload == ("a", "b")
    with pytest.raises(ConfigError, match="TAGURU_LOG_FORMAT must be 'json' or 'console'"):
        load_settings({**base, "TAGURU_LOG_FORMAT": "xml"})
    with pytest.raises(ConfigError, match="TAGURU_LOG_LEVEL must be one of debug, info, warning, error"):
        load_settings({**base, "TAGURU_LOG_LEVEL": "loud"})
    with pytest.raises(ConfigError, match="TAGURU_PRELOAD"):
        load_settings({**base, "TAGURU_PRELOAD": " , "})


def test_worker_start_and_index_dir_settings() -> None:
    from pathlib import Path

    from taguru_server.server.config import index_dir_for

    base = {"TAGURU_DATA_DIR": "/srv/taguru"}
    settings = load_settings(base)
    assert settings.worker_start == "fork" and index_dir_for(settings) == Path("/srv/taguru/indexes")
    assert load_settings({**base, "TAGURU_WORKER_START": " Exec "}).worker_start == "exec"
    with pytest.raises(ConfigError, match="TAGURU_WORKER_START must be 'fork' or 'exec'"):
        load_settings({**base, "TAGURU_WORKER_START": "spawn"})
    assert index_dir_for(load_settings({**base, "TAGURU_INDEX_DIR": "off"})) is None
    assert index_dir_for(load_settings({**base, "TAGURU_INDEX_DIR": "/var/cache/tg"})) == Path("/var/cache/tg")
    postgres = {**base, "TAGURU_DATABASE_URL": "postgresql://h/db"}
    assert index_dir_for(load_settings(postgres)) is None  # each host names its own, or none is kept
    assert index_dir_for(load_settings({**postgres, "TAGURU_INDEX_DIR": "/var/cache/tg"})) == Path("/var/cache/tg")


@pytest.mark.anyio
async def test_ready_is_503_until_the_contexts_are_loaded_and_calls_wait_for_the_load(settings_factory) -> None:
    settings = settings_factory()
    server, client, session = await start_client(settings)
    try:
        await seed_sake(client)
    finally:
        await session.close()
        await server.close()

    registry = open_registry(settings)
    release = threading.Event()
    load = registry.persistence.load

    def slow_load(*args: Any) -> Any:
        release.wait(30)
        return load(*args)

    registry.persistence.load = slow_load  # type: ignore[method-assign]
    server = TestServer(build_app(settings, registry=registry))
    await server.start_server()
    session = ClientSession()
    client = Client(session, str(server.make_url("")).rstrip("/"))
    try:
        assert (await client.call("GET", "/live"))[0] == 200
        status, body, headers = await client.call("GET", "/ready")
        assert (status, body["code"]) == (503, "unhealthy") and headers["Retry-After"] == "1"
        assert body["error"] == "loading contexts into memory: 0 loaded, 1 to preload"
        _s, metrics, _h = await client.call("GET", "/metrics")
        assert "taguru_ready 0.0" in metrics and "taguru_contexts_loaded 0.0" in metrics
        waiting = asyncio.ensure_future(client.call("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]}))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # the call waits for the load instead of reading the context itself
        with structlog.testing.capture_logs() as logs:
            release.set()
            status, _body, _h = await waiting
        assert status == 200
        loaded = [e for e in logs if e["event"] == "context.loaded"]
        assert loaded and loaded[0]["context"] == "sake" and loaded[0]["duration_ms"] >= 0
        assert any(e["event"] == "contexts.ready" for e in logs)
        status, body, _h = await client.call("GET", "/ready")
        assert (status, body["status"]) == (200, "ready")
        _s, metrics, _h = await client.call("GET", "/metrics")
        assert "taguru_ready 1.0" in metrics and "taguru_contexts_loaded 1.0" in metrics
    finally:
        release.set()
        await session.close()
        await server.close()
        registry.close()


@pytest.mark.anyio
async def test_preload_none_loads_on_first_use(settings_factory) -> None:
    settings = settings_factory()
    server, client, session = await start_client(settings)
    try:
        await seed_sake(client)
    finally:
        await session.close()
        await server.close()
    server, client, session = await start_client(settings_factory(TAGURU_PRELOAD="none"))
    try:
        assert (await client.call("GET", "/ready"))[0] == 200
        _s, metrics, _h = await client.call("GET", "/metrics")
        assert "taguru_contexts_loaded 0.0" in metrics
        await client.ok("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]})
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
async def test_one_info_line_per_request_with_the_stage_summary(client: Client) -> None:
    await seed_sake(client)
    with structlog.testing.capture_logs() as logs:
        status, _body, headers = await client.call("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]})
    assert status == 200
    info = [e for e in logs if e["log_level"] != "debug"]
    assert [e["event"] for e in info] == ["request.finished"]
    finished = info[0]
    assert finished["status"] == 200 and finished["route"] == "/contexts/{name}/evidence"
    assert set(finished["stages_ms"]) == {p.split(";")[0] for p in headers["Server-Timing"].split(", ")[:-1]}
    assert finished["slowest_stage"] in finished["stages_ms"]
    assert abs(finished["stages_total_ms"] - sum(finished["stages_ms"].values())) < 0.01
    assert "青嶺酒造" not in repr(logs)
    total = headers["Server-Timing"].split(", ")[-1]
    assert total.startswith("total;dur=") and float(total.split("=")[1]) >= finished["stages_total_ms"]


@pytest.mark.anyio
async def test_metrics_families(client: Client) -> None:
    await seed_sake(client)
    await client.ok("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]})
    _s, text, _h = await client.call("GET", "/metrics")
    assert 'taguru_evidence_stage_duration_seconds_bucket{le="1e-05",stage="resolve"}' in text
    assert 'taguru_evidence_stage_duration_seconds_bucket{le="0.0005",stage="resolve"}' in text
    assert 'taguru_http_request_duration_seconds_bucket{le="0.001",method="POST"' in text
    assert "1e-05" not in text.split("taguru_http_request_duration_seconds_bucket", 1)[1].split("# HELP", 1)[0]
    version = next(line for line in text.splitlines() if line.startswith("taguru_build_info{"))
    assert 'python="' in version and 'version="' in version and version.endswith(" 1.0")
    assert "\nprocess_resident_memory_bytes " in text and "\npython_info{" in text
    assert "\ntaguru_inflight_requests " in text


def _rendered(fmt: str, level: str, emit: Any) -> list[str]:
    """The stderr lines `emit` produces under `configure_logging` (then the logging set-up is undone)."""
    stream = io.StringIO()
    real_stderr, hooks = sys.stderr, (sys.excepthook, threading.excepthook)
    root = logging.getLogger()
    handlers, root_level = list(root.handlers), root.level
    sys.stderr = stream
    try:
        server_logging.configure_logging(fmt=fmt, level=level, final=False)
        emit()
    finally:
        sys.stderr = real_stderr
        sys.excepthook, threading.excepthook = hooks
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(root_level)
        logging.captureWarnings(False)
        structlog.reset_defaults()
    return stream.getvalue().splitlines()


def test_json_renders_the_standard_library_warnings_and_uncaught_exceptions() -> None:
    def emit() -> None:
        structlog.get_logger("taguru.test").info("own.event", n=1)
        structlog.get_logger("taguru.test").debug("filtered.out")
        logging.getLogger("aiohttp.server").error("Error handling request")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a deprecated call", DeprecationWarning, stacklevel=1)
        try:
            raise ValueError("secret payload text")
        except ValueError:
            logging.getLogger("asyncio").exception("Task exception was never retrieved")
            sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]

    lines = _rendered("json", "info", emit)
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events][:2] == ["own.event", "Error handling request"]
    assert events[1]["logger"] == "aiohttp.server" and events[1]["level"] == "error"
    assert any(e.get("logger") == "py.warnings" for e in events)
    failed = [e for e in events if e.get("error_type") == "ValueError"]
    assert len(failed) == 2 and all(e["frames"] for e in failed)
    assert "secret payload text" not in "\n".join(lines) and "filtered.out" not in "\n".join(lines)


def test_debug_level_and_console_format() -> None:
    def emit() -> None:
        structlog.get_logger("taguru.test").debug("stage.finished", stage="resolve")

    lines = _rendered("json", "debug", emit)
    assert json.loads(lines[0])["event"] == "stage.finished"
    lines = _rendered("console", "info", lambda: structlog.get_logger("t").info("server.stopped"))
    assert "server.stopped" in lines[0] and not lines[0].startswith("{")
