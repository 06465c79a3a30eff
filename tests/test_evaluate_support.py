"""Helpers shared by the `taguru evaluate` tests (no tests here): a real server over loopback,
HTTP seeding, and an in-process run of the command."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from taguru_server.cli.evaluate import main_async
from taguru_server.server.app import build_app
from taguru_server.server.config import load_settings
from taguru_server.server.providers.reranker import RerankSettings

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sake"
FORBIDDEN = ("/recall", "/activate", "/explore", "/describe", "/explain")


class Live:
    """One running server plus the paths it was asked for."""

    def __init__(self, server: TestServer, seen: list[tuple[str, str]]) -> None:
        self.server = server
        self.seen = seen
        self.url = str(server.make_url("")).rstrip("/")

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        raw: bytes | None = None,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = {"Content-Type": content_type}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = raw if raw is not None else (None if body is None else json.dumps(body, ensure_ascii=False).encode())
        async with ClientSession() as s:
            async with s.request(method, self.url + path, data=data, headers=headers) as resp:
                doc = await resp.json(content_type=None)
                assert resp.status == 200, (path, resp.status, doc)
                return doc["result"]

    async def close(self) -> None:
        await self.server.close()


async def start(tmp_path: Path, env: dict[str, str] | None = None, rerank: RerankSettings | None = None) -> Live:
    settings = load_settings({"TAGURU_DATA_DIR": str(tmp_path / "data"), **(env or {})})
    app = build_app(settings, rerank=rerank)
    seen: list[tuple[str, str]] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append((request.method, request.path))
        return await handler(request)

    app.middlewares.append(record)
    server = TestServer(app)
    await server.start_server()
    return Live(server, seen)


async def seed(
    live: Live,
    ctx: str,
    passages: dict[str, str],
    *,
    tags: dict[str, list[str]] | None = None,
    sections: dict[str, list[dict[str, Any]]] | None = None,
    associations: list[dict[str, Any]] | None = None,
    token: str | None = None,
) -> None:
    await live.call("PUT", f"/contexts/{ctx}", {}, token=token)
    body: dict[str, Any] = {"passages": passages}
    if tags:
        body["tags"] = tags
    if sections:
        body["sections"] = sections
    await live.call("POST", f"/contexts/{ctx}/sources", body, token=token)
    if associations:
        await live.call("POST", f"/contexts/{ctx}/associations", associations, token=token)


async def import_example(live: Live) -> None:
    await live.call("POST", "/import", raw=(EXAMPLE / "corpus.jsonl").read_bytes(), content_type="application/x-ndjson")


async def evaluate(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = await main_async(list(argv), stdout=out, stderr=err, env=dict(env or {}))
    return rc, out.getvalue(), err.getvalue()


def write_eval(path: Path, cases: list[dict[str, Any]], name: str | None = "test") -> str:
    header: dict[str, Any] = {"taguru_eval": 1}
    if name is not None:
        header["name"] = name
    lines = [json.dumps(header, ensure_ascii=False)] + [json.dumps(c, ensure_ascii=False) for c in cases]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def load(path: Path | str) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))
