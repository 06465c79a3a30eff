"""The audit sweeps against plain transcriptions of the contract on seeded random contexts, and promote
against export: what a promotion lands equals what the scratch exports for those sources."""

from __future__ import annotations

import asyncio
import collections
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import Client
from pg_support import database_url_for

from taguru_server.server.wire.render import audits as audit_wire
from taguru_server.server.wire.render.consolidation import consolidation_out
from taguru_server.stages.render import association_out
from taguru_server.store.derive import audits, consolidation, twins
from taguru_server.store.index.vectors import GlossStore, GlossTable, dot_f32
from taguru_server.store.index.vectors import normalize as unit
from taguru_server.store.model.context import CONCEPT, LABEL, AliasRefused, Context, Meta
from taguru_server.store.persist.backend import open_store
from taguru_server.store.persist.registry import Registry
from taguru_server.store.text import normalize
from taguru_server.store.transfer import promote as moves

ALPHABET = "abcdeアイウｱｲ青嶺酒造蔵AB"


def plain_twins(spellings: list[tuple[str, int]], dice_floor: float) -> list[tuple[int, int, float]]:
    """The contract's sketch (groups-audits §4.1.1), transcribed as written."""
    bis = [set(zip(s, s[1:], strict=False)) for s, _ in spellings]
    postings = collections.defaultdict(list)
    for i, bs in enumerate(bis):
        for b in bs:
            postings[b].append(i)
    stop = max(len(spellings) // 20, 64)
    informative = [sum(1 for b in bs if len(postings[b]) <= stop) for bs in bis]
    shared: collections.Counter[tuple[int, int]] = collections.Counter()
    for plist in postings.values():
        if len(plist) > stop:
            continue
        for x in range(len(plist)):
            for y in range(x + 1, len(plist)):
                shared[(plist[x], plist[y])] += 1
    best: dict[tuple[int, int], float] = {}
    for (i, j), n in shared.items():
        ti, tj = spellings[i][1], spellings[j][1]
        if ti == tj:
            continue
        dice = 2.0 * n / (informative[i] + informative[j])
        if dice < dice_floor:
            continue
        key = (min(ti, tj), max(ti, tj))
        best[key] = max(best.get(key, 0.0), dice)
    return sorted(((a, b, d) for (a, b), d in best.items()), key=lambda t: (-t[2], t[0], t[1]))


def spellings_of(ctx: Context, kind: int) -> list[tuple[str, int]]:
    names = ctx.concepts if kind == CONCEPT else ctx.labels
    out = [(normalize(n), i) for i, n in enumerate(names)]
    out += [(normalize(a), t) for a, t in ctx.aliases[kind].items()]
    return out


def random_context(rnd: random.Random, n_names: int, alphabet: str = ALPHABET) -> Context:
    ctx = Context(1, "r", Meta())

    def word() -> str:
        return "".join(rnd.choices(alphabet, k=rnd.randrange(1, 7)))

    for _ in range(n_names):
        ctx.assert_association(
            word(), word()[:3], word(), rnd.choice([1.0, -1.0, 2.0]), rnd.choice([None, "s1", "s2"]), None
        )
    for _ in range(n_names // 4):
        kind = rnd.choice([CONCEPT, LABEL])
        names = ctx.concepts if kind == CONCEPT else ctx.labels
        alias = word() + "x"
        try:
            ctx.add_alias(kind, alias, rnd.choice(names))
        except AliasRefused:
            continue
        if rnd.random() < 0.2:
            ctx.remove_alias(kind, alias)
    return ctx


@pytest.mark.parametrize("seed", range(12))
def test_lexical_twins_equal_the_plain_sweep(seed: int) -> None:
    rnd = random.Random(seed)
    # small alphabets make common bigrams stop-grams; seed 11 passes S/20 > 64
    ctx = random_context(rnd, 1500 if seed == 11 else rnd.choice([5, 40, 400]), ALPHABET[: rnd.choice([4, 8, 18])])
    for kind in (CONCEPT, LABEL):
        spellings = spellings_of(ctx, kind)
        for floor in (0.0, 0.3, 0.6, 1.0):
            got = twins.lexical_twins(ctx.lexicons[kind], floor)
            assert got == plain_twins(spellings, floor), (seed, kind, floor)
    # the wire answer names the lower (earlier-interned) id first
    found = audit_wire.vocabulary(ctx, twins.sweep(ctx, (CONCEPT, LABEL), 0.5, 0.6, None, vectors=False))
    want = [
        {"a": ctx.concepts[a], "b": ctx.concepts[b], "score": d}
        for a, b, d in plain_twins(spellings_of(ctx, CONCEPT), 0.5)
    ]
    assert found["lexical_concepts"] == want
    assert found["semantic_note"] == twins.NO_VECTORS_NOTE


def test_the_sweep_stops_at_the_deadline() -> None:
    ctx = random_context(random.Random(3), 2000)
    with pytest.raises(audits.Expired):
        twins.lexical_twins(ctx.lexicons[CONCEPT], 0.6, deadline=0.0)


def plain_semantic(ctx: Context, kind: int, floor: float) -> list[tuple[str, str, float]]:
    assert ctx.vectors.glosses is not None
    table = ctx.vectors.glosses.concepts if kind == CONCEPT else ctx.vectors.glosses.labels
    names = sorted(table.rows)
    pairs = []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            score = dot_f32(table.rows[names[i]], table.rows[names[j]])
            if np.float32(score) >= np.float32(floor):
                pairs.append((names[i], names[j], score))
    pairs.sort(key=lambda t: (-t[2], t[0], t[1]))
    return [p for p in pairs[:100] if not twins._related(ctx, kind, p[0], p[1])]


@pytest.mark.parametrize("seed", range(6))
def test_semantic_twins_equal_the_plain_sweep(seed: int) -> None:
    rnd = random.Random(seed)
    ctx = random_context(rnd, rnd.choice([10, 60]))
    basis = [unit([rnd.random() for _ in range(4)]) for _ in range(3)]

    def table(names: list[str]) -> GlossTable:
        out = GlossTable()
        for n in names:
            v = basis[rnd.randrange(3)] + np.float32(0.05) * unit([rnd.random() for _ in range(4)])
            out.rows[n] = unit(v)
        return out

    ctx.vectors.glosses = GlossStore("m", 4, table(ctx.concepts), table(ctx.labels))
    boundary = plain_semantic(ctx, CONCEPT, 0.0)
    edges = [boundary[k][2] for k in (0, len(boundary) // 2, len(boundary) - 1)] if boundary else []
    for kind in (CONCEPT, LABEL):
        for floor in (0.6, 0.95, *edges):  # floors equal to a pair's own score keep that pair
            found = twins.sweep(ctx, (kind,), 0.6, floor, None, vectors=True)
            assert found.note is None
            got = audit_wire.semantic_out(ctx, kind, found)
            assert [(p["a"], p["b"], float(p["score"])) for p in got] == plain_semantic(ctx, kind, floor)
    found = audit_wire.vocabulary(ctx, twins.sweep(ctx, (CONCEPT, LABEL), 0.6, 0.6, None, vectors=True))
    assert found["semantic_note"] is None
    merge = consolidation_out(consolidation.consolidation(ctx, {"merge"}, vectors=True))["merge"]
    assert "semantic_note" not in merge
    tiers = [(c["a"], c["b"]) for c in merge["candidates"] if c["tier"] == "semantic"]
    lexical = {frozenset((c["a"], c["b"])) for c in merge["candidates"] if c["tier"] == "lexical"}
    assert not any(frozenset(p) in lexical for p in tiers)


def test_a_namespace_over_the_semantic_ceiling_is_skipped_with_its_note() -> None:
    ctx = random_context(random.Random(1), 10)
    big = GlossTable(rows={f"n{i}": unit([1.0, float(i)]) for i in range(twins.SEMANTIC_MAX_NAMES + 1)})
    ctx.vectors.glosses = GlossStore("m", 2, big, GlossTable())
    found = audit_wire.vocabulary(ctx, twins.sweep(ctx, (CONCEPT, LABEL), 0.6, 0.6, None, vectors=True))
    assert found["semantic_concepts"] == [] and found["semantic_note"] == twins.TOO_MANY_NAMES_NOTE


# ----- consolidation sections against plain transcriptions ------------------------------------


def plain_staleness(ctx: Context, floor_secs: int) -> list[tuple[str, str, str, int, int]]:
    times = {sid: (p.date if p.date is not None else p.stored_at) for sid, p in ctx.passages.items()}
    live = [e for e in range(len(ctx.edges.subject)) if ctx.edges.count[e] > 0]
    latest = {}
    for e in live:
        dated = [times[r[0]] for r in ctx.edges.attributions[e] if times.get(r[0]) is not None]
        if dated:
            latest[e] = max(dated)
    out = []
    for e, when in latest.items():
        top = max(latest[f] for f in latest if ctx.edges.subject[f] == ctx.edges.subject[e])
        if top - when > 0 and top - when >= floor_secs:
            out.append(
                (
                    ctx.concepts[ctx.edges.subject[e]],
                    ctx.labels[ctx.edges.label[e]],
                    ctx.concepts[ctx.edges.object[e]],
                    when,
                    top,
                )
            )
    out.sort(key=lambda t: (-(t[4] - t[3]), t[0], t[1], t[2]))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_consolidation_sections_equal_plain_transcriptions(seed: int) -> None:
    rnd = random.Random(seed)
    ctx = random_context(rnd, 80, "abcde")
    for src in ("s1", "s2"):
        ctx.store_passage(src, "text", [], [], [], [], rnd.randrange(100), rnd.choice([None, rnd.randrange(100)]))
    found = consolidation_out(
        consolidation.consolidation(ctx, set(consolidation.CHECKS), limit=1000, evidence_cap=1000)
    )
    cut = consolidation_out(consolidation.consolidation(ctx, set(consolidation.CHECKS), limit=3, evidence_cap=1000))
    for section in consolidation.CHECKS:  # a limit renders a prefix of the full order; totals stay exact
        assert cut[section]["candidates"] == found[section]["candidates"][:3]
        assert cut[section]["total"] == found[section]["total"]
    stale = [
        (c["subject"], c["label"], c["object"], c["latest"], c["neighborhood_latest"])
        for c in found["staleness"]["candidates"]
    ]
    assert stale == plain_staleness(ctx, 0)
    # contradiction: every (subject, label) with two or more live objects, then every sign-contested edge
    groups = collections.Counter(
        (ctx.edges.subject[e], ctx.edges.label[e]) for e in range(len(ctx.edges.subject)) if ctx.edges.count[e] > 0
    )
    objects = [c for c in found["contradiction"]["candidates"] if c["kind"] == "objects"]
    assert len(objects) == sum(1 for n in groups.values() if n >= 2)
    for c in objects:
        lab = ctx.label_id[c["label"]]
        subjects = [s for (s, lb) in groups if lb == lab]
        assert c["functional_tendency"] == sum(1 for s in subjects if groups[(s, lab)] == 1) / len(subjects)
    # merge: each candidate's evidence is the plain set algebra over live neighbours (by name)
    for c in found["merge"]["candidates"]:

        def facts(name: str) -> set[tuple[str, str, str]]:
            out = set()
            for e in range(len(ctx.edges.subject)):
                if ctx.edges.count[e] <= 0:
                    continue
                s, lab, o = (
                    ctx.concepts[ctx.edges.subject[e]],
                    ctx.labels[ctx.edges.label[e]],
                    ctx.concepts[ctx.edges.object[e]],
                )
                if s == name:
                    out.add(("out", lab, o))
                if o == name:
                    out.add(("in", lab, s))
            return out

        a, b = facts(c["a"]), facts(c["b"])
        assert {(f["direction"], f["label"], f["other"]) for f in c["shared"]} == a & b
        assert c["only_a_total"] == len(a - b) and c["only_b_total"] == len(b - a)


# ----- promote: export of the promoted sources, and followers -----------------------------------


def _export_lines(text: str) -> list[str]:
    """The association and passage lines of an export (headers, their create blocks and aliases aside)."""
    return sorted(line for line in text.splitlines() if line and '"taguru_batch"' not in line and '"alias"' not in line)


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(3))
async def test_promoting_every_source_reproduces_the_scratch_export(client: Client, seed: int) -> None:
    rnd = random.Random(seed)
    await client.ok("PUT", "/contexts/scratch", content_type=None)
    await client.ok("PUT", "/contexts/dest", content_type=None)
    sources = [f"doc-{i}" for i in range(rnd.randrange(2, 6))]
    words = ["蔵", "杜氏", "高瀬", "青嶺", "酒", "米", "水"]
    rows = [
        {
            "label": rnd.choice(["r", "s", "t"]),
            "object": rnd.choice(words),
            "source": rnd.choice(sources),
            "subject": rnd.choice(words),
            "weight": rnd.choice([1.0, 0.5, -2.0, 3.25]),
            **({"paragraph": rnd.randrange(2)} if rnd.random() < 0.3 else {}),
        }
        for _ in range(40)
    ]
    await client.ok("POST", "/contexts/scratch/associations", rows)
    await client.ok(
        "POST",
        "/contexts/scratch/sources",
        {
            "passages": {s: "一段落目。\n\n二段落目。" for s in sources[::2]},
            "dates": {s: 1000 + i for i, s in enumerate(sources[::2])},
            "tags": {sources[0]: ["x", "y"]},
            "sections": {sources[0]: [{"paragraph": 1, "section": "第二"}]},
        },
    )
    await client.ok("POST", "/contexts/scratch/aliases", {"concepts": {"くら": "蔵"}})
    result = (await client.ok("POST", "/contexts/scratch/promote", {"into": "dest", "sources": sources}))["result"]
    assert [b["source"] for b in result["batches"]] == sorted(sources)
    for name in ("scratch", "dest"):
        status, _b, _h = await client.call("GET", f"/contexts/{name}/export", content_type=None)
        assert status == 200
    scratch = await _export_text(client, "scratch")
    dest = await _export_text(client, "dest")
    assert _export_lines(dest) == _export_lines(scratch)
    # and a re-promotion changes nothing
    await client.ok("POST", "/contexts/scratch/promote", {"into": "dest", "sources": sources, "audit": False})
    assert _export_lines(await _export_text(client, "dest")) == _export_lines(scratch)


async def _export_text(client: Client, name: str) -> str:
    async with client.session.get(f"{client.base}/contexts/{name}/export") as resp:
        assert resp.status == 200
        return (await resp.read()).decode("utf-8")


def test_a_promotion_reaches_another_worker(tmp_path: Path) -> None:
    """Two registries over one store (as two worker processes): the promoting one commits, the other
    catches up and holds exactly what a fresh load of the destination holds."""
    data = tmp_path / "data"
    url = database_url_for(data)
    a = Registry(open_store(str(data), url), shared=True)
    b = Registry(open_store(str(data), url), shared=True)

    async def scenario() -> None:
        async with a.write_section(deadline=float("inf")):
            scratch = a.create("scratch", Meta())
            dest = a.create("dest", Meta())
            scratch.assert_many([("蔵", "杜氏", "高瀬", 1.0, None), ("蔵", "杜氏", "高瀬", 2.0, None)], "s1")
            scratch.assert_many([("蔵", "銘柄", "青嶺", 1.0, None)], "s2")
            scratch.store_passage("s1", "本文。", [], [], [], ["t"], 5, 7)
            scratch.add_alias(CONCEPT, "たかせ", "高瀬")
            a.commit([scratch, dest])
        b.catch_up()
        assert b.get("dest") is not None and not b.get("dest").edges.subject  # type: ignore[union-attr]
        async with a.write_section(deadline=float("inf")):
            src = a.get("scratch")
            assert src is not None
            batches, dropped = moves.render(src, "dest", ["s1"])
            assert dropped == 0
            outcomes = moves.apply(a, "dest", batches, dry_run=False, deadline=None, commit=lambda c: a.commit([c]))
            assert outcomes[0].counts.associations == 2
        b.catch_up()
        got = b.get("dest")
        fresh = Registry(open_store(str(data), url)).get("dest")
        assert got is not None and fresh is not None
        for ctx in (got, fresh):
            assert [association_out(ctx, e) for e in range(len(ctx.edges.subject))] == [
                association_out(a.get("dest"), e)  # type: ignore[arg-type]
                for e in range(len(ctx.edges.subject))
            ]
            assert ctx.aliases[CONCEPT] == {"たかせ": ctx.concept_id["高瀬"]}
            assert ctx.passages[ctx.source_id["s1"]].date == 7
        assert [ctx.name for ctx in (got,)] == ["dest"]

    asyncio.run(scenario())
    a.close()
    b.close()
