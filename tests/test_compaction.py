"""Compaction (graph-reads.md §5.2) on random contexts: the result equals a context filled from scratch with the
live content (ids included), a restart loads the same, followers reload it, and a refused commit changes nothing."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import attrs
import pytest
from pg_support import database_url_for
from test_store_sync import observable, random_writes

from taguru_server.server.wire.render.contexts import stats_out
from taguru_server.store.derive.maintenance import MID_SCAN_TIMEOUT, dead_edges, rebuild
from taguru_server.store.errors import ApiError, StorageFailed
from taguru_server.store.model.context import CONCEPT, LABEL, AliasRefused, Context, Meta, _saturate
from taguru_server.store.persist.backend import open_store
from taguru_server.store.persist.registry import CommitFailed, Registry


def store_of(data: Path) -> Any:
    return open_store(str(data), database_url_for(data))


def fresh(data: Path, name: str) -> Context:
    store = store_of(data)
    try:
        ctx = Registry(store).get(name)
        assert ctx is not None
        return ctx
    finally:
        store.close()


def replayed(old: Context) -> Context:
    """What a context filled from scratch with `old`'s live content looks like, built through the write API:
    each live edge in edge-id order (its records in chain order, then its unsourced share), then the passages,
    then the aliases whose canonical survived. Sums follow §5.2 (f): weight × count."""
    new = Context(old.cid, old.name, Meta())
    for e in range(len(old.edges.subject)):
        count = old.edges.count[e]
        if count == 0:
            continue
        s, lab, o = (
            old.concepts[old.edges.subject[e]],
            old.labels[old.edges.label[e]],
            old.concepts[old.edges.object[e]],
        )
        sourced = 0
        for sid, rsum, rcount, paragraph in old.edges.attributions[e]:
            new.assert_many([(s, lab, o, rsum, paragraph)] + [(s, lab, o, 0.0, None)] * (rcount - 1), old.sources[sid])
            sourced += rcount
        for _ in range(count - sourced):
            new.assert_association(s, lab, o, 0.0, None, None)
        ne = new.edges.by_triple[(new.concept_id[s], new.label_id[lab], new.concept_id[o])]
        new.edges.weight[ne] = _saturate(old.edges.weight[e] / count * count)
    for sid in sorted(old.passages):
        p = old.passages[sid]
        new.store_passage(
            old.sources[sid],
            p.text,
            list(p.questions),
            sorted(p.sections.items()),
            sorted((i, k, v) for i, (k, v) in p.locators.items()),
            p.tags,
            p.stored_at,
            p.date,
        )
    for kind, names in ((CONCEPT, old.concepts), (LABEL, old.labels)):
        for alias, target in old.aliases[kind].items():
            try:
                new.add_alias(kind, alias, names[target])
            except AliasRefused:
                pass
    new.meta = attrs.evolve(old.meta, dead_attributions=0)
    new.mark_clean()
    return new


@pytest.mark.parametrize("seed", range(10))
def test_compaction_equals_a_replay_of_the_live_content(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    data = tmp_path / "data"
    registry = Registry(store_of(data))
    ctx = registry.create("k", Meta(description="compact me"))
    random_writes(ctx, rnd, 60)
    registry.commit([ctx])
    expected = observable(replayed(ctx))
    dead = dead_edges(ctx)
    live_aliases = sum(len(t) for t in ctx.aliases)
    done = rebuild(ctx, deadline=float("inf"))
    registry.replace(done.context)
    got = registry.get("k")
    assert got is done.context and got is not ctx
    assert done.dead_edges == dead
    assert done.aliases_dropped == live_aliases - sum(len(t) for t in got.aliases)
    assert done.bytes_before == ctx.footprint_bytes() and done.bytes_after == got.footprint_bytes()
    assert observable(got) == expected
    assert stats_out(got.stats())["dead_edges"] == 0 and stats_out(got.stats())["dead_attributions"] == 0
    assert observable(fresh(data, "k")) == expected  # a restart loads the same
    again = rebuild(got, deadline=float("inf"))  # compacting a compacted context sheds nothing
    assert (again.dead_edges, again.aliases_dropped) == (0, 0)
    assert observable(again.context) == expected
    registry.close()


def test_a_refused_compaction_commit_changes_nothing(tmp_path: Path) -> None:
    rnd = random.Random(7)
    data = tmp_path / "data"
    store = store_of(data)
    registry = Registry(store)
    ctx = registry.create("k", Meta())
    random_writes(ctx, rnd, 60)
    registry.commit([ctx])
    before = observable(ctx)
    done = rebuild(ctx, deadline=float("inf"))
    real = store.replace

    def refusing(rebuilt: Context) -> int:
        # the transaction runs its deletes, then fails: nothing of it may land
        with store._tx() as db:
            db.execute("DELETE FROM edges WHERE ctx = ?", (rebuilt.cid,))
            raise StorageFailed("storage_full", "injected")

    store.replace = refusing  # type: ignore[method-assign]
    with pytest.raises(CommitFailed):
        registry.replace(done.context)
    store.replace = real  # type: ignore[method-assign]
    assert registry.get("k") is ctx and observable(ctx) == before
    assert observable(fresh(data, "k")) == before
    registry.close()


def test_the_rebuild_checks_its_budget() -> None:
    ctx = Context(1, "k", Meta())
    ctx.assert_association("a", "r", "b", 1.0, None, None)
    with pytest.raises(ApiError) as err:
        rebuild(ctx, deadline=0.0)
    assert err.value.code == "timeout" and err.value.message == MID_SCAN_TIMEOUT
    assert list(ctx.edges.count) == [1]  # untouched


@pytest.mark.parametrize("seed", range(3))
def test_a_follower_sees_the_compacted_context(tmp_path: Path, seed: int) -> None:
    """Two registries over one store (two worker processes): after one compacts, the other reloads it and
    both equal a fresh load; later writes on either side keep converging record by record."""
    rnd = random.Random(seed)
    data = tmp_path / "data"
    a = Registry(store_of(data), shared=True)
    b = Registry(store_of(data), shared=True)

    async def write(reg: Registry, n: int) -> None:
        async with reg.write_section(deadline=float("inf")):
            ctx = reg.get("k") or reg.create("k", Meta(description="shared"))
            random_writes(ctx, rnd, n)
            reg.commit([ctx])

    async def scenario() -> None:
        await write(a, 40)
        b.catch_up()
        seen = b.get("k")
        assert seen is not None
        async with a.write_section(deadline=float("inf")):
            ctx = a.get("k")
            assert ctx is not None
            a.replace(rebuild(ctx, deadline=float("inf")).context)
        b.catch_up()
        got = b.get("k")
        assert got is not None and got is not seen  # reloaded whole: its ids were reassigned
        durable = observable(fresh(data, "k"))
        assert observable(got) == durable
        assert stats_out(got.stats())["dead_edges"] == 0
        for _ in range(4):
            await write(b if rnd.random() < 0.5 else a, rnd.randrange(1, 10))
            for reg in (a, b):
                reg.catch_up()
            durable = observable(fresh(data, "k"))
            for reg in (a, b):
                mine = reg.get("k")
                assert mine is not None and observable(mine) == durable

    asyncio.run(scenario())
    a.close()
    b.close()


def test_a_follower_sees_a_rename(tmp_path: Path) -> None:
    data = tmp_path / "data"
    a = Registry(store_of(data), shared=True)
    b = Registry(store_of(data), shared=True)

    async def scenario() -> None:
        async with a.write_section(deadline=float("inf")):
            ctx = a.create("old", Meta(description="x"))
            ctx.assert_association("a", "r", "b", 1.0, "s", None)
            a.commit([ctx])
        b.catch_up()
        assert b.get("old") is not None
        async with a.write_section(deadline=float("inf")):
            assert a.rename("old", "new")
        b.catch_up()
        assert b.names() == ["new"] and b.get("old") is None
        got = b.get("new")
        assert got is not None and got.name == "new" and got.concepts == ["a", "b"]
        async with b.write_section(deadline=float("inf")):  # the old name is free on every process
            b.commit([b.create("old", Meta(description="y"))])
        a.catch_up()
        assert a.names() == ["new", "old"]
        mine = a.get("old")
        assert mine is not None and mine.meta.description == "y" and mine.concepts == []

    asyncio.run(scenario())
    a.close()
    b.close()


def test_a_write_holding_the_context_from_before_a_compaction_is_refused(tmp_path: Path) -> None:
    """A write that took the context before an await (an embedding refresh) and commits after a compaction
    replaced it would write rows numbered the old way: refused, and the store keeps the compacted state."""
    data = tmp_path / "data"
    registry = Registry(store_of(data))
    ctx = registry.create("k", Meta())
    ctx.assert_association("a", "r", "b", 1.0, "s", None)
    ctx.assert_association("c", "r", "d", 1.0, "t", None)
    registry.commit([ctx])
    ctx.retract_source("s")
    registry.commit([ctx])
    registry.replace(rebuild(ctx, deadline=float("inf")).context)
    compacted = observable(fresh(data, "k"))
    ctx.meta.rev_config += 1
    ctx.dirty.meta = True
    with pytest.raises(CommitFailed):
        registry.commit([ctx])
    assert registry.write_failing is False
    assert observable(fresh(data, "k")) == compacted
    registry.close()


def test_gloss_vectors_of_dropped_names_go_with_them(tmp_path: Path) -> None:
    from test_embeddings_store import Flat

    from taguru_server.store.derive.embed_refresh import refresh_glosses

    data = tmp_path / "data"
    registry = Registry(store_of(data))
    fake = Flat()

    async def embed(texts: list[str]) -> list[Any]:
        return await fake.embed(texts, "index", None)

    ctx = registry.create("k", Meta())
    ctx.assert_association("keep", "r", "kept", 1.0, "a.md", None)
    ctx.assert_association("gone", "dropped", "lost", 1.0, "b.md", None)
    registry.commit([ctx])
    asyncio.run(refresh_glosses(ctx, fake.model, embed))
    registry.commit([ctx])
    ctx.retract_source("b.md")
    registry.commit([ctx])
    registry.replace(rebuild(ctx, deadline=float("inf")).context)
    for got in (registry.get("k"), fresh(data, "k")):
        assert got is not None and got.vectors.glosses is not None
        assert sorted(got.vectors.glosses.concepts.rows) == ["keep", "kept"]
        assert sorted(got.vectors.glosses.labels.rows) == ["r"]
        assert sorted(got.vectors.glosses.concepts.hashes) == ["keep", "kept"]
    registry.close()
