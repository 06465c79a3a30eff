"""Shared test helpers: a real server over loopback, reference-fixture loading and normalization."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from pg_support import Cluster, backend, database_url_for, require_tool
from process_support import Server

from taguru_server.pipeline import check_contracts
from taguru_server.pipeline.executor import CONTRACT_ENV
from taguru_server.server.app import build_app
from taguru_server.server.config import Settings, load_settings

# Every stage's values are checked against their keys' types in tests (and in servers they start).
os.environ[CONTRACT_ENV] = "1"
check_contracts(True)

FIXTURES = Path(__file__).parent / "fixtures" / "reference"
PROBES = {"/version", "/health", "/live", "/metrics", "/openapi.json"}
_VALIDATORS: dict[str, Any] = {}


def response_validator(schema: dict[str, Any]) -> Any:
    """A JSON Schema validator for one response schema, resolving the published components."""
    from jsonschema import Draft202012Validator

    from taguru_server.server.wire.schemas import COMPONENTS

    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = Draft202012Validator({**schema, "components": {"schemas": COMPONENTS}})
    return _VALIDATORS[key]


def check_against_openapi(method: str, path: str, status: int, parsed: Any) -> None:
    """Every JSON response the suite sees must match the schema `/openapi.json` publishes for it."""
    from taguru_server.server.routing import ROUTER, response_shape
    from taguru_server.server.routing import segments as _segments
    from taguru_server.server.wire.json_schema import ref
    from taguru_server.server.wire.schemas import result_schema

    path = path.split("?", 1)[0]
    if path in PROBES:
        template = path
    else:
        try:
            template = ROUTER.match(method, _segments(path))[0]
        except UnicodeDecodeError:
            template = "<unmatched>"
    shape = response_shape(method, template)
    if status == 202 or not isinstance(parsed, (dict, list)) and parsed is not None:
        return
    if template == "/mcp" and status in (200, 400):
        schema = ref("JsonRpcReply")
    elif status == 200:
        if shape is None or shape in ("text", "metrics", "ndjson", "openapi"):
            return
        schema = result_schema(shape)
    else:
        schema = ref("Error")
    errors = sorted(response_validator(schema).iter_errors(parsed), key=lambda e: list(e.path))
    assert not errors, f"{method} {template} {status}: {errors[0].message} at {list(errors[0].path)}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def load_fixture(kind: str, name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / kind / f"{name}.json").read_text(encoding="utf-8"))


def normalize(value: Any) -> Any:
    """Blank the volatile fields the reference fixtures blank, at any depth."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "time" and isinstance(v, (int, float)) and not isinstance(v, bool):
                v = 0.0
            elif k == "server" and isinstance(v, str):
                v = "0.0.0"
            elif k == "version" and isinstance(v, str) and "." in v:
                v = "0.0.0"
            elif k in ("last_read_epoch", "last_write_epoch") and isinstance(v, (int, float)):
                v = 0
            elif k == "next" and isinstance(v, str) and v.startswith("cf1-"):
                v = "cf1-0000000000000000-0"
            out[k] = normalize(v)
        return out
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.dumps(normalize(json.loads(value)), sort_keys=True, ensure_ascii=False)
        except ValueError:
            return value
    return value


def exact(value: Any) -> Any:
    """A comparable form where 1 and 1.0 differ (JSON ints and floats are different values)."""
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [exact(v) for v in value]
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return ("int", value)
    return value


def compact(body: Any) -> bytes:
    """The reference harness's request encoding: compact, keys sorted, raw UTF-8."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Client:
    """A thin real-HTTP client bound to one running test server."""

    def __init__(self, session: ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(self, method: str, path: str, body: Any = None, **options: Any) -> tuple[int, Any, dict[str, str]]:
        """`fetch` (same options), the body decoded and checked (`decode`)."""
        status, text, headers = await self.fetch(method, path, body, **options)
        return status, self.decode(method, path, status, text), headers

    @staticmethod
    def decode(method: str, path: str, status: int, text: bytes) -> Any:
        """A response body parsed and checked against the schema `/openapi.json` publishes for it."""
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text.decode("utf-8", "replace")
        check_against_openapi(method, path, status, parsed)
        return parsed

    async def fetch(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | str | None = None,
        token: str | None = None,
        content_type: str | None = "application/json",
    ) -> tuple[int, bytes, dict[str, str]]:
        """The raw response: tests that time the server's event loop from a client on the same loop decode a
        large body (and check it against the published schema, seconds for tens of megabytes) after timing."""
        headers: dict[str, str] = {}
        data: bytes | None = None
        if raw is not None:
            data = raw.encode("utf-8") if isinstance(raw, str) else raw
            if content_type:
                headers["Content-Type"] = content_type
        elif body is not None:
            data = compact(body)
            if content_type:
                headers["Content-Type"] = content_type
        if token:
            headers["Authorization"] = f"Bearer {token}"
        async with self.session.request(method, self.base + path, data=data, headers=headers) as resp:
            return resp.status, await resp.read(), dict(resp.headers)

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, parsed, _h = await self.call(method, path, body, **kw)
        assert status == 200, (method, path, status, parsed)
        return parsed


@pytest.fixture
def settings_factory(tmp_path: Path):
    def make(**env: str) -> Settings:
        # background compaction off unless a test turns it on (as in process_support.base_env)
        base = {"TAGURU_DATA_DIR": str(tmp_path / "data"), "TAGURU_AUTO_COMPACT": "0"}
        url = database_url_for(env.get("TAGURU_DATA_DIR", tmp_path / "data"))
        if url:  # the PostgreSQL pass of the suite
            base["TAGURU_DATABASE_URL"] = url
        base.update(env)
        return load_settings(base)

    return make


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster of the module's own (tests that start replicas or stop the database)."""
    require_tool("initdb")
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Real `taguru serve` processes a test starts (`process_support.Server`), stopped after it."""
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


async def start_client(settings: Settings) -> tuple[TestServer, Client, ClientSession]:
    server = TestServer(build_app(settings))
    await server.start_server()
    session = ClientSession()
    return server, Client(session, str(server.make_url("")).rstrip("/")), session


@pytest.fixture
async def client(settings_factory) -> AsyncIterator[Client]:
    server, cl, session = await start_client(settings_factory())
    try:
        yield cl
    finally:
        await session.close()
        await server.close()


@pytest.fixture(scope="session", autouse=True)
def postgres_cluster() -> Any:
    """TAGURU_TEST_BACKEND=postgres: one throwaway cluster for the session; every store gets its own schema."""
    if backend() != "postgres":
        yield None
        return
    cluster = Cluster()
    os.environ["TAGURU_TEST_PG_URL"] = cluster.url
    try:
        yield cluster
    finally:
        os.environ.pop("TAGURU_TEST_PG_URL", None)
        cluster.stop()


# Modules that never open a store, start a server or run a command (the stages, the walks and encoders
# against in-memory contexts, the static checks): the PostgreSQL pass would run them unchanged a
# second time, so it leaves them out (tests/test_backend_free.py holds each to that).
BACKEND_FREE = frozenset(
    {
        "test_architecture",
        "test_decode",
        "test_error_codes",
        "test_evaluate_compare",
        "test_evaluate_gate",
        "test_graph",
        "test_protocol",
        "test_routes_declared",
        "test_scale_equivalence",
        "test_schema_walks",
        "test_semantic_resolve",
        "test_stage_activate",
        "test_stage_budget",
        "test_stage_cite",
        "test_stage_contradict",
        "test_stage_dedup",
        "test_stage_diversify",
        "test_stage_fuse",
        "test_stage_near_dup",
        "test_stage_passages",
        "test_stage_query",
        "test_stage_rerank",
        "test_substrate_config",
        "test_walks",
    }
)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Tests of the SQLite file itself (damage, identity, the data-dir lock) do not apply to PostgreSQL,
    and the backend-free modules ran in the SQLite pass."""
    if backend() != "postgres":
        return
    kept = [item for item in items if item.module.__name__ not in BACKEND_FREE]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.module.__name__ in BACKEND_FREE])
        items[:] = kept
    skip = pytest.mark.skip(reason="tests the embedded SQLite store itself")
    once = pytest.mark.skip(reason="starts its own PostgreSQL; ran in the first pass")
    for item in items:
        if item.get_closest_marker("sqlite_only"):
            item.add_marker(skip)
        elif item.get_closest_marker("first_pass_only"):
            item.add_marker(once)
