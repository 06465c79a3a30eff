"""The graph walks (explore, paths, unreachable_from): the array versions against the contract's
pseudo-code (tests/walks_plain.py) on seeded random graphs, and the contract's illustrative cases."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
import walks_plain

from taguru_server.server.wire.render import walks as walk_wire
from taguru_server.store.model.context import CONCEPT, Context, Meta
from taguru_server.store.read import walks

WEIGHTS = [1.0, 1.0, 1.0, 0.5, 2.0, -1.0, 0.3, 3.0, 1e-3, 7.5, -0.25, 0.0]


def _bits(value: Any) -> Any:
    """Floats compared by their bits."""
    if isinstance(value, dict):
        return {k: _bits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bits(v) for v in value]
    if isinstance(value, float):
        return struct.pack("<d", value)
    return value


def _random_graph(rng: random.Random, n: int, assertions: int) -> Context:
    """Self-loops, parallel edges (several labels on one pair), dead edges, aliases, islands."""
    ctx = Context(1, "g", Meta())
    names = [f"c{i}" for i in range(n)]
    labels = ["l0", "l1", "l2"]
    for _ in range(assertions):
        s = rng.choice(names[: max(1, n // 2)]) if rng.random() < 0.3 else rng.choice(names)
        o = s if rng.random() < 0.05 else rng.choice(names)
        lab = rng.choice(labels)
        src = f"src{rng.randrange(4)}" if rng.random() < 0.7 else None
        ctx.assert_association(s, lab, o, rng.choice(WEIGHTS), src, None)
        if rng.random() < 0.3:
            ctx.assert_association(s, rng.choice(labels), o, rng.choice(WEIGHTS), src, None)  # parallel
        if rng.random() < 0.06:
            ctx.retract_association(s, lab, o)  # dead edge
        if rng.random() < 0.01:
            ctx.retract_source(f"src{rng.randrange(4)}")
    for i in range(3):
        c = f"c{rng.randrange(n)}"
        if ctx.find_concept(c) is not None and ctx.find_concept(f"alias{i}") is None:
            ctx.add_alias(CONCEPT, f"alias{i}", c)
    return ctx


def _origins(rng: random.Random, n: int) -> list[str]:
    names = [f"c{rng.randrange(n + 2)}" for _ in range(rng.choice([0, 1, 1, 1, 2, 3]))]
    if rng.random() < 0.3:
        names.append(f"alias{rng.randrange(3)}")
    if names and rng.random() < 0.2:
        names.append(names[0])  # a duplicate
    rng.shuffle(names)
    return names


def _cursor(rng: random.Random, listing: list[dict[str, Any]], first_key: str) -> dict[str, Any]:
    """A cursor from a real match (sometimes with a shifted first key), or made-up names."""
    if listing and rng.random() < 0.7:
        m = rng.choice(listing)
        a = m.get("association", m)
        first = m["distance"] if first_key == "distance" else a["weight"]
        if rng.random() < 0.2:
            first = first + 1 if first_key == "distance" else first * 2
        return {first_key: first, "subject": a["subject"], "label": a["label"], "object": a["object"]}
    first = rng.randrange(5) if first_key == "distance" else rng.choice(WEIGHTS)
    subject = rng.choice([f"c{rng.randrange(9)}", "c3x", "", "zzz"])
    return {first_key: first, "subject": subject, "label": rng.choice(["l1", "l", "m"]), "object": "c3"}


@pytest.mark.parametrize("seed", range(60))
def test_explore_matches_the_contract_walk(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    ctx = _random_graph(rng, n, rng.randint(0, 3 * n))
    for _ in range(6):
        origins = _origins(rng, n)
        depth = rng.choice([0, 1, 2, 3, 10, 10])
        full = walks_plain.plain_explore(ctx, origins, depth, 1000, None)
        assert _bits(walk_wire.explore(ctx, origins, depth, 1000, None)) == _bits(full)
        limit = rng.choice([0, 1, 3, 100])
        after = _cursor(rng, full["matches"], "distance") if rng.random() < 0.6 else None
        ours = walk_wire.explore(ctx, origins, depth, limit, after)
        assert _bits(ours) == _bits(walks_plain.plain_explore(ctx, origins, depth, limit, after)), (origins, after)


@pytest.mark.parametrize("seed", range(60))
def test_paths_match_the_contract_walk(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 25)
    ctx = _random_graph(rng, n, rng.randint(0, 3 * n))
    for _ in range(6):
        origins, targets = _origins(rng, n), _origins(rng, n)
        depth = rng.choice([0, 1, 2, 4, 10])
        limit = rng.choice([0, 1, 10, 100])
        budget = rng.choice([0, 1, 2, 7, 50, 400, walks.PATHS_BUDGET])
        ours = walk_wire.paths(ctx, origins, targets, depth, limit, budget)
        theirs = walks_plain.plain_paths(ctx, origins, targets, depth, limit, budget)
        assert _bits(ours) == _bits(theirs), (origins, targets, depth, limit, budget)


@pytest.mark.parametrize("seed", range(60))
def test_unreachable_from_matches_the_contract_walk(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    ctx = _random_graph(rng, n, rng.randint(0, 3 * n))
    for _ in range(6):
        origins = _origins(rng, n)
        full = walks_plain.plain_unreachable_from(ctx, origins, 1000, None, lambda: None)
        assert _bits(walk_wire.unreachable_from(ctx, origins, 1000, None, lambda: None)) == _bits(full)
        limit = rng.choice([0, 1, 3, 100])
        after = _cursor(rng, full["matches"], "weight") if rng.random() < 0.6 else None
        ours = walk_wire.unreachable_from(ctx, origins, limit, after, lambda: None)
        theirs = walks_plain.plain_unreachable_from(ctx, origins, limit, after, lambda: None)
        assert _bits(ours) == _bits(theirs), (origins, after)


def test_pages_chain_to_the_full_listing() -> None:
    """Following each page's last match as the cursor visits every match once, in order."""
    rng = random.Random(5)
    ctx = _random_graph(rng, 30, 90)
    full = walk_wire.explore(ctx, ["c0", "c1"], 10, 1000, None)
    seen, after = [], None
    while True:
        page = walk_wire.explore(ctx, ["c0", "c1"], 10, 7, after)
        assert page["total"] == full["total"]
        if not page["matches"]:
            break
        seen += page["matches"]
        last = page["matches"][-1]
        a = last["association"]
        after = {"distance": last["distance"], "subject": a["subject"], "label": a["label"], "object": a["object"]}
    assert seen == full["matches"]
    orphans = walk_wire.unreachable_from(ctx, [], 1000, None, lambda: None)
    seen, after = [], None
    while True:
        page = walk_wire.unreachable_from(ctx, [], 4, after, lambda: None)
        if not page["matches"]:
            break
        seen += page["matches"]
        a = page["matches"][-1]
        after = {k: a[k] for k in ("weight", "subject", "label", "object")}
    assert seen == orphans["matches"]


# ----- the contract's illustrative cases (graph-reads.md §2.7, §3.5, §4.4), on both versions ------

BOTH = [
    pytest.param((walk_wire.explore, walk_wire.paths, walk_wire.unreachable_from), id="arrays"),
    pytest.param(
        (walks_plain.plain_explore, walks_plain.plain_paths, walks_plain.plain_unreachable_from), id="contract"
    ),
]


def _graph(*triples: tuple[str, str, str] | tuple[str, str, str, float]) -> Context:
    ctx = Context(1, "g", Meta())
    for t in triples:
        s, lab, o = t[:3]
        ctx.assert_association(s, lab, o, float(t[3]) if len(t) > 3 else 1.0, None, None)  # type: ignore[misc]
    return ctx


def _objects(result: dict[str, Any]) -> list[str]:
    return [m["association"]["object"] for m in result["matches"]]


@pytest.mark.parametrize("impl", BOTH)
def test_explore_alphabetical_ties_and_cursor(impl: Any) -> None:
    explore = impl[0]
    ctx = _graph(("hub", "l", "d"), ("hub", "l", "b"), ("hub", "l", "a"), ("hub", "l", "c"))
    first = explore(ctx, ["hub"], 10, 2, None)
    assert first["total"] == 4 and _objects(first) == ["a", "b"]
    after = {"distance": 1, "subject": "hub", "label": "l", "object": "b"}
    second = explore(ctx, ["hub"], 10, 2, after)
    assert second["total"] == 4 and _objects(second) == ["c", "d"]
    last = explore(ctx, ["hub"], 10, 2, {"distance": 1, "subject": "hub", "label": "l", "object": "d"})
    assert last == {"total": 4, "matches": []}


@pytest.mark.parametrize("impl", BOTH)
def test_explore_two_origins(impl: Any) -> None:
    explore = impl[0]
    ctx = _graph(("a", "r1", "b"), ("b", "r2", "c"), ("c", "r3", "d"), ("d", "r4", "e"))
    got = explore(ctx, ["a", "e"], 2, 100, None)
    assert [(m["distance"], m["path"], m["association"]["label"]) for m in got["matches"]] == [
        (1, ["a"], "r1"),
        (1, ["e"], "r4"),
        (2, ["a", "b"], "r2"),
        (2, ["e", "d"], "r3"),
    ]


@pytest.mark.parametrize("impl", BOTH)
def test_explore_depth_ceiling(impl: Any) -> None:
    explore = impl[0]
    ctx = _graph(*[(f"c{i}", "next", f"c{i + 1}") for i in range(15)])
    got = explore(ctx, ["c0"], walks.MAX_DEPTH, 100, None)
    assert got["total"] == 10 and got["matches"][-1]["distance"] == 10
    assert got["matches"][-1]["path"] == [f"c{i}" for i in range(10)]
    assert explore(ctx, ["c0"], 0, 100, None) == {"total": 0, "matches": []}


@pytest.mark.parametrize("impl", BOTH)
def test_paths_distance_before_strength(impl: Any) -> None:
    paths = impl[1]
    ctx = _graph(
        ("起点", "弱い関係", "目標", 0.5), ("起点", "強い関係", "中継", 5.0), ("中継", "強い関係", "目標", 5.0)
    )
    got = paths(ctx, ["起点"], ["目標"], 10, 10)
    assert [(m["distance"], m["strength"]) for m in got["matches"]] == [(1, 0.5), (2, 5.0)]
    assert got["matches"][1]["path"] == ["起点", "中継", "目標"] and not got["capped"]


@pytest.mark.parametrize("impl", BOTH)
def test_paths_weakest_link_is_the_raw_sum(impl: Any) -> None:
    paths = impl[1]
    ctx = _graph(("起点", "r", "裏取り"), ("起点", "r", "裏取り"), ("起点", "r", "単発", 1.5))
    ctx.assert_association("裏取り", "r", "目標", 5.0, None, None)
    ctx.assert_association("単発", "r", "目標", 5.0, None, None)
    got = paths(ctx, ["起点"], ["目標"], 10, 10)
    assert [(m["path"][1], m["strength"]) for m in got["matches"]] == [("裏取り", 2.0), ("単発", 1.5)]
    assert got["matches"][0]["associations"][0]["weight"] == 1.0


@pytest.mark.parametrize("impl", BOTH)
def test_paths_ids_not_names_break_ties(impl: Any) -> None:
    paths = impl[1]
    ctx = _graph(("o", "r", "z"), ("o", "r", "b"), ("z", "r", "t"), ("b", "r", "t"))
    got = paths(ctx, ["o"], ["t"], 10, 10)
    assert [m["path"] for m in got["matches"]] == [["o", "z", "t"], ["o", "b", "t"]]


@pytest.mark.parametrize("impl", BOTH)
def test_paths_cycle(impl: Any) -> None:
    paths = impl[1]
    ctx = _graph(("a", "r", "b"), ("b", "r", "c"), ("c", "r", "a"), ("c", "r", "t"))
    got = paths(ctx, ["a"], ["t"], 10, 10)
    assert [m["path"] for m in got["matches"]] == [["a", "c", "t"], ["a", "b", "c", "t"]]
    assert got["capped"] is False and got["total"] == 2


@pytest.mark.parametrize("impl", BOTH)
def test_paths_budget_on_a_12_clique(impl: Any) -> None:
    paths = impl[1]
    ctx = _graph(*[(f"n{i}", "r", f"n{j}") for i in range(12) for j in range(i + 1, 12)])
    got = paths(ctx, ["n0"], ["n11"], 10, 5)
    assert got["capped"] is True and got["total"] == 3196
    assert [m["path"] for m in got["matches"][:2]] == [
        ["n0", "n1", "n2", "n3", "n4", "n11"],
        ["n0", "n1", "n2", "n3", "n5", "n11"],
    ]
    assert got["matches"][0]["distance"] == 5 and len(got["matches"]) == 5
    assert paths(ctx, ["n0"], ["n11"], 10, 0) == {"total": 0, "capped": False, "matches": []}


@pytest.mark.parametrize("impl", BOTH)
def test_paths_edges_and_self_loops(impl: Any) -> None:
    """Origin = target never yields a zero-length trail; a self-loop costs two budget entries."""
    paths = impl[1]
    ctx = _graph(("a", "r", "a"), ("a", "r", "b"), ("a", "s", "b"))
    got = paths(ctx, ["a", "b"], ["a", "b"], 10, 10)
    assert [m["path"] for m in got["matches"]] == [["a", "b"], ["a", "b"], ["b", "a"], ["b", "a"]]
    # a's adjacency: [a r a (out), a r b, a s b, a r a (in)]: a budget of 3 draws reaches both trails
    # from a, and the 4th draw (the self-loop's second entry) caps the walk
    capped = paths(ctx, ["a"], ["b"], 1, 10, 3)
    assert capped["total"] == 2 and capped["capped"] is True
    assert paths(ctx, ["a"], ["b"], 1, 10, 4)["capped"] is False


@pytest.mark.parametrize("impl", BOTH)
def test_unreachable_from_islands(impl: Any) -> None:
    unreachable = impl[2]
    ctx = _graph(("青嶺酒造", "代表銘柄", "青嶺"), ("x1", "r", "y1"), ("x2", "r", "y2"), ("x3", "r", "y3"))
    got = unreachable(ctx, ["青嶺酒造"], 2, None, lambda: None)
    assert got["total"] == 3 and len(got["matches"]) == 2
    assert unreachable(ctx, [], 100, None, lambda: None)["total"] == 4
    ctx.retract_association("x1", "r", "y1")
    assert unreachable(ctx, ["nobody"], 100, None, lambda: None)["total"] == 3


def test_the_deadline_is_checked_during_the_scan() -> None:
    ctx = _graph(*[(f"c{i}", "r", f"c{i + 1}") for i in range(5)])

    class Late(Exception):
        pass

    for impl in (walk_wire.unreachable_from, walks_plain.plain_unreachable_from):
        calls: list[int] = []

        def check(calls: list[int] = calls) -> None:
            calls.append(1)
            if len(calls) > 1:
                raise Late

        with pytest.raises(Late):
            impl(ctx, ["c0"], 10, None, check)


def test_the_arrays_follow_every_write() -> None:
    """The per-version arrays are rebuilt after asserting, retracting and retracting a source."""
    ctx = _graph(("a", "r", "b"))
    assert walk_wire.explore(ctx, ["a"], 10, 10, None)["total"] == 1
    ctx.assert_association("b", "r", "c", 1.0, "s.md", None)
    assert walk_wire.explore(ctx, ["a"], 10, 10, None)["total"] == 2
    assert walk_wire.paths(ctx, ["a"], ["c"], 10, 10)["total"] == 1
    ctx.retract_association("a", "r", "b")
    assert walk_wire.explore(ctx, ["a"], 10, 10, None)["total"] == 0
    assert walk_wire.unreachable_from(ctx, ["a"], 10, None, lambda: None)["total"] == 1
    ctx.retract_source("s.md")
    assert walk_wire.unreachable_from(ctx, [], 10, None, lambda: None)["total"] == 0
    ctx.assert_association("z", "r", "a", 2.0, None, None)  # a new concept sorts after the others
    got = walk_wire.unreachable_from(ctx, [], 10, None, lambda: None)
    assert [m["subject"] for m in got["matches"]] == ["z"]


@pytest.mark.parametrize("impl", BOTH)
def test_a_small_neighbourhood_in_a_large_graph(impl: Any) -> None:
    """Walks that touch few entries (edge ids gathered per level) and ones that touch most (read
    off the hop array) give the same kind of answer."""
    explore = impl[0]
    chain = [(f"c{i}", "next", f"c{i + 1}") for i in range(200)]
    ctx = _graph(*chain, ("x", "r", "y"), ("y", "r", "x"))
    assert explore(ctx, ["x"], 10, 10, None)["total"] == 2
    assert [m["path"] for m in explore(ctx, ["x"], 10, 10, None)["matches"]] == [["x"], ["x"]]
    far = explore(ctx, ["c100"], 10, 100, None)
    assert far["total"] == 20 and far["matches"][0]["path"] == ["c100"]
    assert walk_wire.explore(ctx, ["c100", "x"], 3, 100, None) == walks_plain.plain_explore(
        ctx, ["c100", "x"], 3, 100, None
    )
