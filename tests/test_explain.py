"""The explain routes (spec graph-reads §6): verdicts, summaries and evidence, byte-exact where the spec pins
them, and in agreement with the real resolve and search answers on random corpora."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Client, compact
from fake_embedder import FakeEmbedder, Fault
from semantic_support import fruit_context

F32 = np.float32
RESOLVE = "/contexts/c/resolve/explain"
SEARCH = "/contexts/c/sources/search/explain"
NO_PROVIDER = {"ran": False, "reason": "no embedding provider is configured"}


async def raw_result(client: Client, path: str, body: dict[str, Any]) -> str:
    """The `result` member of a 200 envelope, as the bytes the server wrote."""
    headers = {"Content-Type": "application/json"}
    async with client.session.post(client.base + path, data=compact(body), headers=headers) as resp:
        raw = await resp.read()
        assert resp.status == 200, raw
    assert raw.startswith(b'{"result":') and b',"status":"ok","time":' in raw
    return raw[len(b'{"result":') : raw.rindex(b',"status":"ok","time":')].decode()


async def explain(client: Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return (await client.ok("POST", path, body))["result"]


async def alpha_beta(client: Client) -> None:
    await client.ok("PUT", "/contexts/c", {"description": "d"})
    await client.ok(
        "POST",
        "/contexts/c/associations",
        [{"subject": "alpha", "label": "connects_to", "object": "beta", "weight": 1}],
    )


async def sake(client: Client) -> None:
    await client.ok("PUT", "/contexts/c", {"description": "d"})
    await client.ok("POST", "/contexts/c/sources", {"passages": {"doc.md": "青嶺酒造は雲居県霧沢町の蔵元である。"}})


# ----- the spec's illustrative answers, byte for byte ------------------------------------


@pytest.mark.anyio
async def test_resolve_examples_are_byte_exact(client: Client) -> None:
    await alpha_beta(client)
    assert await raw_result(client, RESOLVE, {"cue": "alph", "expected": "alpha"}) == (
        '{"verdict":"served","summary":"served: \'alpha\' ranked 1 of 1 at limit 1000 (lexical tier)",'
        '"cue":"alph","expected":"alpha","in_vocabulary":true,"canonical":"alpha","expected_kind":"exact",'
        '"lexical":{"score":0.8,"kind":"containment","floor":0.3,"confident":true},'
        '"semantic":{"entered":false,"reason":"no embedding provider is configured"},'
        '"ranking":{"rank":1,"tier":"lexical","score":0.8,"limit":1000,"served":true,"limit_to_reach":1000}}'
    )
    assert await raw_result(client, RESOLVE, {"cue": "alpha", "expected": "beta"}) == (
        '{"verdict":"cue_resolved_exactly","summary":"the cue is an exact spelling of \'alpha\' — the exact tier '
        "answers alone, so 'beta' was never scored against it; a reworded cue is the way in\","
        '"cue":"alpha","expected":"beta","in_vocabulary":true,"canonical":"beta","expected_kind":"exact",'
        '"lexical":{"floor":0.3,"confident":true},'
        '"semantic":{"entered":false,"reason":"no embedding provider is configured"},'
        '"ranking":{"limit":1000,"served":false}}'
    )
    assert await raw_result(client, RESOLVE, {"cue": "alpha", "expected": "gamma"}) == (
        '{"verdict":"not_in_vocabulary","summary":"\'gamma\' is not in this context\'s concept vocabulary — no '
        'entry, no alias, no canonical spelling; the nearest stored spellings are attached",'
        '"cue":"alpha","expected":"gamma","in_vocabulary":false,"nearest":{"lexical":[],"semantic":[]}}'
    )


@pytest.mark.anyio
async def test_search_examples_are_byte_exact(client: Client) -> None:
    await sake(client)
    assert await raw_result(client, SEARCH, {"query": "酒造", "source": "doc.md"}) == (
        '{"verdict":"served","summary":"served: paragraph 0 of \'doc.md\' ranked 1 of 1 at limit 5",'
        '"source":"doc.md","paragraph":0,"paragraphs":1,"paragraph_named":false,"query_terms":["酒造"],'
        '"bm25":{"rank":1,"score":0.28768212,"terms":[{"term":"酒造","tf":1.0,"df":1,"idf":0.28768212,'
        '"contribution":0.28768212}]},"vector":{"ran":false,"reason":"no embedding provider is configured"},'
        '"ranking":{"fused":false,"ranked":1,"rank":1,"score":0.28768212,"limit":5,"served":true,'
        '"cutoff_score":0.28768212,"limit_to_reach":5}}'
    )
    assert await raw_result(client, SEARCH, {"query": "酒蔵", "source": "doc.md"}) == (
        '{"verdict":"no_term_overlap","summary":"paragraph 0 of \'doc.md\' shares no term with the query and the '
        'vector lane did not run (no embedding provider is configured)","source":"doc.md","paragraph":0,'
        '"paragraphs":1,"paragraph_named":false,"query_terms":["酒蔵"],"paragraph_terms":["青嶺","嶺酒","酒造",'
        '"造は","は雲","雲居","居県","県霧","霧沢","沢町","町の","の蔵","蔵元","元で","であ","ある"],'
        '"bm25":{"score":0.0,"terms":[{"term":"酒蔵","tf":0.0,"df":0,"idf":0.0,"contribution":0.0}]},'
        '"vector":{"ran":false,"reason":"no embedding provider is configured"},'
        '"ranking":{"fused":false,"ranked":0,"limit":5,"served":false}}'
    )


# ----- resolve verdicts --------------------------------------------------------------------


@pytest.mark.anyio
async def test_resolve_verdict_paths(client: Client) -> None:
    await alpha_beta(client)
    await client.ok("POST", "/contexts/c/aliases", {"concepts": {"α": "alpha"}})
    aliased = await explain(client, RESOLVE, {"cue": "alph", "expected": "α"})
    assert (aliased["verdict"], aliased["canonical"], aliased["expected_kind"]) == ("served", "alpha", "alias")
    # below_floor: the fuzzy score 0.5 against a request floor of 0.6
    await client.ok(
        "POST", "/contexts/c/associations", [{"subject": "abc", "label": "r", "object": "wxyz", "weight": 1}]
    )
    below = await explain(client, RESOLVE, {"cue": "abx", "expected": "abc", "dice_floor": 0.6})
    assert below["verdict"] == "below_floor"
    assert below["summary"] == (
        "the resolver scored 'abc' 0.5000 (fuzzy) against dice_floor 0.6000 — a floor at or under 0.5000 would "
        "have shown it"
    )
    assert below["lexical"] == {"score": 0.5, "kind": "fuzzy", "floor": 0.6, "confident": False}
    assert below["ranking"] == {"limit": 1000, "served": False}
    # below_cutoff: limit 1, rank 2, and limit 2 really serves it
    await client.ok(
        "POST", "/contexts/c/associations", [{"subject": "alphabet", "label": "r", "object": "x", "weight": 1}]
    )
    cut = await explain(client, RESOLVE, {"cue": "alph", "expected": "alphabet", "limit": 1})
    assert cut["verdict"] == "below_cutoff"
    assert cut["summary"] == "'alphabet' passed the floor but ranked 2 of 2 — the request served 1; limit 2 reaches it"
    assert cut["ranking"] == {
        "rank": 2,
        "tier": "lexical",
        "score": 0.5,
        "limit": 1,
        "served": False,
        "limit_to_reach": 2,
    }
    again = (await client.ok("POST", "/contexts/c/resolve", {"cue": "alph", "limit": 2}))["result"]
    assert [c["name"] for c in again] == ["alpha", "alphabet"]
    # semantic_not_run, both texts
    never = await explain(client, RESOLVE, {"cue": "alphax", "expected": "beta"})
    assert never["verdict"] == "semantic_not_run"
    assert never["summary"] == (
        "'beta' shares no spelling with the cue, and the semantic tier never joined: the lexical tier was "
        "confident (best score ≥ 0.5)"
    )
    could_not = await explain(client, RESOLVE, {"cue": "qqq", "expected": "beta"})
    assert could_not["verdict"] == "semantic_not_run"
    assert could_not["summary"] == (
        "'beta' shares no spelling with the cue, and the semantic tier could not score it: no embedding provider "
        "is configured"
    )
    assert could_not["semantic"] == {"entered": True, "reason": "no embedding provider is configured"}
    assert could_not["lexical"] == {"floor": 0.3, "confident": False}
    # not_in_vocabulary carries the nearest stored spellings
    missing = await explain(client, RESOLVE, {"cue": "x", "expected": "alphas"})
    assert missing["nearest"]["lexical"][0] == {"name": "alpha", "score": 5 / 6, "kind": "containment"}
    assert [n["name"] for n in missing["nearest"]["lexical"]] == ["alpha", "alphabet"]
    assert missing["nearest"]["semantic"] == [] and "semantic_note" not in missing["nearest"]


@pytest.mark.anyio
async def test_resolve_label_explain_runs_over_labels(client: Client) -> None:
    await alpha_beta(client)
    found = await explain(client, "/contexts/c/resolve_label/explain", {"cue": "connects", "expected": "connects_to"})
    assert found["verdict"] == "served" and found["ranking"]["tier"] == "lexical"
    missing = await explain(client, "/contexts/c/resolve_label/explain", {"cue": "x", "expected": "alpha"})
    assert missing["summary"].startswith("'alpha' is not in this context's label vocabulary — ")


# ----- search verdicts --------------------------------------------------------------------


@pytest.mark.anyio
async def test_search_early_verdicts(client: Client) -> None:
    await client.ok("PUT", "/contexts/c", {"description": "d"})
    await client.ok(
        "POST",
        "/contexts/c/sources",
        {"passages": {"two.md": "一段落目。\n\n二段落目。", "gone.md": "消える文。"}, "tags": {"two.md": ["t"]}},
    )
    await client.ok("POST", "/contexts/c/sources/retract", {"source": "gone.md"})
    assert await explain(client, SEARCH, {"query": "文", "source": "gone.md"}) == {
        "verdict": "not_stored",
        "summary": "source 'gone.md' has no passages in context 'c' — never stored here, or stored and later "
        "retracted (the store keeps no tombstone history to tell which)",
        "source": "gone.md",
    }
    assert await explain(client, SEARCH, {"query": "段落", "source": "two.md", "index": 2}) == {
        "verdict": "paragraph_out_of_range",
        "summary": "paragraph 2 is out of range for source 'two.md' — it stores 2 paragraph(s), 0-based",
        "source": "two.md",
        "paragraph": 2,
        "paragraphs": 2,
    }
    assert await explain(client, SEARCH, {"query": "段落", "source": "two.md", "tags": ["other"]}) == {
        "verdict": "filtered_out",
        "summary": "source 'two.md' is excluded by the request's source filter (tags/since/until) — the search "
        "being explained never considered it",
        "source": "two.md",
    }
    assert await explain(client, SEARCH, {"query": "、。", "source": "two.md"}) == {
        "verdict": "no_query_terms",
        "summary": "the query yields no searchable terms — a search of it answers the empty list before either "
        "lane runs",
        "source": "two.md",
    }
    await client.ok("POST", "/contexts/c/sources", {"passages": {"blank.md": "\n \n"}})
    assert await explain(client, SEARCH, {"query": "段落", "source": "blank.md"}) == {
        "verdict": "paragraph_out_of_range",
        "summary": "paragraph 0 is out of range for source 'blank.md' — it stores 0 paragraph(s), 0-based",
        "source": "blank.md",
        "paragraphs": 0,
    }
    named = await explain(client, SEARCH, {"query": "段落", "source": "two.md", "paragraph": 1, "tags": ["t"]})
    assert (named["verdict"], named["paragraph"], named["paragraph_named"]) == ("served", 1, True)


@pytest.mark.anyio
async def test_search_refusals_match_the_search(client: Client) -> None:
    await sake(client)
    for body in (
        {"query": "q", "since": 5, "until": 5},
        {"query": "q", "tags": [f"t{i}" for i in range(33)]},
        {"query": "q", "tags": ["x"] * 1001},
        {"query": "q", "tags": [""]},
    ):
        searched = await client.call("POST", "/contexts/c/sources/search", body)
        explained = await client.call("POST", SEARCH, {**body, "source": "doc.md"})
        assert explained[0] == searched[0] == 400 and explained[1]["error"] == searched[1]["error"]
    status, body, _h = await client.call("POST", SEARCH, {"query": "q", "source": "s", "paragraph": 0, "index": 0})
    assert status == 422 and "duplicate field `paragraph`" in body["error"]
    status, body, _h = await client.call("POST", "/contexts/nope/sources/search/explain", {"query": "q", "source": "s"})
    assert (status, body["code"]) == (404, "no_context")
    status, body, _h = await client.call("POST", "/contexts/nope/resolve/explain", {"cue": "q", "expected": "s"})
    assert (status, body["code"]) == (404, "no_context")
    status, body, _h = await client.call("POST", RESOLVE, {"cue": "q"})
    assert status == 422 and "missing field `expected`" in body["error"]


@pytest.mark.anyio
async def test_below_cutoff_reach_is_the_search_at_that_limit(client: Client) -> None:
    await client.ok("PUT", "/contexts/c", {"description": "d"})
    passages = {f"s{i:02d}.md": "酒造 " * (i % 4 + 1) + f"段落{i}。" for i in range(12)}
    await client.ok("POST", "/contexts/c/sources", {"passages": passages})
    hits = (await client.ok("POST", "/contexts/c/sources/search", {"query": "酒造", "limit": 12}))["result"]["hits"]
    last = hits[-1]
    got = await explain(client, SEARCH, {"query": "酒造", "source": last["source"], "limit": 3})
    assert got["verdict"] == "below_cutoff" and got["ranking"]["rank"] == 12
    reach = got["ranking"]["limit_to_reach"]
    assert reach == 12 and got["ranking"]["cutoff_score"] == hits[2]["score"]
    assert got["summary"] == (
        f"paragraph 0 of '{last['source']}' ranked 12 of 12 — the cutoff at limit 3 was score "
        f"{float(F32(hits[2]['score'])):.4f}; limit 12 reaches it"
    )
    rerun = (await client.ok("POST", "/contexts/c/sources/search", {"query": "酒造", "limit": reach}))["result"]
    assert any(h["source"] == last["source"] for h in rerun["hits"])
    zero = await explain(client, SEARCH, {"query": "酒造", "source": last["source"], "limit": 0})
    assert "cutoff_score" not in zero["ranking"] and " was score -; limit 12 reaches it" in zero["summary"]


@pytest.mark.anyio
async def test_explain_counts_a_read_but_no_search_metric(client: Client) -> None:
    await alpha_beta(client)
    await client.ok("POST", "/contexts/c/sources", {"passages": {"doc.md": "alpha beta"}})

    async def usage() -> tuple[int, int]:
        got = (await client.ok("GET", "/contexts/c"))["result"]["usage"]
        return got["reads"], got["empty_reads"]

    async def metric_lines() -> list[str]:
        async with client.session.get(client.base + "/metrics") as resp:
            text = (await resp.text()).splitlines()
        return [line for line in text if line.startswith(("taguru_resolves", "taguru_passage_lane"))]

    metrics, before = await metric_lines(), await usage()
    await explain(client, RESOLVE, {"cue": "alph", "expected": "alpha"})
    await explain(client, RESOLVE, {"cue": "alph", "expected": "nope"})
    await explain(client, SEARCH, {"query": "alpha", "source": "doc.md"})
    await explain(client, SEARCH, {"query": "alpha", "source": "nope.md"})
    after = await usage()
    assert (after[0] - before[0], after[1] - before[1]) == (4, 2)
    assert await metric_lines() == metrics


# ----- agreement with the real answers on random corpora --------------------------------


ALPHABET = "あいうえおかき"


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET + "、 ") for _ in range(n)).strip() or "あ"


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(4))
async def test_search_explain_agrees_with_the_search(client: Client, seed: int) -> None:
    rng = random.Random(seed)
    name = f"r{seed}"
    await client.ok("PUT", f"/contexts/{name}", {"description": "d"})
    passages = {
        f"{rng.choice('abc')}{i}.md": "\n\n".join(_text(rng, rng.randint(1, 12)) for _ in range(rng.randint(1, 3)))
        for i in range(25)
    }
    questions = {s: [{"paragraph": 0, "question": _text(rng, 4)}] for s in list(passages)[:5]}
    await client.ok("POST", f"/contexts/{name}/sources", {"passages": passages, "questions": questions})
    for gone in list(passages)[-3:]:  # tombstones in the index
        await client.ok("POST", f"/contexts/{name}/sources/retract", {"source": gone})
    live = list(passages)[:-3]
    for _ in range(6):
        query, limit = _text(rng, rng.randint(1, 5)), rng.randint(0, 8)
        result = await client.ok("POST", f"/contexts/{name}/sources/search", {"query": query, "limit": limit})
        hits = result["result"]["hits"]
        everything = await client.ok("POST", f"/contexts/{name}/sources/search", {"query": query, "limit": 1000})
        ranked = everything["result"]["hits"]
        for source in rng.sample(live, 4) + [h["source"] for h in ranked[:3] + ranked[-2:]]:
            got = await explain(
                client, f"/contexts/{name}/sources/search/explain", {"query": query, "source": source, "limit": limit}
            )
            if got["verdict"] == "no_query_terms":
                assert not ranked
                continue
            at = next((i for i, h in enumerate(ranked) if h["source"] == source), None)
            ranking = got["ranking"]
            assert ranking["ranked"] == len(ranked)
            if at is None:
                assert got["verdict"] == "no_term_overlap" and "rank" not in ranking
                continue
            hit = ranked[at]
            assert (ranking["rank"], got["paragraph"]) == (at + 1, hit["paragraph"])
            assert ranking["score"] == hit["score"] == got["bm25"]["score"]  # the same f32
            assert got["verdict"] == ("served" if at < limit else "below_cutoff")
            assert [(h["source"], h["paragraph"]) for h in hits] == [
                (h["source"], h["paragraph"]) for h in ranked[:limit]
            ]
            reach = ranking["limit_to_reach"]
            rerun = await client.ok("POST", f"/contexts/{name}/sources/search", {"query": query, "limit": reach})
            assert any(h["source"] == source and h["paragraph"] == hit["paragraph"] for h in rerun["result"]["hits"])
            total = F32(0.0)
            for term in got["bm25"]["terms"]:
                total = F32(total + F32(term["contribution"]))
            assert total == F32(hit["score"])


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(3))
async def test_resolve_explain_agrees_with_resolve(client: Client, seed: int) -> None:
    rng = random.Random(100 + seed)
    name = f"v{seed}"
    await client.ok("PUT", f"/contexts/{name}", {"description": "d"})
    words = sorted({_text(rng, rng.randint(2, 6)).replace(" ", "").replace("、", "") or "あ" for _ in range(40)})
    batch = [{"subject": w, "label": "rel", "object": rng.choice(words), "weight": 1} for w in words]
    await client.ok("POST", f"/contexts/{name}/associations", batch)
    for _ in range(8):
        cue, limit = _text(rng, rng.randint(1, 5)), rng.randint(1, 6)
        floor = rng.choice([None, 0.0, 0.2, 0.5])
        body: dict[str, Any] = {"cue": cue, "limit": limit}
        if floor is not None:
            body["dice_floor"] = floor
        served = (await client.ok("POST", f"/contexts/{name}/resolve", body))["result"]
        unlimited = (await client.ok("POST", f"/contexts/{name}/resolve", {**body, "limit": 1000}))["result"]
        for expected in rng.sample(words, 5) + [c["name"] for c in unlimited[:2] + unlimited[-2:]]:
            got = await explain(client, f"/contexts/{name}/resolve/explain", {**body, "expected": expected})
            names = [c["name"] for c in served]
            ranking = got["ranking"]
            assert ranking["served"] == (expected in names)
            if expected in names:
                assert got["verdict"] == "served" and ranking["rank"] == names.index(expected) + 1
            at = next((i for i, c in enumerate(unlimited) if c["name"] == expected), None)
            assert ranking.get("rank") == (None if at is None else at + 1)
            if at is not None:
                assert ranking["score"] == unlimited[at]["score"]
                rerun = await client.ok(
                    "POST", f"/contexts/{name}/resolve", {**body, "limit": ranking["limit_to_reach"]}
                )
                assert expected in [c["name"] for c in rerun["result"]]
            else:
                assert "limit_to_reach" not in ranking and got["verdict"] != "served"


# ----- with an embedding provider ----------------------------------------------------------


@pytest.fixture
async def fruit(settings_factory) -> AsyncIterator[tuple[Client, FakeEmbedder]]:
    async with fruit_context(settings_factory) as pair:
        yield pair


@pytest.mark.anyio
async def test_provider_on_answers(fruit: tuple[Client, FakeEmbedder]) -> None:
    client, fake = fruit
    resolve, search = "/contexts/fruit/resolve/explain", "/contexts/fruit/sources/search/explain"
    unrefreshed = await explain(client, resolve, {"cue": "アップル", "expected": "りんご"})
    assert unrefreshed["semantic"] == {
        "entered": True,
        "reason": "no concept gloss vectors exist yet — no embedding refresh has run",
    }
    no_rows = await explain(client, search, {"query": "みかん", "source": "a.md"})
    assert no_rows["summary"] == (
        "paragraph 0 of 'a.md' shares no term with the query and the vector lane did not run (no paragraph "
        "vectors exist yet — the embedding refresh has not covered this context)"
    )
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    served = await explain(client, resolve, {"cue": "アップル", "expected": "りんご"})
    assert served["summary"] == "served: 'りんご' ranked 1 of 2 at limit 1000 (semantic tier)"
    assert served["semantic"] == {"entered": True, "floor": 0.35, "cosine": 0.96, "rank": 1, "cap": 5}
    assert served["ranking"] == {
        "rank": 1,
        "tier": "semantic",
        "score": 0.9599999785423279,
        "limit": 1000,
        "served": True,
        "limit_to_reach": 1000,
    }
    under = await explain(client, resolve, {"cue": "アップル", "expected": "みかん", "semantic_floor": 0.6})
    assert under["verdict"] == "semantic_below_floor"
    assert under["summary"] == (
        "'みかん' shares no spelling with the cue; its gloss cosine 0.5376 sits under the semantic floor 0.6000 — "
        "a floor at or under 0.5376 would have shown it"
    )
    confident = await explain(client, resolve, {"cue": "りんごの木", "expected": "赤"})
    assert confident["semantic"]["reason"] == (
        "the lexical tier was confident (best score ≥ 0.5), so the semantic tier never joined"
    )
    nearest = await explain(client, resolve, {"cue": "x", "expected": "アップル"})
    assert nearest["nearest"]["semantic"] == [
        {"name": "りんご", "cosine": 0.96},
        {"name": "みかん", "cosine": 0.5376},
        {"name": "橙", "cosine": 0.0},
        {"name": "赤", "cosine": 0.0},
    ]
    fused = await explain(client, search, {"query": "りんご", "source": "a.md"})
    hit = (await client.ok("POST", "/contexts/fruit/sources/search", {"query": "りんご"}))["result"]["hits"][0]
    assert fused["vector"] == {"ran": True, "floor": 0.35, "cosine": 1.0, "rank": 1}
    assert fused["ranking"]["fused"] is True and fused["ranking"]["score"] == hit["score"]
    assert str(F32(fused["ranking"]["score"])) == "0.032786883"
    vector_only = await explain(client, search, {"query": "アップル", "source": "b.md"})
    assert vector_only["verdict"] == "served" and vector_only["vector"]["rank"] == 2
    fake.faults.append(Fault(status=400, purpose="query"))
    failed = await explain(client, resolve, {"cue": "りんごジュース", "expected": "みかん"})
    assert failed["semantic"]["reason"].startswith("the cue embedding failed: ")
    note = await explain(client, resolve, {"cue": "x", "expected": "グレープ"})
    assert note["nearest"]["semantic_note"] and note["nearest"]["semantic"] == []


@pytest.mark.anyio
async def test_provider_on_below_cutoff_is_verified_against_the_fused_search(
    fruit: tuple[Client, FakeEmbedder],
) -> None:
    client, _fake = fruit
    await client.ok("POST", "/contexts/fruit/embeddings/refresh")
    got = await explain(
        client, "/contexts/fruit/sources/search/explain", {"query": "果物", "source": "b.md", "limit": 1}
    )
    assert got["verdict"] == "below_cutoff"
    assert (
        got["summary"]
        == "paragraph 0 of 'b.md' ranked 2 of 2 — the cutoff at limit 1 was score 0.0164; limit 2 reaches it"
    )
    assert got["vector"] == {"ran": True, "floor": 0.35, "cosine": 0.0}  # scored, under the floor: no lane rank
    ranking = got["ranking"]
    assert (ranking["fused"], ranking["rank"], ranking["limit_to_reach"]) == (True, 2, 2)
    assert str(F32(ranking["score"])) == "0.016129032" and str(F32(ranking["cutoff_score"])) == "0.016393442"
    rerun = await client.ok("POST", "/contexts/fruit/sources/search", {"query": "果物", "limit": 2})
    assert [h["source"] for h in rerun["result"]["hits"]] == ["a.md", "b.md"]
    assert got["bm25"]["rank"] == 2 and got["bm25"]["score"] == rerun["result"]["hits"][1]["lanes"]["bm25"]["score"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("resolve/explain", b'{"cue":"a","expected":"b"}'),
        ("resolve_label/explain", b'{"cue":"a","expected":"b"}'),
        ("sources/search/explain", b'{"query":"a","source":"b"}'),
    ],
)
async def test_a_spent_budget_wins_over_a_missing_context(path: str, body: bytes) -> None:
    import time

    from multidict import CIMultiDict

    from taguru_server.server.auth import OPEN
    from taguru_server.server.call import Call
    from taguru_server.server.errors import status_of
    from taguru_server.server.routing import ROUTER
    from taguru_server.store.errors import ApiError

    handler = ROUTER.resolve("POST", f"/contexts/nope/{path}").handler
    assert handler is not None
    call = Call(
        method="POST",
        path=f"/contexts/nope/{path}",
        name="nope",
        query={},
        headers=CIMultiDict({"Content-Type": "application/json"}),
        body=body,
        registry=None,
        settings=None,
        principal=OPEN,
        deadline=time.monotonic() - 1,
    )  # type: ignore[arg-type]
    with pytest.raises(ApiError) as err:
        await handler(call)
    assert err.value.code == "timeout" and status_of(err.value) == 408
    assert err.value.message == (
        "request exceeded its budget before this operation could start; narrow the query or raise "
        "TAGURU_REQUEST_TIMEOUT_SECS"
    )


# ----- MCP ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_mcp_tools_route_to_the_explain_calls(client: Client) -> None:
    await alpha_beta(client)
    await client.ok("POST", "/contexts/c/sources", {"passages": {"doc.md": "alpha beta"}})

    async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
        return (await client.ok("POST", "/mcp", body))["result"]

    listed = (await client.ok("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))["result"]
    by_name = {t["name"]: t for t in listed["tools"]}
    assert by_name["explain_resolve"]["inputSchema"]["required"] == ["context", "cue", "expected"]
    assert by_name["explain_search"]["inputSchema"]["required"] == ["context", "query", "source"]
    for tool, path, args in (
        ("explain_resolve", RESOLVE, {"cue": "alph", "expected": "alpha"}),
        ("explain_resolve_label", "/contexts/c/resolve_label/explain", {"cue": "conn", "expected": "connects_to"}),
        ("explain_search", SEARCH, {"query": "alpha", "source": "doc.md", "paragraph": 0}),
    ):
        got = await call(tool, {"context": "c", **args})
        assert "isError" not in got
        assert json.loads(got["content"][0]["text"])["result"] == await explain(client, path, args)
    missing = await call("explain_resolve", {"context": "c", "cue": "x"})
    assert missing["isError"] is True and missing["content"][0]["text"] == "missing required argument 'expected'"


# ----- the official SDK -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from taguru.testing import SpawnedServer
    from test_official_sdk import server_binary

    tmp: Path = tmp_path_factory.mktemp("sdk-explain")
    spawned = SpawnedServer(server_binary(tmp), tmp / "data", {})
    try:
        yield spawned
    finally:
        spawned.stop()


@pytest.mark.slow
def test_official_sdk_decodes_the_explanations(sdk_server: Any) -> None:
    from taguru import ResolveExplanation, SearchExplanation, Taguru

    with Taguru(sdk_server.base_url) as client:
        client.contexts.create("ex")
        ctx = client.context("ex")
        ctx.add_associations([{"subject": "alpha", "label": "connects_to", "object": "beta", "weight": 1.0}])
        ctx.store_passages({"doc.md": "青嶺酒造は雲居県霧沢町の蔵元である。"})
        resolved = ctx.explain_resolve("alph", "alpha")
        assert isinstance(resolved, ResolveExplanation) and resolved.verdict == "served"
        assert resolved.lexical is not None and resolved.lexical.score == 0.8 and resolved.lexical.kind == "containment"
        assert resolved.semantic is not None and resolved.semantic.reason == "no embedding provider is configured"
        assert resolved.ranking is not None and resolved.ranking.limit_to_reach == 1000
        missing = ctx.explain_resolve("alpha", "gamma")
        assert missing.nearest is not None and missing.nearest.lexical == [] and missing.canonical is None
        label = ctx.explain_resolve_label("connects", "connects_to")
        assert label.verdict == "served" and label.expected_kind == "exact"
        searched = ctx.explain_search_passages("酒造", "doc.md")
        assert isinstance(searched, SearchExplanation) and searched.verdict == "served"
        assert searched.bm25 is not None and searched.bm25.terms[0].term == "酒造"
        assert searched.bm25.terms[0].df == 1 and searched.bm25.score == pytest.approx(0.28768212)
        assert searched.vector is not None and searched.vector.ran is False
        assert searched.ranking is not None and searched.ranking.fused is False and searched.ranking.rank == 1
        early = ctx.explain_search_passages("、。", "doc.md", paragraph=0)
        assert early.verdict == "no_query_terms" and early.bm25 is None


# ----- the BM25 addends against the index's own search -----------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_bm25_addends_sum_to_the_search_score(seed: int) -> None:
    """Over random corpora with retractions and re-stores in between, every paragraph's addends (query-term
    order, f32) sum to the very score the search gives it, and tf/df agree with the tokenizer."""
    from stage_support import make_context

    from taguru_server.store.model.context import Context
    from taguru_server.store.text import query_terms, terms

    rng = random.Random(1000 + seed)
    words = ["AppState", "HTTPServer", "alpha", "beta", "u64Max", "酒造", "蔵元", "カタカナ", "かたかな", "水、源"]

    def text() -> str:
        return " ".join(rng.choice(words) + rng.choice(["", "。", " 第10篇"]) for _ in range(rng.randint(1, 8)))

    ctx: Context = make_context("b")
    for round_ in range(4):
        for _i in range(rng.randint(5, 15)):
            questions = [(0, text())] if rng.random() < 0.3 else []
            body = "\n\n".join(text() for _ in range(rng.randint(1, 3)))
            ctx.store_passage(f"s{rng.randint(0, 30)}", body, questions, [], [], [], round_, None)
        for _ in range(rng.randint(0, 4)):
            ctx.retract_source(f"s{rng.randint(0, 30)}")
        for _ in range(5):
            q_terms = query_terms(text())
            docs, scores = ctx.bm25.search(q_terms)
            by_doc = dict(zip(docs.tolist(), scores.tolist(), strict=True))
            for sid, passage in ctx.passages.items():
                for p, doc in enumerate(passage.docs):
                    stats = ctx.bm25.explain(q_terms, doc)
                    total = F32(0.0)
                    for st in stats:
                        total = F32(total + st.contribution)
                    if doc in by_doc:
                        assert total == F32(by_doc[doc]), (ctx.sources[sid], p)
                    else:
                        assert total == 0 and all(st.tf == 0 for st in stats)
                    own = terms(passage.paragraphs[p]) + [t for qp, q in passage.questions if qp == p for t in terms(q)]
                    assert [float(st.tf) for st in stats] == [float(own.count(t)) for t in q_terms]
            for term, st in zip(q_terms, ctx.bm25.explain(q_terms, None), strict=True):
                held = sum(
                    term in terms(par) + [t for qp, q in pa.questions if qp == i for t in terms(q)]
                    for pa in ctx.passages.values()
                    for i, par in enumerate(pa.paragraphs)
                )
                assert st.df == held and st.contribution == 0
