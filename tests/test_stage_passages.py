"""The passages stage: BM25 hits as passage candidates."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from stage_support import make_context, plain, request, run_stage, services

from taguru_server.stages.lanes import PASSAGE_HITS
from taguru_server.stages.model import CONTEXT, REQUEST, SERVICES
from taguru_server.stages.passages import Passages
from taguru_server.store.index.vectors import PassageStore, RowKey, fnv1a64, normalize
from taguru_server.store.read.vector_lane import VectorQuery

PASSAGES = {"a.md": "青嶺酒造は雲居県霧沢町の蔵元である。\n\n杜氏は高瀬である。", "b.md": "the brewery uses soft water"}


@pytest.mark.anyio
async def test_passage_candidates(snapshot) -> None:
    out = await run_stage(
        Passages(),
        {REQUEST: request(origins=("青嶺酒造",)), CONTEXT: make_context(passages=PASSAGES), SERVICES: services()},
    )
    hits = out.values[PASSAGE_HITS].value
    assert [h.candidate_id for h in hits] == ["passage\x00t\x00a.md\x000"]
    assert hits[0].lane == "passage_bm25"
    assert plain(out) == snapshot


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (request(origins=("x",), search_limit=0), "the requested limit is 0"),
        (request(origins=(), query="。、"), "the query yields no searchable terms"),
    ],
)
async def test_passages_skips(req, reason) -> None:
    out = await run_stage(Passages(), {REQUEST: req, CONTEXT: make_context(passages=PASSAGES), SERVICES: services()})
    assert out.values[PASSAGE_HITS].plan() == {"ran": False, "reason": reason}


@pytest.mark.anyio
async def test_the_vector_lane_names_each_candidate_by_its_evidence() -> None:
    ctx = make_context(passages={"a.md": "りんごは赤い果物。", "b.md": "みかんは橙色の果物。"})
    keys = [RowKey(s, 0, fnv1a64(ctx.passages[ctx.source_id[s]].paragraphs[0]), None) for s in ("a.md", "b.md")]
    ctx.vectors.passages = PassageStore("m", 3, keys, np.vstack([normalize([1, 0, 0]), normalize([0.6, 0.8, 0])]))
    asked: list[tuple[str, float | None]] = []

    async def vector_query(c, text, floor):  # type: ignore[no-untyped-def]
        asked.append((text, floor))
        return VectorQuery(provider_model="m", passages_enabled=True, vector=normalize([1, 0, 0]))

    svc = attrs.evolve(services(), vector_query=vector_query)
    out = await run_stage(Passages(), {REQUEST: request(origins=(), query="りんご"), CONTEXT: ctx, SERVICES: svc})
    hits = out.values[PASSAGE_HITS].value
    assert [(h.lane, h.rank, h.source) for h in hits] == [("passage_fused", 1, "a.md"), ("passage_vector", 2, "b.md")]
    assert out.values[PASSAGE_HITS].plan() == {"ran": True} and asked == [("りんご", None)]
