"""A small reranker provider speaking the Cohere/Jina/TEI protocol, with switchable fault modes.

Run it for local use:  python tests/fake_reranker.py --port 8399 [--mode ok]
then start the server with TAGURU_RERANK_URL=http://127.0.0.1:8399/rerank TAGURU_RERANK_MODEL=fake-lexical.
Modes: ok (lexical scorer), reverse, slow, status500, status503, status429, status404, garbage,
no_results, wrong_length, repeated_index, float_index, oversize.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any

from aiohttp import web

_TERM = re.compile(r"\w+", re.UNICODE)


def lexical_order(query: str, documents: list[str]) -> list[int]:
    """Indices by shared terms (words and character pairs) with the query, best first, stable."""

    def grams(text: str) -> set[str]:
        words = set(_TERM.findall(text.lower()))
        pairs = {text[i : i + 2] for i in range(len(text) - 1)}
        return words | pairs

    q = grams(query)
    scores = [len(q & grams(doc)) for doc in documents]
    return sorted(range(len(documents)), key=lambda i: (-scores[i], i))


class FakeReranker:
    """The provider's state: mode, hit count and what the last request carried."""

    def __init__(self, mode: str = "ok", delay: float = 3.0) -> None:
        self.mode = mode
        self.delay = delay
        self.hits = 0
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization"))
        n = len(body["documents"])
        mode = self.mode
        if mode == "slow":
            await asyncio.sleep(self.delay)
            mode = "ok"
        if mode.startswith("status"):
            return web.Response(status=int(mode[6:]), text="provider trouble")
        if mode == "garbage":
            return web.Response(text="<html>not json</html>", content_type="text/html")
        if mode == "no_results":
            return web.json_response({"data": []})
        if mode == "oversize":
            return web.Response(
                body=b'{"results":[' + b" " * (4 * 1024 * 1024 + 10) + b"]}", content_type="application/json"
            )
        order = lexical_order(body["query"], body["documents"])
        if mode == "reverse":
            order = list(range(n))[::-1]
        elif mode == "wrong_length":
            order = order[:-1]
        elif mode == "repeated_index":
            order = [0] * n
        if mode == "float_index":
            results: list[dict[str, Any]] = [{"index": float(i), "relevance_score": 0.5} for i in order]
        else:
            results = [{"index": i, "relevance_score": 1.0 / (1 + r)} for r, i in enumerate(order)]
        return web.json_response({"model": body.get("model"), "results": results})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/rerank", self.handle)
        return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8399)
    parser.add_argument("--mode", default="ok")
    parser.add_argument("--delay", type=float, default=3.0)
    args = parser.parse_args()
    web.run_app(FakeReranker(args.mode, args.delay).app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
