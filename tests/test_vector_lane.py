"""The vector lane of passage search: the seven states, the exact sweep, fusion arithmetic (spec embeddings §7)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from stage_support import make_context

from taguru_server.server.wire.render.lanes import search_passages
from taguru_server.store.index.vectors import PassageStore, RowKey, fnv1a64, normalize
from taguru_server.store.read.vector_lane import VectorQuery, sequential_dot, sweep

F32 = np.float32
TABLE = [("りんご", [1, 0, 0]), ("アップル", [0.96, 0.28, 0]), ("みかん", [0.28, 0.96, 0])]
DEFAULT = [0, 0, 1]


def table(text: str) -> np.ndarray:
    for prefix, vec in TABLE:
        if text.startswith(prefix):
            return normalize(vec)
    return normalize(DEFAULT)


def fruit(model: str = "fake-table", width: int = 3):
    """The spec's §7.4 context, with its passage store as a refresh would leave it."""
    ctx = make_context("fruit", passages={"a.md": "りんごは赤い果物。", "b.md": "みかんは橙色の果物。"})
    keys, rows = [], []
    for source in sorted(ctx.source_id):
        passage = ctx.passages[ctx.source_id[source]]
        for i, text in enumerate(passage.paragraphs):
            keys.append(RowKey(source, i, fnv1a64(text), None))
            rows.append(table(text)[:width] if width == 3 else np.ones(width, dtype=F32))
    ctx.vectors.passages = PassageStore(model, width, keys, np.vstack(rows).astype(F32))
    return ctx


def lane(query: str, **kw) -> VectorQuery:
    return VectorQuery(provider_model="fake-table", passages_enabled=True, vector=table(query), **kw)


def test_fused_both_lanes_matches_the_worked_example() -> None:
    ctx = fruit()
    bm25_only = search_passages(ctx, "りんご", 5)
    got = search_passages(ctx, "りんご", 5, vector=lane("りんご"))
    assert got["plan"]["contexts"][0]["lanes"] == {
        "bm25": {"ran": True},
        "vector": {"ran": True, "floor": float(F32(0.35))},
    }
    [hit] = got["hits"]
    assert hit["score"] == float(F32(1) / F32(61) + F32(1) / F32(61)) and str(F32(hit["score"])) == "0.032786883"
    assert hit["lanes"] == {
        "bm25": {"rank": 1, "score": bm25_only["hits"][0]["score"]},
        "vector": {"rank": 1, "score": 1.0},
    }


def test_vector_only_and_the_floor() -> None:
    ctx = fruit()
    got = search_passages(ctx, "アップル", 5, vector=lane("アップル"))
    assert [(h["source"], str(F32(h["score"])), h["lanes"]) for h in got["hits"]] == [
        ("a.md", "0.016393442", {"vector": {"rank": 1, "score": float(F32(0.96))}}),
        ("b.md", "0.016129032", {"vector": {"rank": 2, "score": float(F32(0.96) * F32(0.28) + F32(0.28) * F32(0.96))}}),
    ]
    high = search_passages(ctx, "アップル", 5, vector=lane("アップル", floor=0.6))
    assert [h["source"] for h in high["hits"]] == ["a.md"]


def test_a_lane_that_ran_but_found_nothing_still_fuses() -> None:
    ctx = fruit()
    plain = search_passages(ctx, "果物", 5)
    got = search_passages(ctx, "果物", 5, vector=lane("果物"))
    assert [str(F32(h["score"])) for h in got["hits"]] == ["0.016393442", "0.016129032"]
    assert [h["lanes"] for h in got["hits"]] == [
        {"bm25": {"rank": i + 1, "score": h["score"]}} for i, h in enumerate(plain["hits"])
    ]


@pytest.mark.parametrize(
    ("vq", "reason"),
    [
        (VectorQuery(provider_model="m", passages_enabled=True, failure="boom"), "the query embedding failed: boom"),
        (
            VectorQuery(provider_model="fake-table", passages_enabled=False),
            "passage embedding is off (TAGURU_EMBED_PASSAGES)",
        ),
        (VectorQuery(), "no embedding provider is configured"),
        (
            VectorQuery(provider_model="other", passages_enabled=True, vector=table("x")),
            "stored vectors belong to model 'fake-table' but the provider is 'other' — they are never served, "
            "and the next refresh re-embeds",
        ),
        (
            VectorQuery(provider_model="fake-table", passages_enabled=True, vector=normalize([1, 0, 0, 0])),
            "stored vectors are 3-dimensional but the model now answers 4 (a dimensions setting changed behind its "
            "name) — they are never served, and the next refresh re-embeds",
        ),
    ],
)
def test_states_that_keep_raw_bm25(vq: VectorQuery, reason: str) -> None:
    ctx = fruit()
    plain = search_passages(ctx, "果物", 5)
    got = search_passages(ctx, "果物", 5, vector=vq)
    assert got["plan"]["contexts"][0]["lanes"]["vector"] == {"ran": False, "reason": reason}
    assert got["hits"] == plain["hits"]


def test_no_vectors_yet_and_the_skips() -> None:
    ctx = make_context("fruit", passages={"a.md": "りんごは赤い果物。"})
    got = search_passages(ctx, "果物", 5, vector=lane("果物"))
    assert got["plan"]["contexts"][0]["lanes"]["vector"] == {
        "ran": False,
        "reason": "no paragraph vectors exist yet — the embedding refresh has not covered this context",
    }
    zero = search_passages(fruit(), "果物", 0, vector=lane("果物"))
    assert zero["plan"]["contexts"][0]["lanes"]["vector"] == {"ran": False, "reason": "the requested limit is 0"}


def test_a_changed_paragraph_loses_its_vector_evidence() -> None:
    ctx = fruit()
    ctx.store_passage("a.md", "りんごは緑の果物。", [], [], [], [], 0, None)  # the vector was made from older text
    got = search_passages(ctx, "アップル", 5, vector=lane("アップル"))
    assert [h["source"] for h in got["hits"]] == ["b.md"]


@pytest.mark.parametrize("seed", range(5))
def test_the_fast_sweep_equals_a_plain_sequential_sweep(seed: int) -> None:
    rnd = np.random.default_rng(seed)
    n, width = 3000, 64
    matrix = np.vstack([normalize(rnd.normal(size=width)) for _ in range(n)]).astype(F32)
    matrix[10] = matrix[20]  # exact ties
    keys = [RowKey(f"s{random.Random(i).randrange(300):03d}", i % 7, i, None) for i in range(n)]
    store = PassageStore("m", width, keys, matrix)
    q = normalize(rnd.normal(size=width))
    for pool, floor in ((50, 0.0), (200, 0.1), (5000, -1.0)):
        got = sweep(store, q, pool, floor, None)
        plain = []
        for i in range(n):
            acc = F32(0)
            for j in range(width):
                acc = F32(acc + F32(matrix[i, j] * q[j]))
            if acc >= F32(floor):
                plain.append((-float(acc), keys[i].source, keys[i].paragraph, i))
        plain.sort()
        assert [(r.source, r.paragraph, r.score) for r in got] == [(s, p, -sc) for sc, s, p, _i in plain[:pool]]
    assert sequential_dot(matrix[:3], q).dtype == F32
