"""The graph-passages stage and its read lane: PageRank over the concept–paragraph graph, the mode's graph."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from stage_support import make_context, plain, request, run_stage, services

from taguru_server.stages.fuse import GRAPH_LANE_WEIGHTS, rrf_order
from taguru_server.stages.graph_passages import GraphPassages, graph_lane_limit
from taguru_server.stages.lanes import ANCHORS, GRAPH_PASSAGE_HITS
from taguru_server.stages.model import CONTEXT, REQUEST, SERVICES, Group, LaneResult
from taguru_server.stages.wiring import evidence_graph, graph_passages_graph
from taguru_server.store.read import passage_graph
from taguru_server.store.read.passage_graph import PassageGraph, asked_terms, graph_passages

PASSAGES = {
    "kura.md": "青嶺酒造は霧沢町の蔵元である。\n\n青嶺酒造の杜氏は高瀬である。",
    "toji.md": "高瀬は南部杜氏組合に所属する。",
    "shop.md": "取扱一覧：青嶺酒造、白鷺酒造、黒松酒造、月桂酒造。",
    "other.md": "白鷺酒造は川辺町の蔵元である。",
}
ASSOCIATIONS = [
    ("青嶺酒造", "所在地", "霧沢町", 1.0, "kura.md", 0),
    ("青嶺酒造", "杜氏", "高瀬", 1.0, "kura.md", 1),
    ("高瀬", "所属", "南部杜氏組合", 1.0, "toji.md", 0),
    ("酒店", "取扱", "青嶺酒造", 1.0, "shop.md", 0),
    ("酒店", "取扱", "白鷺酒造", 1.0, "shop.md", 0),
    ("酒店", "取扱", "黒松酒造", 1.0, "shop.md", 0),
    ("酒店", "取扱", "月桂酒造", 1.0, "shop.md", 0),
    ("白鷺酒造", "所在地", "川辺町", 1.0, "other.md", 0),
]


def context():
    return make_context(associations=ASSOCIATIONS, passages=PASSAGES)


@pytest.mark.anyio
async def test_graph_passage_candidates(snapshot) -> None:
    ctx = context()
    req = request(origins=("青嶺酒造",), query="青嶺酒造の杜氏の所属組合", max_items=8)
    inputs = {REQUEST: req, CONTEXT: ctx, SERVICES: services(), ANCHORS: LaneResult(("青嶺酒造",), True)}
    out = await run_stage(GraphPassages(), inputs)
    hits = out.values[GRAPH_PASSAGE_HITS].value
    assert out.status == "ran" and out.values[GRAPH_PASSAGE_HITS].plan() == {"ran": True}
    assert all(h.kind == "passage" and h.lane == "passage_graph" for h in hits)
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    # the same identity as the paragraph's search hit: the two merge in dedup
    assert hits[0].candidate_id.startswith("passage\x00t\x00")
    found = [(h.payload["source"], h.payload["paragraph"]) for h in hits]
    assert ("toji.md", 0) in found  # the second hop, which never names the brewery
    assert found.index(("kura.md", 1)) < found.index(("shop.md", 0))  # a listing weighs a quarter
    assert set(hits[0].payload) == {"source", "paragraph", "score", "text", "lanes"}
    assert list(hits[0].payload["lanes"]) == ["graph"]
    assert plain(out) == snapshot


@pytest.mark.anyio
async def test_the_graph_is_built_apart_once_per_read_version() -> None:
    """With a `build_apart` service the first walk of a read version builds the arrays through it (the server
    runs it in a thread while the context cannot change); the next walk reuses them, a write builds anew."""
    ctx = context()
    built: list[object] = []

    async def build_apart(work: object) -> None:
        assert callable(work)
        built.append(work())

    inputs = {
        REQUEST: request(origins=("青嶺酒造",), query="青嶺酒造の杜氏", max_items=8),
        CONTEXT: ctx,
        SERVICES: attrs.evolve(services(), build_apart=build_apart),
        ANCHORS: LaneResult(("青嶺酒造",), True),
    }
    first = await run_stage(GraphPassages(), inputs)
    again = await run_stage(GraphPassages(), inputs)
    assert len(built) == 1 and isinstance(built[0], PassageGraph)
    assert plain(first) == plain(again) and first.values[GRAPH_PASSAGE_HITS].value
    ctx.assert_association("青嶺酒造", "所在地", "新潟", 1.0, None, 0)
    await run_stage(GraphPassages(), inputs)
    assert len(built) == 2


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("anchors", "req", "reason", "text"),
    [
        ((), request(origins=("x",)), "no_anchors", "no anchors resolved from 'origins'"),
        (("青嶺酒造",), request(origins=("青嶺酒造",), max_items=0), "zero_limit", "max_items was 0"),
    ],
)
async def test_graph_passages_skips(anchors, req, reason, text) -> None:
    inputs = {REQUEST: req, CONTEXT: context(), SERVICES: services(), ANCHORS: LaneResult(anchors, True)}
    out = await run_stage(GraphPassages(), inputs)
    assert (out.status, out.reason) == ("skipped", reason)
    assert out.values[GRAPH_PASSAGE_HITS].plan() == {"ran": False, "reason": text}


def test_the_lane_limit_follows_the_budget() -> None:
    assert graph_lane_limit(request(origins=("x",), max_items=8)) == 8
    assert graph_lane_limit(request(origins=("x",), max_items=21)) == 21
    assert graph_lane_limit(request(origins=("x",), max_items=1000)) == 30


def exact_ppr(graph: PassageGraph, seeds: list[int]) -> np.ndarray:
    """The exact personalized PageRank by power iteration to convergence (the oracle)."""
    total = len(graph.degree)
    s = np.zeros(total)
    s[seeds] = 1.0 / len(seeds)
    p = s.copy()
    src = np.repeat(np.arange(total), np.diff(graph.ptr))
    for _ in range(200):
        flow = np.bincount(
            graph.nbr, weights=p[src] * graph.wt / np.maximum(graph.degree[src], 1e-300), minlength=total
        )
        p = 0.5 * s + 0.5 * flow
    return p


def test_the_push_agrees_with_the_exact_pagerank() -> None:
    ctx = context()
    graph = PassageGraph(ctx)
    seeds = [ctx.concept_id["青嶺酒造"]]
    pushed, exact = graph.mass(seeds), exact_ppr(graph, seeds)
    # forward push leaves at most TOLERANCE × degree of residual at each node
    bound = passage_graph.TOLERANCE * np.maximum(graph.degree, 1.0).sum()
    assert np.abs(pushed - exact).sum() <= bound
    assert pushed.sum() <= 1.0 + 1e-12
    order_pushed = np.argsort(-pushed[graph.n_concepts :], kind="stable")
    order_exact = np.argsort(-exact[graph.n_concepts :], kind="stable")
    assert order_pushed.tolist() == order_exact.tolist()


def test_the_lane_is_deterministic_and_cached_per_read_version() -> None:
    ctx = context()
    first = graph_passages(ctx, ("青嶺酒造",), 10, "青嶺酒造の杜氏")
    assert passage_graph.passage_graph(ctx) is passage_graph.passage_graph(ctx)
    for _ in range(3):
        assert graph_passages(ctx, ("青嶺酒造",), 10, "青嶺酒造の杜氏") == first
    again = make_context(associations=ASSOCIATIONS, passages=PASSAGES)
    assert graph_passages(again, ("青嶺酒造",), 10, "青嶺酒造の杜氏") == first
    built = passage_graph.passage_graph(ctx)
    ctx.store_passage("new.md", "南部杜氏組合は岩手にある。", [], [], [], [], 0, None)
    ctx.assert_association("南部杜氏組合", "所在", "岩手", 1.0, "new.md", 0)
    assert passage_graph.passage_graph(ctx) is not built
    assert ("new.md", 0) in [(h.source, h.paragraph) for h in graph_passages(ctx, ("高瀬",), 10)]


def test_ties_break_by_source_then_paragraph() -> None:
    ctx = make_context(
        associations=[("甲", "関係", "乙", 1.0, "b.md", 0), ("甲", "関係", "丙", 1.0, "a.md", 0)],
        passages={"a.md": "甲と丙。", "b.md": "甲と乙。"},
    )
    hits = graph_passages(ctx, ("甲",), 10)
    assert [(h.source, h.score) for h in hits] == [("a.md", hits[0].score), ("b.md", hits[0].score)]


def test_the_question_reorders_the_reach_but_names_do_not() -> None:
    asked = asked_terms("青嶺酒造の杜氏", ("青嶺酒造",))
    assert "杜氏" in asked and "青嶺" not in asked and "酒造" not in asked
    ctx = context()
    plain_order = [(h.source, h.paragraph) for h in graph_passages(ctx, ("青嶺酒造",), 10)]
    asked = [(h.source, h.paragraph) for h in graph_passages(ctx, ("青嶺酒造",), 10, "組合に所属", ("青嶺酒造",))]
    assert sorted(plain_order) == sorted(asked)
    assert asked.index(("toji.md", 0)) < plain_order.index(("toji.md", 0))
    # a question in words no paragraph holds keeps the walk's order
    assert [(h.source, h.paragraph) for h in graph_passages(ctx, ("青嶺酒造",), 10, "who is the toji")] == plain_order


def test_unattributed_and_dead_edges_leave_no_paragraph() -> None:
    ctx = make_context(
        associations=[("甲", "関係", "乙", 1.0, None, None), ("甲", "関係", "丙", 1.0, "a.md", 0)],
        passages={"a.md": "甲と丙。"},
    )
    ctx.retract_association("甲", "関係", "丙")
    assert graph_passages(ctx, ("甲",), 10) == ()


def test_the_mode_weights_the_graph_lanes_ranks() -> None:
    from stage_support import cand

    bm25 = cand("passage", "p1", "passage_bm25", 1)
    graph = cand("passage", "p2", "passage_graph", 3)
    groups = (Group(bm25, (("passage_bm25", 1),), ()), Group(graph, (("passage_graph", 3),), ()))
    assert [f.candidate.canonical_key for f in rrf_order(groups)] == ["p1", "p2"]
    assert [f.candidate.canonical_key for f in rrf_order(groups, GRAPH_LANE_WEIGHTS)] == ["p2", "p1"]


def test_the_mode_graph(snapshot) -> None:
    assert graph_passages_graph().describe() == snapshot
    assert "graph_passages" not in evidence_graph().describe()


def test_the_same_hits_under_any_hash_seed() -> None:
    """No set or dict order of strings reaches an order or a sum: two processes with different hash seeds agree."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from stage_support import make_context\n"
        "from test_stage_graph_passages import ASSOCIATIONS, PASSAGES\n"
        "from taguru_server.store.read.passage_graph import graph_passages\n"
        "ctx = make_context(associations=ASSOCIATIONS, passages=PASSAGES)\n"
        "print(repr(graph_passages(ctx, ('青嶺酒造',), 10, '青嶺酒造の杜氏の所属組合は南部か', ('青嶺酒造',))))\n"
    )
    root = Path(__file__).resolve().parent.parent
    outs = []
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, check=True
        )
        outs.append(done.stdout)
    assert outs[0] and outs[0] == outs[1] == outs[2]
