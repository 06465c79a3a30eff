"""The near-dup stage: character-bigram Dice ≥ 0.9 against kept passages."""

from __future__ import annotations

import pytest
from stage_support import cand, fused, plain, run_stage

from taguru_server.stages.model import NEAR_DUP_OMITTED, RANKED, SURVIVORS
from taguru_server.stages.near_dup import NearDup, bigram_set, dice


def test_dice_examples() -> None:
    d = dice(
        bigram_set("the quick brown fox jumps over the lazy dog"),
        bigram_set("the quick brown fox jumps over the lazy dogs"),
    )
    assert round(d, 3) == 0.987
    assert dice(bigram_set("cats are independent animals"), bigram_set("quarterly revenue exceeded forecasts")) == 0.25
    assert dice(bigram_set("カタカナ テキスト"), bigram_set("かたかな てきすと")) == 1.0
    assert dice(bigram_set("ＡＢＣ　ＤＥＦ"), bigram_set("abc def")) == 1.0
    assert bigram_set("a") == frozenset({"aa"}) and bigram_set("") == frozenset()


@pytest.mark.anyio
async def test_near_dup_keeps_the_better_ranked(snapshot) -> None:
    ranked = (
        fused(
            cand("passage", "t\x00a.md\x000", "passage_bm25", 1, text="the quick brown fox jumps over the lazy dog"), 1
        ),
        fused(cand("association", "x\x00r\x00y", "graph_activate", 1, text="x r y"), 2),
        fused(
            cand("passage", "t\x00b.md\x000", "passage_bm25", 2, text="the quick brown fox jumps over the lazy dogs"), 3
        ),
        fused(cand("passage", "t\x00c.md\x000", "passage_bm25", 3, text="an unrelated sentence"), 4),
    )
    out = await run_stage(NearDup(), {RANKED: ranked})
    assert [f.fused_rank for f in out.values[SURVIVORS]] == [1, 2, 4]
    (omitted,) = out.values[NEAR_DUP_OMITTED]
    assert omitted.duplicate_of == "passage\x00t\x00a.md\x000"
    assert plain(out) == snapshot


def test_size_bound_never_hides_a_match() -> None:
    import random

    from taguru_server.stages.near_dup import suppress_near_duplicates

    rng = random.Random(3)
    alphabet = "abcdefg"
    for _ in range(3000):
        ta = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        tb = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        if dice(bigram_set(ta), bigram_set(tb)) >= 0.9:
            pair = (
                fused(cand("passage", "t\x00a\x000", "passage_bm25", 1, text=ta), 1),
                fused(cand("passage", "t\x00b\x000", "passage_bm25", 2, text=tb), 2),
            )
            kept, dropped = suppress_near_duplicates(pair, 0.9)
            assert [f.fused_rank for f in kept] == [1] and [o.duplicate_of for o in dropped] == [
                "passage\x00t\x00a\x000"
            ]


def test_bitset_path_equals_the_plain_rule() -> None:
    import random

    from taguru_server.stages.near_dup import suppress_near_duplicates

    rng = random.Random(9)
    for _ in range(200):
        texts = ["".join(rng.choice("abcab ") for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 12))]
        ranked = tuple(
            fused(cand("passage", f"t\x00{i}\x000", "passage_bm25", i + 1, text=t), i + 1) for i, t in enumerate(texts)
        )
        kept, dropped = suppress_near_duplicates(ranked)
        plain_kept: list = []
        plain_dropped = []
        for f in ranked:
            g = bigram_set(f.candidate.text)
            hit = next((k for k in plain_kept if dice(g, bigram_set(k.candidate.text)) >= 0.9), None)
            if hit is None:
                plain_kept.append(f)
            else:
                plain_dropped.append((f.candidate_id, hit.candidate_id))
        assert list(kept) == plain_kept
        assert [(o.candidate_id, o.duplicate_of) for o in dropped] == plain_dropped
