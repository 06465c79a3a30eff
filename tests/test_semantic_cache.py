"""The paraphrase tier (TAGURU_SEMANTIC_CACHE_THRESHOLD) over the retrieval cache: the guard's three multisets,
the claim store's bounds, and over real HTTP a paraphrase served the canonical's stored bytes, a stale claim
computed fresh, a guarded and a missed probe, each counted once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Client
from fake_embedder import FRUITY, FakeEmbedder, table
from semantic_support import serving

from taguru_server.server.semantic_cache import MAX_CLAIMS, SemanticCache, guard

TIME = re.compile(rb',"time":[-+0-9.eE]+')


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("does it contain nuts", "does it contain nuts?", True),
        ("does it contain nuts", "does it not contain nuts", False),
        ("is it sweet", "isn't it sweet", False),
        ("don\u2019t stir", "don't stir", True),
        ("cannot ship", "can ship", False),
        ("辛口の酒を含む", "辛口の酒を含まない", False),
        ("冷やで飲めます", "冷やで飲めません", False),
        ("不透明な酒", "透明な酒", False),
        ("top 10 brews", "top 10 brews please", True),
        ("top 10 brews", "top 01 brews", False),
        ("top 10 brews", "top 11 brews", False),
        ("brewed in １９９９", "brewed in 1999", True),  # NFKC folds the full-width digits
        ("tell me about Kyoto", "tell me about kyoto", False),
        ("Kyoto sake", "kyoto sake", True),  # the first token is exempt
        ("NASA launches", "nasa launches", False),  # unless it is all uppercase and 2+ long
        ("A sake", "a sake", True),
    ],
)
def test_the_guard(a: str, b: str, same: bool) -> None:
    assert guard(a, b) is same
    assert guard(b, a) is same


def test_claims_are_bounded_and_a_matching_claim_is_replaced() -> None:
    tier = SemanticCache(0.9)
    v = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    tier.register("b", "りんご", v, b"1")
    tier.register("b", "リンゴ", v, b"2")  # would match the canonical: replaces it
    assert len(tier) == 1 and tier.probe("b", "林檎", v).claim.params == b"2"  # type: ignore[union-attr]
    tier.register("b", "りんごない", v, b"3")  # guarded against it: its own cluster
    assert len(tier) == 2
    assert tier.probe("other", "りんご", v).outcome == "miss"
    for i in range(MAX_CLAIMS + 5):
        tier.register(("bucket", i), "q", v, b"x")
    assert len(tier) == MAX_CLAIMS


async def search(client: Client, query: str) -> bytes:
    status, text, _h = await client.fetch("POST", "/contexts/fruit/sources/search", {"query": query})
    assert status == 200, text
    return TIME.sub(b"", text)


async def outcome_counts(client: Client) -> dict[str, float]:
    async with client.session.get(client.base + "/metrics") as resp:
        text = (await resp.read()).decode()
    found = re.findall(r'^taguru_semantic_cache_total\{outcome="(\w+)"\} (\S+)$', text, re.M)
    return {k: float(v) for k, v in found}


@pytest.mark.anyio
async def test_paraphrases_over_http(settings_factory: Any, tmp_path: Path) -> None:
    fake = FakeEmbedder(table(FRUITY))
    env = {"TAGURU_EMBED_PASSAGES": "1", "TAGURU_SEMANTIC_CACHE_THRESHOLD": "0.9"}
    async with serving(settings_factory, fake, **env) as client:
        await client.ok("PUT", "/contexts/fruit", {"description": "d"})
        await client.ok("POST", "/contexts/fruit/sources", {"passages": {"a.md": "りんごは赤い果物。"}})
        await client.ok("POST", "/contexts/fruit/embeddings/refresh")
        canonical = await search(client, "りんご")  # miss: registered as the canonical
        assert await search(client, "アップル") == canonical  # cosine 0.96: the canonical's stored bytes
        await search(client, "りんごではない")  # above the threshold, refused by the guard
        await search(client, "みかん")  # cosine 0.28: below it
        assert await outcome_counts(client) == {"hit": 1, "stale": 0, "guarded": 1, "miss": 2}
        await client.ok("POST", "/contexts/fruit/sources", {"passages": {"b.md": "アップルパイ。"}})
        fresh = await search(client, "アップル")  # the claim's key moved with the write: computed fresh
        assert fresh != canonical
        assert await outcome_counts(client) == {"hit": 1, "stale": 1, "guarded": 1, "miss": 2}
        async with client.session.get(client.base + "/metrics") as resp:
            assert "taguru_semantic_cache_entries 3.0" in (await resp.read()).decode()


@pytest.mark.anyio
async def test_the_tier_is_off_by_default(settings_factory: Any) -> None:
    fake = FakeEmbedder(table(FRUITY))
    async with serving(settings_factory, fake, TAGURU_EMBED_PASSAGES="1") as client:
        await client.ok("PUT", "/contexts/fruit", {"description": "d"})
        await client.ok("POST", "/contexts/fruit/sources", {"passages": {"a.md": "りんごは赤い果物。"}})
        await client.ok("POST", "/contexts/fruit/embeddings/refresh")
        assert await search(client, "りんご") != await search(client, "アップル")
        assert set((await outcome_counts(client)).values()) == {0.0}
