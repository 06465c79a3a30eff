"""Community detection (`louvain-cc/1`, substrate §10.1): hand graphs, fingerprints, and a spec transcription."""

from __future__ import annotations

import random
import struct
import time
from typing import Any

import pytest
from conftest import Client

from taguru_server.server.communities import analysis as analysis_module
from taguru_server.server.communities import louvain as lv
from taguru_server.store.model.context import Context, Meta

# ----- a straightforward transcription of §10.1, the oracle for the optimized module -----------


def _fnv(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return h


def _named(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def spec_analysis(ctx: Context) -> dict[str, Any]:
    live = [e for e in range(len(ctx.edges.subject)) if ctx.edges.count[e] > 0]
    pairs: dict[tuple[int, int], float] = {}
    for e in live:
        s, o = ctx.edges.subject[e], ctx.edges.object[e]
        if s != o and abs(ctx.edges.weight[e]) > 0:
            key = (min(s, o), max(s, o))
            pairs[key] = pairs.get(key, 0.0) + abs(ctx.edges.weight[e])
    nodes = sorted({c for p in pairs for c in p})
    if not nodes:
        return {"algorithm": "louvain-cc/1", "concept_count": 0, "edge_count": 0, "levels": 0, "communities": []}
    idx = {c: i for i, c in enumerate(nodes)}
    adj: list[dict[int, float]] = [{} for _ in nodes]
    for (a, b), w in pairs.items():
        adj[idx[a]][idx[b]] = w
        adj[idx[b]][idx[a]] = w
    self_w = [0.0] * len(nodes)

    def level(adj: list[dict[int, float]], self_w: list[float]) -> list[int]:
        n = len(adj)
        m = 0.0
        for i in range(n):
            m += self_w[i]
            for j in sorted(adj[i]):
                if j > i:
                    m += adj[i][j]
        if m == 0:
            return list(range(n))
        k = []
        for i in range(n):
            t = 2 * self_w[i]
            for j in sorted(adj[i]):
                t += adj[i][j]
            k.append(t)
        comm, tot = list(range(n)), list(k)
        moved = True
        while moved:
            moved = False
            for i in range(n):
                own = comm[i]
                link = {own: 0.0}
                for j in sorted(adj[i]):
                    link[comm[j]] = link.get(comm[j], 0.0) + adj[i][j]
                tot[own] -= k[i]
                best, best_gain = own, link[own] - k[i] * tot[own] / (2 * m)
                for c in sorted(link):
                    if c != own and link[c] - k[i] * tot[c] / (2 * m) > best_gain:
                        best, best_gain = c, link[c] - k[i] * tot[c] / (2 * m)
                comm[i] = best
                tot[best] += k[i]
                moved |= best != own
        first: dict[int, int] = {}
        comm = [first.setdefault(c, len(first)) for c in comm]
        comp = [-1] * n
        nxt = 0
        for start in range(n):
            if comp[start] < 0:
                comp[start], stack = nxt, [start]
                while stack:
                    u = stack.pop()
                    for v in adj[u]:
                        if comp[v] < 0 and comm[v] == comm[u]:
                            comp[v] = nxt
                            stack.append(v)
                nxt += 1
        return comp

    levels: list[list[int]] = []
    while len(levels) < 8:
        assign = level(adj, self_w)
        count = max(assign) + 1
        if count == len(adj):
            break
        new_self = [0.0] * count
        new_adj: list[dict[int, float]] = [{} for _ in range(count)]
        for i in range(len(adj)):
            new_self[assign[i]] += self_w[i]
            for j in sorted(adj[i]):
                if j <= i:
                    continue
                a, b = assign[i], assign[j]
                if a == b:
                    new_self[a] += adj[i][j]
                else:
                    new_adj[a][b] = new_adj[a].get(b, 0.0) + adj[i][j]
                    new_adj[b][a] = new_adj[a][b]
        adj, self_w = new_adj, new_self
        levels.append(assign)
        if count == 1:
            break
    if not levels:
        levels.append(list(range(len(nodes))))

    leaf = {nodes[i]: c for i, c in enumerate(levels[0])}
    out: list[dict[str, Any]] = []
    digests: list[int] = []
    for cid in range(max(levels[0]) + 1):
        members = [c for c in nodes if leaf[c] == cid]
        induced = [e for e in live if leaf.get(ctx.edges.subject[e]) == cid and leaf.get(ctx.edges.object[e]) == cid]
        strength = {c: 0.0 for c in members}
        for e in induced:
            strength[ctx.edges.subject[e]] += abs(ctx.edges.weight[e])
            if ctx.edges.object[e] != ctx.edges.subject[e]:
                strength[ctx.edges.object[e]] += abs(ctx.edges.weight[e])
        name = ctx.concepts.__getitem__
        data = b"".join(_named(n) for n in sorted(map(name, members)))
        for e in sorted(
            induced,
            key=lambda e: (name(ctx.edges.subject[e]), ctx.labels[ctx.edges.label[e]], name(ctx.edges.object[e])),
        ):
            total = ctx.edges.weight[e] if ctx.edges.weight[e] != 0 else 0.0
            data += (
                _named(name(ctx.edges.subject[e]))
                + _named(ctx.labels[ctx.edges.label[e]])
                + _named(name(ctx.edges.object[e]))
            )
            data += struct.pack("<d", total) + struct.pack("<Q", ctx.edges.count[e])
        digests.append(_fnv(data))
        c: dict[str, Any] = {"id": f"L0-{cid}", "level": 0}
        if len(levels) > 1:
            c["parent"] = f"L1-{levels[1][cid]}"
        c["fingerprint"] = f"{digests[-1]:016x}"
        c["concept_count"] = len(members)
        c["members"] = [
            {"name": name(m), "strength": strength[m]} for m in sorted(members, key=lambda m: (-strength[m], name(m)))
        ]
        top = sorted(
            (e for e in induced if abs(ctx.edges.weight[e]) > 0), key=lambda e: (-abs(ctx.edges.weight[e]), e)
        )[:24]
        if top:
            c["top_associations"] = [
                {
                    "subject": name(ctx.edges.subject[e]),
                    "label": ctx.labels[ctx.edges.label[e]],
                    "object": name(ctx.edges.object[e]),
                    "weight": ctx.edges.weight[e] / ctx.edges.count[e],
                    "count": ctx.edges.count[e],
                }
                for e in top
            ]
        out.append(c)
    below = list(levels[0])
    for lvl in range(1, len(levels)):
        above = [levels[lvl][c] for c in below]
        new_digests = []
        for cid in range(max(levels[lvl]) + 1):
            kids = [k for k in range(len(levels[lvl])) if levels[lvl][k] == cid]
            ds = sorted(digests[k] for k in kids)
            new_digests.append(_fnv(struct.pack("<Q", len(ds)) + b"".join(struct.pack("<Q", d) for d in ds)))
            c = {"id": f"L{lvl}-{cid}", "level": lvl}
            if lvl + 1 < len(levels):
                c["parent"] = f"L{lvl + 1}-{levels[lvl + 1][cid]}"
            c["fingerprint"] = f"{new_digests[-1]:016x}"
            c["concept_count"] = sum(1 for a in above if a == cid)
            c["children"] = [f"L{lvl - 1}-{k}" for k in kids]
            out.append(c)
        digests, below = new_digests, above
    return {
        "algorithm": "louvain-cc/1",
        "concept_count": len(nodes),
        "edge_count": len(pairs),
        "levels": len(levels),
        "communities": out,
    }


# ----- helpers ------------------------------------------------------------------------


def context(edges: list[tuple[str, str, str, float]]) -> Context:
    ctx = Context(1, "t", Meta())
    for s, lab, o, w in edges:
        ctx.assert_association(s, lab, o, w, None, None)
    return ctx


def analyze(ctx: Context) -> dict[str, Any]:
    return analysis_module.analyze(lv.GraphSnapshot.of(ctx))


def clique(names: list[str], weight: float = 1.0, label: str = "近い") -> list[tuple[str, str, str, float]]:
    return [(a, label, b, weight) for i, a in enumerate(names) for b in names[i + 1 :]]


def leaves(analysis: dict[str, Any]) -> list[list[str]]:
    return sorted(sorted(m["name"] for m in c["members"]) for c in analysis["communities"] if c["level"] == 0)


def random_context(seed: int) -> Context:
    rng = random.Random(seed)
    n = rng.randrange(2, 30)
    ctx = Context(1, "r", Meta())
    for _ in range(rng.randrange(1, 90)):
        a = rng.randrange(n)
        b = rng.randrange(n) if rng.random() < 0.3 else (a // 5) * 5 + rng.randrange(5)
        ctx.assert_association(
            f"c{a}", rng.choice(["r", "s", "関係"]), f"c{b}", rng.choice([1.0, 2.0, 0.5, -1.0, 3.0, 0.25]), None, None
        )
    for _ in range(rng.randrange(0, 4)):  # dead and netted edges
        e = rng.randrange(len(ctx.edges.subject))
        s, lab, o = (
            ctx.concepts[ctx.edges.subject[e]],
            ctx.labels[ctx.edges.label[e]],
            ctx.concepts[ctx.edges.object[e]],
        )
        if rng.random() < 0.5:
            ctx.retract_association(s, lab, o)
        else:
            ctx.assert_association(s, lab, o, -ctx.edges.weight[e], None, None)
    return ctx


# ----- the oracle ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(60))
def test_matches_the_spec_transcription(seed: int) -> None:
    ctx = random_context(seed)
    assert analyze(ctx) == spec_analysis(ctx)


def test_fast_paths_match_the_transcribed_ones() -> None:
    for seed in range(40):
        snap = lv.GraphSnapshot.of(random_context(seed))
        nodes, g = lv.leaf_graph(snap)
        nodes2, g2 = lv._leaf_graph_python(snap)
        assert (nodes, g.neighbors, g.weights) == (nodes2, g2.neighbors, g2.weights)
        if not nodes:
            continue
        m = lv._total_weight(g)
        k = [lv._strength(g, i) for i in range(len(g))]
        assert lv._move_nodes(g, m, k, lv._no_check) == lv._move_nodes_reference(g, m, k, lv._no_check)
        assignment, count = lv.one_level(g)
        fast, slow = lv.aggregate(g, assignment, count), lv._aggregate_python(g, assignment, count)
        assert (fast.neighbors, fast.weights, fast.self_weight) == (slow.neighbors, slow.weights, slow.self_weight)


# ----- hand graphs --------------------------------------------------------------------


def test_empty_graph() -> None:
    empty = {"algorithm": "louvain-cc/1", "concept_count": 0, "edge_count": 0, "levels": 0, "communities": []}
    assert analyze(Context(1, "e", Meta())) == empty
    # self-loops, dead edges and netted edges never make nodes
    ctx = context([("a", "r", "a", 1.0), ("a", "r", "b", 1.0), ("c", "r", "d", 2.0), ("c", "r", "d", -2.0)])
    ctx.retract_association("a", "r", "b")
    assert analyze(ctx) == empty


def test_one_pair_matches_the_illustration() -> None:
    out = analyze(context([("a1", "近い", "a2", 2.0)]))
    digest = _fnv(
        _named("a1")
        + _named("a2")
        + _named("a1")
        + _named("近い")
        + _named("a2")
        + struct.pack("<d", 2.0)
        + struct.pack("<Q", 1)
    )
    assert out == {
        "algorithm": "louvain-cc/1",
        "concept_count": 2,
        "edge_count": 1,
        "levels": 1,
        "communities": [
            {
                "id": "L0-0",
                "level": 0,
                "fingerprint": f"{digest:016x}",
                "concept_count": 2,
                "members": [{"name": "a1", "strength": 2.0}, {"name": "a2", "strength": 2.0}],
                "top_associations": [{"subject": "a1", "label": "近い", "object": "a2", "weight": 2.0, "count": 1}],
            }
        ],
    }


def test_two_cliques_with_a_weak_bridge() -> None:
    edges = clique(["a1", "a2", "a3", "a4"], 2.0) + clique(["b1", "b2", "b3", "b4"], 2.0)
    edges.append(("a1", "橋", "b1", 0.1))
    out = analyze(context(edges))
    assert leaves(out) == [["a1", "a2", "a3", "a4"], ["b1", "b2", "b3", "b4"]]
    # merging the two would lower modularity: one level, no parent
    assert out["levels"] == 1 and all("parent" not in c for c in out["communities"])
    # the bridge is no leaf's induced edge, so it is in neither leaf's associations
    assert all(a["label"] != "橋" for c in out["communities"] for a in c["top_associations"])


def test_parallel_labels_and_directions_collapse_into_one_pair() -> None:
    out = analyze(context([("a", "r", "b", 1.0), ("b", "s", "a", -2.0), ("a", "r", "a", 5.0)]))
    assert (out["edge_count"], out["concept_count"]) == (1, 2)
    (leaf,) = out["communities"]
    # strength counts the self-loop once and both directions; the self-loop is an induced edge
    assert leaf["members"] == [{"name": "a", "strength": 8.0}, {"name": "b", "strength": 3.0}]
    assert [a["weight"] for a in leaf["top_associations"]] == [5.0, -2.0, 1.0]


def test_disconnected_components_stay_apart_without_a_parent() -> None:
    out = analyze(context([("a", "r", "b", 1.0), ("c", "r", "d", 1.0), ("e", "r", "f", 3.0)]))
    assert out["levels"] == 1
    assert [c["id"] for c in out["communities"]] == ["L0-0", "L0-1", "L0-2"]
    assert all("parent" not in c for c in out["communities"])
    assert leaves(out) == [["a", "b"], ["c", "d"], ["e", "f"]]


def test_equal_gains_go_to_the_lowest_community_id() -> None:
    # x is tied between two identical triangles; concept ids put the "a" triangle first
    edges = clique(["a1", "a2", "a3"]) + clique(["b1", "b2", "b3"]) + [("x", "r", "a1", 1.0), ("x", "r", "b1", 1.0)]
    out = analyze(context(edges))
    assert ["a1", "a2", "a3", "x"] in leaves(out)
    # with the b triangle interned first, x follows it instead
    edges = clique(["b1", "b2", "b3"]) + clique(["a1", "a2", "a3"]) + [("x", "r", "a1", 1.0), ("x", "r", "b1", 1.0)]
    assert ["b1", "b2", "b3", "x"] in leaves(analyze(context(edges)))


def pair_graph(n: int, pairs: list[tuple[int, int, float]]) -> lv.WorkGraph:
    """The leaf graph of concepts 0..n-1 joined by `(a, b, w)` pairs, every concept on some pair."""
    snap = lv.GraphSnapshot(
        [str(i) for i in range(n)],
        ["r"],
        [a for a, _b, _w in pairs],
        [0] * len(pairs),
        [b for _a, b, _w in pairs],
        [w for _a, _b, w in pairs],
        [1] * len(pairs),
    )
    nodes, g = lv.leaf_graph(snap)
    assert nodes == list(range(n))
    return g


def test_staying_wins_a_tie_with_a_move() -> None:
    # node 1 of the path 0-1-2 gains 0.5 by staying and 0.5 by moving: it stays (strict ">")
    g = pair_graph(3, [(0, 1, 1.0), (1, 2, 1.0)])
    k = [lv._strength(g, i) for i in range(3)]
    assert lv._move_nodes(g, lv._total_weight(g), k, lv._no_check) == [1, 1, 1]


def test_component_split_renumbers_by_first_member() -> None:
    g = pair_graph(5, [(0, 2, 1.0), (1, 3, 1.0), (3, 4, 1.0)])
    assignment = [0, 0, 0, 1, 1]  # {0,1,2} is not connected: 1 has no edge to 0 or 2
    assert lv._split_components(g, assignment) == 3
    assert assignment == [0, 1, 0, 2, 2]


def test_nothing_to_merge_records_the_identity() -> None:
    g = lv.WorkGraph([[], [], []], [[], [], []], [0.0, 0.0, 0.0])
    assert lv.one_level(g) == ([0, 1, 2], 3)
    assert lv.detect_levels(g) == [[0, 1, 2]]


def test_multi_level_aggregation() -> None:
    # a ring of 30 cliques: nodes settle into cliques, then neighbouring cliques pair up
    groups = [[f"g{i:02}n{j}" for j in range(4)] for i in range(30)]
    edges = [e for names in groups for e in clique(names)]
    edges += [(groups[i][0], "link", groups[(i + 1) % 30][1], 1.0) for i in range(30)]
    ctx = context(edges)
    out = analyze(ctx)
    assert out == spec_analysis(ctx)
    assert out["levels"] == 2
    assert [sum(1 for c in out["communities"] if c["level"] == lvl) for lvl in (0, 1)] == [30, 15]
    assert leaves(out) == sorted(sorted(g) for g in groups)
    by_id = {c["id"]: c for c in out["communities"]}
    for c in out["communities"]:
        if c["level"] == 0:
            assert c["parent"].startswith("L1-")
        else:
            kids = [by_id[k] for k in c["children"]]
            assert len(kids) == 2 and all(k["parent"] == c["id"] for k in kids)
            assert c["children"] == sorted(c["children"], key=lambda k: int(k.split("-")[1]))
            assert c["concept_count"] == 8 == sum(k["concept_count"] for k in kids)
            assert c["fingerprint"] == analysis_module.hex16(
                analysis_module.parent_fingerprint([int(k["fingerprint"], 16) for k in kids])
            )


def test_top_associations_keep_24_strongest_by_magnitude_then_edge_id() -> None:
    edges = [("hub", "r", f"s{i:02}", 1.0 if i % 3 else -2.0) for i in range(30)]
    (leaf,) = analyze(context(edges))["communities"]
    top = leaf["top_associations"]
    assert len(top) == 24
    # the ten -2.0 edges first, then the +1.0 ones in edge id order
    assert [a["object"] for a in top] == [f"s{i:02}" for i in range(0, 30, 3)] + [
        f"s{i:02}" for i in range(30) if i % 3
    ][:14]


# ----- fingerprints -------------------------------------------------------------------


def test_fnv1a_known_vectors() -> None:
    assert analysis_module.hex16(analysis_module.fnv1a(b"")) == "cbf29ce484222325"
    assert analysis_module.hex16(analysis_module.fnv1a(b"a")) == "af63dc4c8601ec8c"
    assert analysis_module.hex16(analysis_module.fnv1a(b"foobar")) == "85944171f73967e8"


def test_fnv1a_many_matches_one_at_a_time() -> None:
    rng = random.Random(5)
    streams = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 64, 3000]))) for _ in range(80)]
    assert analysis_module.fnv1a_many(streams) == [analysis_module.fnv1a(s) for s in streams]
    assert analysis_module.fnv1a_many([]) == []
    assert analysis_module.fnv1a_many([b"", b""]) == [analysis_module.FNV_OFFSET, analysis_module.FNV_OFFSET]


def test_leaf_fingerprint_layout() -> None:
    # one leaf {a, b} (concept ids put b first): sorted member names, then the induced edges
    # sorted by names, each with its sum and count
    def snapshot(zero: float) -> lv.GraphSnapshot:
        return lv.GraphSnapshot(["b", "a"], ["r"], [0, 1], [0, 0], [1, 0], [zero, 1.5], [1, 2])

    expected = _fnv(
        _named("a")
        + _named("b")
        + _named("a")
        + _named("r")
        + _named("b")
        + struct.pack("<d", 1.5)
        + struct.pack("<Q", 2)
        + _named("b")
        + _named("r")
        + _named("a")
        + struct.pack("<d", 0.0)
        + struct.pack("<Q", 1)
    )

    def leaf_fingerprints(snap: lv.GraphSnapshot) -> list[str]:
        return [c["fingerprint"] for c in analysis_module.analyze(snap)["communities"] if c["level"] == 0]

    assert leaf_fingerprints(snapshot(-0.0)) == [analysis_module.hex16(expected)]
    # -0.0 folds like 0.0
    assert leaf_fingerprints(snapshot(0.0)) == [analysis_module.hex16(expected)]


def test_parent_fingerprint_ignores_child_order() -> None:
    a, b = 0x0123456789ABCDEF, 0xFEDCBA9876543210
    expected = _fnv(struct.pack("<Q", 2) + struct.pack("<Q", a) + struct.pack("<Q", b))
    assert analysis_module.parent_fingerprint([b, a]) == analysis_module.parent_fingerprint([a, b]) == expected


def test_a_changed_edge_moves_only_its_leaf_and_ancestors() -> None:
    edges = clique(["a1", "a2", "a3"]) + clique(["b1", "b2", "b3"]) + clique(["c1", "c2", "c3"])
    edges += [("a1", "r", "b1", 0.1), ("b2", "r", "c1", 0.1)]
    before = {c["id"]: c["fingerprint"] for c in analyze(context(edges))["communities"]}
    after_ctx = context(edges + [("a2", "近い", "a3", 0.5)])
    after = {c["id"]: c for c in analyze(after_ctx)["communities"]}
    changed = {cid for cid, fp in before.items() if after[cid]["fingerprint"] != fp}
    a_leaf = next(c for c in after.values() if c["level"] == 0 and any(m["name"] == "a2" for m in c["members"]))
    ancestors = set()
    cur = a_leaf
    while "parent" in cur:
        ancestors.add(cur["parent"])
        cur = after[cur["parent"]]
    assert changed == {a_leaf["id"]} | ancestors


def test_same_graph_same_analysis() -> None:
    ctx = random_context(7)
    assert analyze(ctx) == analyze(ctx)


def test_a_spent_deadline_abandons_the_analysis() -> None:
    with pytest.raises(lv.DeadlineExceeded):
        analysis_module.analyze(lv.GraphSnapshot.of(random_context(3)), deadline=time.monotonic() - 1)


# ----- GET /contexts/{name}/communities -----------------------------------------------


async def fetch(client: Client, path: str) -> tuple[int, str, str]:
    async with client.session.get(client.base + path) as resp:
        return resp.status, (await resp.read()).decode(), resp.headers.get("Content-Type", "")


@pytest.mark.anyio
async def test_analysis_stream(client: Client) -> None:
    await client.ok("PUT", "/contexts/corpus-d", content_type=None)
    await client.ok(
        "POST", "/contexts/corpus-d/associations", [{"label": "近い", "object": "a2", "subject": "a1", "weight": 2.0}]
    )
    status, body, content_type = await fetch(client, "/contexts/corpus-d/communities")
    assert status == 200
    assert content_type == "application/x-ndjson; charset=utf-8"
    lines = body.split("\n")
    assert lines[0] == (
        '{"taguru_communities":1,"context":"corpus-d","algorithm":"louvain-cc/1",'
        '"revision":{"graph":1,"passages":0,"config":0},"concept_count":2,"edge_count":1,'
        '"levels":1,"communities":1}'
    )
    fingerprint = analyze(context([("a1", "近い", "a2", 2.0)]))["communities"][0]["fingerprint"]
    assert lines[1] == (
        '{"id":"L0-0","level":0,"fingerprint":"' + fingerprint + '","concept_count":2,'
        '"members":[{"name":"a1","strength":2.0},{"name":"a2","strength":2.0}],'
        '"top_associations":[{"subject":"a1","label":"近い","object":"a2","weight":2.0,"count":1}]}'
    )
    assert lines[2:] == [""]


@pytest.mark.anyio
async def test_analysis_stream_errors_use_the_envelope(client: Client) -> None:
    status, body, headers = await client.call("GET", "/contexts/nope/communities")
    assert status == 404 and body["code"] == "no_context" and body["error"] == "context 'nope' not found"
    await client.ok("PUT", "/contexts/empty", content_type=None)
    status, text, _ct = await fetch(client, "/contexts/empty/communities")
    assert status == 200
    assert text.strip().split("\n") == [
        '{"taguru_communities":1,"context":"empty","algorithm":"louvain-cc/1",'
        '"revision":{"graph":0,"passages":0,"config":0},"concept_count":0,'
        '"edge_count":0,"levels":0,"communities":0}'
    ]


@pytest.mark.anyio
async def test_heavy_operation_ceiling_and_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from stage_support import make_context, memory_registry

    from taguru_server.server.call import Call
    from taguru_server.server.config import Settings
    from taguru_server.server.errors import status_of
    from taguru_server.server.routes.communities import stream_communities
    from taguru_server.server.state import HEAVY_OPS_KEY, AppState, Running
    from taguru_server.store.errors import ApiError

    registry = memory_registry()
    make_context("g", associations=[("a", "r", "b", 1.0, None, None)], registry=registry)

    def call(state: dict[Any, Any], deadline: float) -> Call:
        return Call(
            method="GET",
            path="/contexts/g/communities",
            name="g",
            query={},
            headers={},
            body=b"",
            registry=registry,
            settings=Settings(),
            principal=None,
            deadline=deadline,  # type: ignore[arg-type]
            app_state=AppState(state),
        )

    monkeypatch.setenv("TAGURU_MAX_CONCURRENT_HEAVY_OPS", "1")
    with pytest.raises(ApiError) as err:
        await stream_communities(call({HEAVY_OPS_KEY: Running(1)}, time.monotonic() + 30))
    assert (status_of(err.value), err.value.headers) == (503, {"Retry-After": "1"})
    assert err.value.message == (
        "server is at its heavy-operation ceiling (1 concurrent calls) — retry shortly "
        "(TAGURU_MAX_CONCURRENT_HEAVY_OPS tunes this)"
    )
    state: dict[Any, Any] = {HEAVY_OPS_KEY: Running()}
    with pytest.raises(ApiError) as err:
        await stream_communities(call(state, time.monotonic() - 1))
    assert (status_of(err.value), err.value.message) == (
        408,
        "request exceeded its budget; narrow the query (TAGURU_REQUEST_TIMEOUT_SECS tunes this)",
    )
    assert state[HEAVY_OPS_KEY].count == 0
    reply = await stream_communities(call(state, time.monotonic() + 30))
    assert reply.status == 200 and state[HEAVY_OPS_KEY].count == 0
