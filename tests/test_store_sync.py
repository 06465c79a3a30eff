"""A refused commit is undone record by record: memory ends equal to a fresh load of the store, without a reload."""

from __future__ import annotations

import gc
import random
from pathlib import Path
from typing import Any

import pytest

from taguru_server.store.errors import StorageFailed
from taguru_server.store.model.context import CONCEPT, LABEL, AliasRefused, Context, Meta
from taguru_server.store.persist.registry import CommitFailed, Registry
from taguru_server.store.persist.sqlite import SqlitePersistence
from taguru_server.store.read.resolve import resolve_matches
from taguru_server.store.text import terms

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "tau", "rho", "phi", "chi", "psi"]


def random_writes(ctx: Context, rnd: random.Random, n: int) -> None:
    """n random mutations of every kind a route makes."""
    for _ in range(n):
        op = rnd.randrange(7)
        word = rnd.choice(WORDS) + str(rnd.randrange(30))
        if op <= 1:
            rows = [
                (
                    rnd.choice(WORDS) + str(rnd.randrange(30)),
                    rnd.choice(["is", "has", "near"]) + str(rnd.randrange(4)),
                    rnd.choice(WORDS) + str(rnd.randrange(30)),
                    rnd.choice([1.0, 0.5, -0.25, 2.0]),
                    rnd.choice([None, 0, 1, 3]),
                )
                for _ in range(rnd.randrange(1, 6))
            ]
            ctx.assert_many(rows, "src" + str(rnd.randrange(12)))
        elif op == 2:
            ctx.assert_association(word, "is0", rnd.choice(WORDS) + "0", 1.0, None, None)
        elif op == 3 and ctx.edges.subject:
            e = rnd.randrange(len(ctx.edges.subject))
            ctx.retract_association(
                ctx.concepts[ctx.edges.subject[e]], ctx.labels[ctx.edges.label[e]], ctx.concepts[ctx.edges.object[e]]
            )
        elif op == 4 and ctx.concepts:
            kind = rnd.choice([CONCEPT, LABEL]) if ctx.labels else CONCEPT
            names = ctx.concepts if kind == CONCEPT else ctx.labels
            try:
                if rnd.random() < 0.7:
                    ctx.add_alias(kind, "alias-" + word, rnd.choice(names))
                else:
                    ctx.remove_alias(kind, "alias-" + word)
            except AliasRefused:
                pass
        elif op == 5:
            text = "\n\n".join(" ".join(rnd.choices(WORDS, k=6)) for _ in range(rnd.randrange(1, 4)))
            ctx.store_passage(
                "src" + str(rnd.randrange(12)),
                text,
                [(0, "which " + word)],
                [(0, "Intro")],
                [(1, "page", "2")],
                ["t"],
                5,
                None,
            )
        else:
            ctx.retract_source("src" + str(rnd.randrange(12)))


def observable(ctx: Context) -> dict[str, Any]:
    """Everything a read can see, by name rather than by position in an index."""
    bm25 = ctx.bm25
    searches = {}
    for word in WORDS[:6]:
        docs, scores = bm25.search(terms(word))
        searches[word] = sorted(
            (bm25.doc_source[d], bm25.doc_par[d], float(s)) for d, s in zip(docs.tolist(), scores.tolist(), strict=True)
        )
    return {
        "concepts": list(ctx.concepts),
        "labels": list(ctx.labels),
        "sources": list(ctx.sources),
        "edges": [
            (
                ctx.edges.subject[e],
                ctx.edges.label[e],
                ctx.edges.object[e],
                ctx.edges.weight[e],
                ctx.edges.count[e],
                ctx.edges.attributions[e],
            )
            for e in range(len(ctx.edges.subject))
        ],
        "edge_of": dict(ctx.edges.by_triple),
        "out": [list(x) for x in ctx.out_edges],
        "in": [list(x) for x in ctx.in_edges],
        "by_label": [list(x) for x in ctx.label_edges],
        "by_source": {s: sorted(es) for s, es in ctx.source_edges.items() if es},
        "aliases": [dict(t) for t in ctx.aliases],
        "passages": {sid: (p.text, p.meta_json()) for sid, p in ctx.passages.items()},
        "meta": ctx.meta,
        "searches": searches,
        "resolve": [
            sorted((m.name, m.score, m.kind) for m in resolve_matches(ctx, kind, cue, 0.3, 50))
            for kind in (CONCEPT, LABEL)
            for cue in ("alpha1", "alias-beta2", "has0", "gamma")
        ],
        "stats": ctx.stats(),
    }


def fresh(data: Path, name: str) -> Context:
    store = SqlitePersistence(data)
    try:
        ctx = Registry(store).get(name)
        assert ctx is not None
        return ctx
    finally:
        store.close()


@pytest.mark.parametrize("seed", range(12))
def test_a_refused_commit_leaves_memory_equal_to_the_store(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    data = tmp_path / "data"
    store = SqlitePersistence(data)
    registry = Registry(store)
    ctx = registry.create("k", Meta(description="sync"))
    random_writes(ctx, rnd, 30)
    registry.commit([ctx])
    durable = observable(fresh(data, "k"))
    assert observable(ctx) == durable
    loads = 0
    real_load, real_commit = store.load, store.commit

    def counting_load(*args: Any) -> Context:
        nonlocal loads
        loads += 1
        return real_load(*args)

    def refusing(contexts: Any) -> None:
        raise StorageFailed("storage_full", "injected")

    store.load = counting_load  # type: ignore[method-assign]
    for _round in range(3):
        random_writes(ctx, rnd, rnd.randrange(1, 25))
        store.commit = refusing  # type: ignore[method-assign]
        with pytest.raises(CommitFailed):
            registry.commit([ctx])
        assert registry.get("k") is ctx  # kept, not evicted
        assert observable(ctx) == durable
        store.commit = real_commit  # type: ignore[method-assign]
        random_writes(ctx, rnd, 10)  # memory keeps working after the repair
        registry.commit([ctx])
        durable = observable(fresh(data, "k"))
        assert observable(ctx) == durable
    assert loads == 0
    registry.close()


def test_a_never_committed_context_is_dropped(tmp_path: Path) -> None:
    store = SqlitePersistence(tmp_path / "data")
    registry = Registry(store)
    ctx = registry.create("new", Meta())
    ctx.intern_concept("a")

    def refusing(contexts: Any) -> None:
        raise StorageFailed("unavailable", "injected")

    store.commit = refusing  # type: ignore[method-assign]
    with pytest.raises(CommitFailed):
        registry.commit([ctx])
    assert registry.get("new") is None and registry.names() == []
    registry.close()


@pytest.mark.parametrize("seed", range(8))
def test_processes_sharing_a_store_converge_by_the_change_log(tmp_path: Path, seed: int) -> None:
    """Two registries over one store (as two worker processes): each writes in write sections, the other
    catches up record by record; after every step both equal a fresh load, and nothing is reloaded."""
    import asyncio

    rnd = random.Random(seed)
    data = tmp_path / "data"
    a = Registry(SqlitePersistence(data), shared=True)
    b = Registry(SqlitePersistence(data), shared=True)
    loads = 0

    async def write(reg: Registry, n: int) -> None:
        async with reg.write_section(deadline=float("inf")):
            ctx = reg.get("k")
            if ctx is None:
                ctx = reg.create("k", Meta(description="shared"))
            random_writes(ctx, rnd, n)
            reg.commit([ctx])

    async def scenario() -> None:
        nonlocal loads
        await write(a, 20)
        for reg in (a, b):
            reg.catch_up()
        assert b.get("k") is not None  # b loads the context once, from the store
        for store in (a.persistence, b.persistence):
            real = store.load

            def counting(*args: Any, real: Any = real) -> Context:
                nonlocal loads
                loads += 1
                return real(*args)

            store.load = counting  # type: ignore[method-assign]
        for step in range(12):
            writer = a if rnd.random() < 0.5 else b
            await write(writer, rnd.randrange(1, 15))
            for reg in (a, b):
                reg.catch_up()
            durable = observable(fresh(data, "k"))
            for reg in (a, b):
                got = reg.get("k")
                assert got is not None
                assert observable(got) == durable, (step, reg is a)

    asyncio.run(scenario())
    assert loads == 0
    a.close()
    b.close()


def test_a_context_created_and_deleted_elsewhere_appears_and_disappears(tmp_path: Path) -> None:
    import asyncio

    data = tmp_path / "data"
    a = Registry(SqlitePersistence(data), shared=True)
    b = Registry(SqlitePersistence(data), shared=True)

    async def scenario() -> None:
        async with a.write_section(deadline=float("inf")):
            ctx = a.create("n", Meta(description="x"))
            ctx.intern_concept("c")
            a.commit([ctx])
        b.catch_up()
        assert b.names() == ["n"] and b.get("n") is not None
        async with a.write_section(deadline=float("inf")):
            a.delete("n")
        b.catch_up()
        assert b.names() == [] and b.get("n") is None
        async with b.write_section(deadline=float("inf")):  # recreated on the other side: a new id
            ctx = b.create("n", Meta(description="y"))
            b.commit([ctx])
        a.catch_up()
        got = a.get("n")
        assert got is not None and got.meta.description == "y"

    asyncio.run(scenario())
    a.close()
    b.close()


@pytest.mark.parametrize("seed", range(4))
def test_a_context_read_off_the_loop_is_adopted_with_the_writes_applied_meanwhile(tmp_path: Path, seed: int) -> None:
    """A background load (`read_context`, then `adopt`) of a context another process keeps writing: the
    changes applied while it was read are applied to it again, so it equals a fresh load; one loaded or
    dropped meanwhile is not adopted."""
    import asyncio

    rnd = random.Random(seed)
    data = tmp_path / "data"
    a = Registry(SqlitePersistence(data), shared=True)
    b = Registry(SqlitePersistence(data), shared=True)
    directory_changes: list[int] = []
    b.on_directory = lambda: directory_changes.append(1)

    async def write(n: int) -> None:
        async with a.write_section(deadline=float("inf")):
            ctx = a.get("k") or a.create("k", Meta(description="shared"))
            random_writes(ctx, rnd, n)
            a.commit([ctx])

    async def scenario() -> None:
        await write(20)
        b.catch_up()
        assert directory_changes and b.unloaded_names() == ["k"]
        read = b.read_context("k")  # as the loader thread does, at the store's state now
        assert read is not None
        await write(rnd.randrange(1, 15))  # lands while the copy is "being read"
        b.catch_up()  # `k` is not held yet: only the directory is refreshed
        gc.unfreeze()
        assert b.adopt(*read) and b.is_loaded("k")
        # kept out of the collector's full passes, as a load inside `get` is (a first collection after a
        # preload re-scanning millions of objects stopped a request for seconds)
        assert gc.get_freeze_count() > 0
        got = b.get("k")
        assert got is not None and observable(got) == observable(fresh(data, "k"))
        again = b.read_context("k")
        assert again is not None and not b.adopt(*again)  # already held: the later copy is dropped

    asyncio.run(scenario())
    a.close()
    b.close()


@pytest.mark.parametrize("path", ["get", "read_context"])
def test_a_load_takes_the_metadata_of_its_own_snapshot(tmp_path: Path, path: str) -> None:
    """Another process changes a context's metadata (a schema installed, a description) after this one
    listed it: a load reads the metadata in the snapshot it reads the rows in, so its own next commit
    does not write the old metadata back over the change (a schema silently dropped under --workers)."""
    import asyncio

    data = tmp_path / "data"
    a = Registry(SqlitePersistence(data), shared=True)
    b = Registry(SqlitePersistence(data), shared=True)

    async def scenario() -> None:
        async with a.write_section(deadline=float("inf")):
            ctx = a.create("m", Meta(description="first"))
            ctx.intern_concept("c")
            a.commit([ctx])
        b.catch_up()  # b knows `m` with its first metadata, and has not loaded it
        assert b.unloaded_names() == ["m"]
        async with a.write_section(deadline=float("inf")):
            ctx = a.get("m")
            assert ctx is not None
            ctx.meta.description = "second"
            ctx.meta.schema = '{"schema": 1}'
            ctx.dirty.meta = True
            a.commit([ctx])
        if path == "get":  # an eventually consistent read: loaded before any catch-up
            got = b.get("m")
        else:  # the loader thread's copy, adopted after the catch-up it raced
            read = b.read_context("m")
            assert read is not None
            b.catch_up()
            assert b.adopt(*read)
            got = b.get("m")
        assert got is not None
        assert (got.meta.description, got.meta.schema) == ("second", '{"schema": 1}')
        async with b.write_section(deadline=float("inf")):
            mine = b.get("m")
            assert mine is not None
            mine.intern_concept("d")
            b.commit([mine])
        durable = fresh(data, "m")
        assert (durable.meta.description, durable.meta.schema) == ("second", '{"schema": 1}')

    asyncio.run(scenario())
    a.close()
    b.close()
