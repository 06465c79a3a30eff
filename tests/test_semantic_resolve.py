"""The semantic tier of resolve (spec embeddings §8): when it runs, its candidates, and the merged ladder."""

from __future__ import annotations

import numpy as np
from stage_support import make_context

from taguru_server.server.wire.render.lanes import ladder_out, resolve
from taguru_server.store.index.vectors import GlossStore, GlossTable, fnv1a64, normalize
from taguru_server.store.model.context import CONCEPT, LABEL
from taguru_server.store.read.gloss import concept_gloss
from taguru_server.store.read.semantic import candidates, lexical, wants_vector

TABLE = [("りんご", [1, 0, 0]), ("アップル", [0.96, 0.28, 0]), ("みかん", [0.28, 0.96, 0])]


def table(text: str) -> np.ndarray:
    for prefix, vec in TABLE:
        if text.startswith(prefix):
            return normalize(vec)
    return normalize([0, 0, 1])


def fruit():
    ctx = make_context(
        "fruit", associations=[("りんご", "色", "赤", 1.0, None, None), ("みかん", "色", "橙", 1.0, None, None)]
    )
    concepts, labels = GlossTable(), GlossTable()
    for cid, name in enumerate(ctx.concepts):
        g = concept_gloss(ctx, cid)
        concepts.hashes[name], concepts.rows[name] = fnv1a64(g), table(g)
    for name in ctx.labels:
        labels.rows[name] = table(name)
    ctx.vectors.glosses = GlossStore("fake-table", 3, concepts, labels)
    return ctx


def run(ctx, cue: str, floor: float = 0.35, limit: int = 100, model: str | None = "fake-table"):
    found = lexical(ctx, CONCEPT, cue, 0.3)
    sem = candidates(ctx, CONCEPT, table(cue), floor) if wants_vector(ctx, CONCEPT, found, model) else []
    return ladder_out(ctx, CONCEPT, found, sem, limit)


def test_the_worked_example() -> None:
    ctx = fruit()
    assert run(ctx, "アップル") == [
        {"name": "りんご", "score": 0.9599999785423279, "tier": "semantic", "gloss": "りんご。色は赤。"},
        {"name": "みかん", "score": 0.5375999808311462, "tier": "semantic", "gloss": "みかん。色は橙。"},
    ]
    assert [c["name"] for c in run(ctx, "アップル", floor=0.6)] == ["りんご"]
    confident = run(ctx, "りんご")
    assert confident == resolve(ctx, CONCEPT, "りんご", 0.3, 100) and confident[0]["tier"] == "lexical"


def test_no_vector_call_without_a_provider_a_table_or_under_another_model() -> None:
    ctx = fruit()
    found = lexical(ctx, CONCEPT, "アップル", 0.3)
    assert wants_vector(ctx, CONCEPT, found, "fake-table")
    assert not wants_vector(ctx, CONCEPT, found, None)
    assert not wants_vector(ctx, CONCEPT, found, "another-model")
    assert wants_vector(ctx, LABEL, lexical(ctx, LABEL, "xyz", 0.3), "fake-table")  # the label table exists
    assert not wants_vector(ctx, CONCEPT, lexical(ctx, CONCEPT, "りんご", 0.3), "fake-table")  # confident
    assert candidates(ctx, CONCEPT, normalize([1, 0, 0, 0]), 0.35) == []  # another width: nothing


def test_overflow_leaves_from_the_lexical_tail_first() -> None:
    ctx = fruit()
    found = lexical(ctx, CONCEPT, "赤", 0.3)  # exact hit on 赤 (confident, but the ladder is exercised directly)
    out = ladder_out(ctx, CONCEPT, found, [("りんご", 0.9), ("みかん", 0.8)], 2)
    assert [(c["name"], c["tier"]) for c in out] == [("りんご", "semantic"), ("みかん", "semantic")]
    out = ladder_out(ctx, CONCEPT, found, [("赤", 0.9), ("みかん", 0.8)], 2)
    assert [(c["name"], c["tier"]) for c in out] == [("赤", "lexical"), ("みかん", "semantic")]
