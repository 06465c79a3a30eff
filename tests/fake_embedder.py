"""A deterministic OpenAI-compatible embedding provider for tests (embeddings spec §13), with fault knobs.

Run it for local use:  python tests/fake_embedder.py --port 8257 [--function flat|fruity|width:N]
then start the server with TAGURU_EMBED_URL=http://127.0.0.1:8257/v1/embeddings TAGURU_EMBED_MODEL=fake.

Embedding functions: `flat` (every input -> [1, 0, 0]), `table` (first matching prefix wins, else a
default), `width(n)` (flat, width settable at run time). Faults (`Fault`): a status, a sleep, a
malformed answer or a dropped connection, for every request or only those of one purpose or
whose inputs contain a marker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
from aiohttp import web

Vector = list[float]

FRUITY: list[tuple[str, Vector]] = [
    ("りんご", [1.0, 0.0, 0.0]),
    ("アップル", [0.96, 0.28, 0.0]),
    ("みかん", [0.28, 0.96, 0.0]),
]

MALFORMED = (
    "wrong_count",  # one vector too few
    "out_of_range",  # index n
    "repeated_index",  # every index 0
    "reversed_no_index",  # reversed order without indices (decodes in that reversed order)
    "reversed",  # reversed order with indices (decodes correctly)
    "mixed_widths",  # the last vector one component wider
    "non_numeric",  # a string component
    "not_json",
    "no_data",
    "no_vector",
    "huge_component",  # 1e39: finite in f64, not in f32
    "empty_vector",  # width 0
)


def flat(_text: str) -> Vector:
    return [1.0, 0.0, 0.0]


def table(entries: list[tuple[str, Vector]], default: Vector | None = None) -> Callable[[str], Vector]:
    """The vector of the first entry whose prefix `text` starts with, else `default` ([0, 0, 1])."""
    fallback = default or [0.0, 0.0, 1.0]

    def embed(text: str) -> Vector:
        for prefix, vector in entries:
            if text.startswith(prefix):
                return list(vector)
        return list(fallback)

    return embed


@attrs.define
class Fault:
    """One misbehaviour, applied to requests that match `purpose` and `marker` (None: any)."""

    status: int | None = None
    sleep: float = 0.0
    malformed: str | None = None
    drop: bool = False  # close the connection without answering
    purpose: str | None = None
    marker: str | None = None

    def applies(self, purpose: str | None, inputs: list[str]) -> bool:
        if self.purpose is not None and purpose != self.purpose:
            return False
        return self.marker is None or any(self.marker in text for text in inputs)


class FakeEmbedder:
    """The provider's state: embedding function, faults, and what every request carried."""

    def __init__(self, function: Callable[[str], Vector] = flat) -> None:
        self.function = function
        self.width: int | None = None  # set: the `width(n)` function (flat, n wide)
        self.faults: list[Fault] = []
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def calls(self) -> int:
        return len(self.requests)

    def calls_by_purpose(self) -> Counter[str | None]:
        return Counter(r["purpose"] for r in self.requests)

    def reset(self) -> None:
        self.faults.clear()
        self.requests.clear()
        self.max_in_flight = 0

    def vector(self, text: str) -> Vector:
        if self.width is not None:
            return [1.0] + [0.0] * (self.width - 1) if self.width else []
        return self.function(text)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        inputs = list(body.get("input", []))
        purpose = request.headers.get("X-Taguru-Embed-Purpose")
        self.requests.append(
            {
                "purpose": purpose,
                "authorization": request.headers.get("Authorization"),
                "content_type": request.headers.get("Content-Type"),
                "model": body.get("model"),
                "input": inputs,
                "raw": raw,
            }
        )
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request, body, inputs, purpose)
        finally:
            self.in_flight -= 1

    async def _answer(
        self, request: web.Request, body: dict[str, Any], inputs: list[str], purpose: str | None
    ) -> web.StreamResponse:
        fault = next((f for f in self.faults if f.applies(purpose, inputs)), None)
        if fault is not None and fault.sleep:
            await asyncio.sleep(fault.sleep)
        if fault is not None and fault.drop:
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)
        if fault is not None and fault.status is not None:
            return web.Response(status=fault.status, text="provider trouble")
        data: list[dict[str, Any]] = [
            {"object": "embedding", "index": i, "embedding": self.vector(text)} for i, text in enumerate(inputs)
        ]
        if fault is not None and fault.malformed is not None:
            answer = malform(fault.malformed, data)
            if isinstance(answer, bytes):
                return web.Response(body=answer, content_type="application/json")
            data = answer
        return web.json_response({"object": "list", "data": data, "model": body.get("model")})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{tail:.*}", self.handle)
        return app


def malform(kind: str, data: list[dict[str, Any]]) -> list[dict[str, Any]] | bytes:
    """`data` broken the way `kind` names (a bytes body for the answers that are not a data array)."""
    n = len(data)
    if kind == "not_json":
        return b"<html>not json</html>"
    if kind == "no_data":
        return b'{"object":"list","model":"m"}'
    if kind == "wrong_count":
        return data[:-1]
    if kind == "out_of_range":
        data[-1]["index"] = n
    elif kind == "repeated_index":
        for entry in data:
            entry["index"] = 0
    elif kind == "reversed_no_index":
        data = [{"object": "embedding", "embedding": entry["embedding"]} for entry in reversed(data)]
    elif kind == "reversed":
        data = list(reversed(data))
    elif kind == "mixed_widths":
        data[-1]["embedding"] = data[-1]["embedding"] + [0.0]
    elif kind == "non_numeric":
        data[-1]["embedding"] = ["x"] + data[-1]["embedding"][1:]
    elif kind == "no_vector":
        del data[-1]["embedding"]
    elif kind == "huge_component":
        data[-1]["embedding"] = [1e39] + data[-1]["embedding"][1:]
    elif kind == "empty_vector":
        for entry in data:
            entry["embedding"] = []
    else:
        raise ValueError(f"unknown malformed answer {kind!r}")
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8257)
    parser.add_argument("--function", default="flat", help="flat, fruity or width:N")
    args = parser.parse_args()
    fake = FakeEmbedder(table(FRUITY) if args.function == "fruity" else flat)
    if args.function.startswith("width:"):
        fake.width = int(args.function.split(":", 1)[1])
    web.run_app(fake.app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
