"""The cite stage: found locators only, unknown ones skipped silently."""

from __future__ import annotations

import pytest
from stage_support import make_context, plain, run_stage

from taguru_server.stages.candidates import association_candidate
from taguru_server.stages.cite import Cite
from taguru_server.stages.lanes import ACTIVATE_HITS, CITATIONS, QUERY_HITS
from taguru_server.stages.model import CONTEXT, LaneResult


@pytest.mark.anyio
async def test_cite_resolves_found_locators(snapshot) -> None:
    ctx = make_context(
        passages={"s1.md": "猫は哺乳類である。\n\n二段落目。"},
        locators={"s1.md": [(0, "page", "1")]},
        associations=[
            ("猫", "is_a", "哺乳類", 1.0, "s1.md", 0),
            ("猫", "is_a", "爬虫類", 1.0, "ghost.md", 0),
            ("猫", "has", "尾", 1.0, "s1.md", 1),
        ],
    )
    pool = tuple(association_candidate(ctx, e, "graph_activate", e + 1) for e in range(3))
    out = await run_stage(
        Cite(), {CONTEXT: ctx, QUERY_HITS: LaneResult((), False, "x"), ACTIVATE_HITS: LaneResult(pool, True)}
    )
    found = out.values[CITATIONS].value
    assert sorted(found) == [("s1.md", 0), ("s1.md", 1)]
    assert out.values[CITATIONS].plan() == {"ran": True}
    assert plain(out) == snapshot


def _plain_resolve(ctx, pool):
    """The transcription: every locator of every candidate in order, found ones once."""
    from taguru_server.store.read import citations

    found = {}
    for cand in pool:
        for loc in cand.locators:
            if loc not in found:
                hit = citations.find_citation(ctx, *loc)
                if not isinstance(hit, str):
                    found[loc] = hit
    return found


@pytest.mark.parametrize("seed", range(20))
def test_kept_resolutions_match_the_plain_walk(seed: int) -> None:
    """Each candidate's kept resolution merges to the plain walk's result, order included, across
    requests that share candidates, with missing sources and paragraphs, and after a write."""
    import random

    from stage_support import fused

    from taguru_server.stages.budget import refs_floor
    from taguru_server.stages.cite import resolve_citations
    from taguru_server.stages.model import Unit

    rng = random.Random(seed)
    sources = {f"s{i}.md": "\n\n".join(f"p{i}-{j}" for j in range(rng.randint(1, 4))) for i in range(5)}
    assocs = [
        (f"a{rng.randrange(4)}", "r", f"b{k}", 1.0, rng.choice([*sources, "ghost.md"]), rng.randrange(6))
        for k in range(30)
    ]
    ctx = make_context(passages=sources, associations=assocs)
    n = len(ctx.edges.subject)
    for step in range(6):
        edges = rng.sample(range(n), rng.randint(1, n))
        pool = tuple(association_candidate(ctx, e, "graph_activate", i + 1) for i, e in enumerate(edges))
        got = resolve_citations(ctx, pool)
        assert list(got.items()) == list(_plain_resolve(ctx, pool).items())
        # the budget's refs floor from the kept counts equals the floor walked over a plain copy
        units = [Unit((fused(c),)) for c in pool]
        units.append(Unit(tuple(fused(c) for c in pool[:3])))
        for unit in units:
            assert refs_floor(unit, got) == refs_floor(unit, dict(got))
        if step == 3:
            ctx.assert_association("a0", "r", "b0", 1.0, "s0.md", 0)  # a new attribution: a new read version
