"""The passages stage: BM25 hits as passage candidates."""

from __future__ import annotations

import pytest
from stage_support import make_context, plain, request, run_stage

from taguru_server.stages.lanes import PASSAGE_HITS
from taguru_server.stages.model import CONTEXT, REQUEST
from taguru_server.stages.passages import Passages

PASSAGES = {"a.md": "青嶺酒造は雲居県霧沢町の蔵元である。\n\n杜氏は高瀬である。", "b.md": "the brewery uses soft water"}


@pytest.mark.anyio
async def test_passage_candidates(snapshot) -> None:
    out = await run_stage(
        Passages(), {REQUEST: request(origins=("青嶺酒造",)), CONTEXT: make_context(passages=PASSAGES)}
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
    out = await run_stage(Passages(), {REQUEST: req, CONTEXT: make_context(passages=PASSAGES)})
    assert out.values[PASSAGE_HITS].plan() == {"ran": False, "reason": reason}
