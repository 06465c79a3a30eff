"""The activation image (store/read/activation_image.py): a warm-up that maps a context's activation graph
from its file holds exactly the graph a build from the edges makes, field by field, and a damaged, stale
or foreign file, or a context changed since its edge image, never gets it."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from test_index_files import index_store
from test_store_sync import observable, random_writes

from taguru_server.store.model.context import Context, Meta
from taguru_server.store.model.schema_check import hidden_label
from taguru_server.store.persist.registry import Registry
from taguru_server.store.read import activation_image
from taguru_server.store.read.activation_graph import ARRAYS, ActivationGraph, activation_graph
from taguru_server.store.read.activation_image import activation_image_path, save_activation_image
from taguru_server.store.read.cache import warm


def load_k(data: Path, index: bool = True, warm_up: Callable[[Context], None] = Context.seal_indexes) -> Context:
    """A fresh load of context `k` (with the index directory or without), warmed up by `warm_up`."""
    store = index_store(data, index)
    try:
        ctx = Registry(store, warm=warm_up).get("k")
        assert ctx is not None
        return ctx
    finally:
        store.close()


def write_k(data: Path, rnd: random.Random, n: int) -> None:
    """`n` random writes to context `k` (created if need be), committed."""
    store = index_store(data)
    try:
        reg = Registry(store)
        ctx = reg.get("k") or reg.create("k", Meta(description="images"))
        random_writes(ctx, rnd, n)
        reg.commit([ctx])
    finally:
        store.close()


def _load(data: Path, index: bool = True) -> Context:
    return load_k(data, index, warm)


def _write(data: Path, rnd: random.Random, n: int) -> None:
    write_k(data, rnd, n)


def _fields(graph: ActivationGraph) -> tuple[object, ...]:
    arrays = tuple((name, getattr(graph, name).dtype.str, getattr(graph, name).tobytes()) for name in ARRAYS)
    return (*arrays, graph.n_levels, repr(graph.min_abs))


def _built(ctx: Context) -> ActivationGraph:
    return ActivationGraph(ctx, hidden=hidden_label(ctx))


@pytest.mark.parametrize("seed", range(5))
def test_a_mapped_graph_equals_the_built_one(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    data = tmp_path / "store"
    _write(data, rnd, 80)
    first = _load(data)
    assert first.activation_restored is not None and first.activation_restored[0] == "built"
    for _ in range(3):
        again = _load(data)
        assert again.activation_restored == ("image", None)
        mapped = activation_graph(again)
        assert not mapped.edge.flags.writeable  # the file's pages, not a copy
        assert _fields(mapped) == _fields(_built(again)) == _fields(_built(_load(data, index=False)))
        assert observable(again) == observable(_load(data, index=False))
        # a later write leaves both images stale: the next load builds the graph again and rewrites the file
        _write(data, rnd, rnd.randrange(1, 30))
        stale = _load(data)
        assert stale.activation_restored == ("built", "stale")
        assert _fields(activation_graph(stale)) == _fields(_built(stale))


@pytest.mark.parametrize("where", [0, 20, -5])
def test_a_damaged_file_is_built_again_and_rewritten(tmp_path: Path, where: int) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(2), 90)
    ctx = _load(data)
    path = activation_image_path(data / "indexes", ctx.cid)
    raw = bytearray(path.read_bytes())
    raw[where] ^= 0x33
    path.write_bytes(bytes(raw))
    damaged = _load(data)
    assert damaged.activation_restored is not None and damaged.activation_restored[0] == "built"
    assert damaged.activation_restored[1] not in (None, "stale")
    assert _fields(activation_graph(damaged)) == _fields(_built(damaged))
    assert _load(data).activation_restored == ("image", None)


def test_a_context_changed_since_its_edge_image_neither_takes_nor_writes_a_file(tmp_path: Path) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(6), 50)
    ctx = _load(data)
    path = activation_image_path(data / "indexes", ctx.cid)
    before = path.read_bytes()
    random_writes(ctx, random.Random(7), 5)  # in memory, not committed: the edge image no longer describes it
    assert save_activation_image(ctx) is False
    assert path.read_bytes() == before
    ctx.read_cache.clear()
    warm(ctx)
    assert ctx.activation_restored == ("built", "no edge image")
    assert _fields(activation_graph(ctx)) == _fields(_built(ctx))
    assert path.read_bytes() == before


def test_a_file_with_other_sizes_or_hidden_label_is_not_taken(tmp_path: Path) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(8), 40)
    _load(data)
    ctx = _load(data)
    assert ctx.activation_restored == ("image", None)
    assert ctx.image_state is not None
    index_dir, identity, _version = ctx.image_state
    assert isinstance(activation_image._restore(ctx, index_dir, identity, hidden=0), str)
    assert activation_image._restore(ctx, index_dir, {**identity, "seq": -1}, hidden_label(ctx)) == "stale"
    ctx.intern_concept("a concept the file does not count")
    got = activation_image._restore(ctx, index_dir, identity, hidden_label(ctx))
    assert got == "sizes differ from the context"


def test_deleting_a_context_removes_every_file_kept_for_it(tmp_path: Path) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(9), 20)
    cid = _load(data).cid
    kept = sorted(p.name for p in (data / "indexes").glob(f"ctx-{cid}.*"))
    assert kept == [f"ctx-{cid}.{kind}" for kind in ("activation", "bm25", "edges", "lexicon")]
    store = index_store(data)
    try:
        Registry(store).delete("k")
    finally:
        store.close()
    assert list((data / "indexes").glob(f"ctx-{cid}.*")) == []
