"""The edge image (store/persist/edge_image.py): a load that takes a context's edges from its file holds
exactly what a load of the edge rows builds, and a damaged, stale or foreign file is never trusted."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_index_files import edge_structures, index_store, load_context
from test_store_sync import observable, random_writes

from taguru_server.store.model.context import Context, Meta
from taguru_server.store.persist.edge_image import image_path, restore_edges
from taguru_server.store.persist.registry import Registry


def _load(data: Path, index: bool = True) -> Context:
    return load_context(data, index, "k")


def _write(data: Path, rnd: random.Random, n: int) -> None:
    store = index_store(data)
    try:
        reg = Registry(store)
        ctx = reg.get("k") or reg.create("k", Meta(description="edges"))
        random_writes(ctx, rnd, n)
        reg.commit([ctx])
    finally:
        store.close()


@pytest.mark.parametrize("seed", range(6))
def test_a_load_from_the_image_equals_a_load_from_the_rows(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    data = tmp_path / "store"
    _write(data, rnd, 60)
    first = _load(data)
    assert first.edges_restored == ("rows", "missing")
    again = _load(data)
    assert again.edges_restored == ("image", None)
    plain = _load(data, index=False)
    assert plain.edges_restored is None
    assert edge_structures(again) == edge_structures(plain)
    assert observable(again) == observable(plain)
    for _ in range(3):  # every later write leaves the file stale: the next load reads the rows, then rewrites it
        _write(data, rnd, rnd.randrange(1, 30))
        assert _load(data).edges_restored == ("rows", "stale")
        taken = _load(data)
        assert taken.edges_restored == ("image", None)
        plain = _load(data, index=False)
        assert edge_structures(taken) == edge_structures(plain) and observable(taken) == observable(plain)


@pytest.mark.parametrize("where", [0, 9, -3])
def test_a_damaged_image_is_read_from_the_rows_and_rewritten(tmp_path: Path, where: int) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(3), 80)
    first = _load(data)
    path = image_path(data / "indexes", first.cid)
    raw = bytearray(path.read_bytes())
    raw[where] ^= 0x5A
    path.write_bytes(bytes(raw))
    damaged = _load(data)
    assert damaged.edges_restored is not None and damaged.edges_restored[0] == "rows"
    assert damaged.edges_restored[1] != "stale"
    assert edge_structures(damaged) == edge_structures(_load(data, index=False))
    assert _load(data).edges_restored == ("image", None)


def test_an_image_of_another_identity_or_size_is_not_taken(tmp_path: Path) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(4), 40)
    ctx = _load(data)
    _load(data)
    store = index_store(data)
    try:
        identity = {"store": store.store_id, "context": ctx.cid, "seq": store.index_seq(ctx.cid)}
    finally:
        store.close()
    names = Context(ctx.cid, "k", Meta())
    for name in ctx.concepts:
        names.intern_concept(name)
    for name in ctx.labels:
        names.intern_label(name)
    for name in ctx.sources:
        names.intern_source(name)
    n = len(ctx.edges)
    assert restore_edges(names, data / "indexes", {**identity, "store": "another"}, n) == "stale"
    assert restore_edges(names, data / "indexes", {**identity, "seq": identity["seq"] + 1}, n) == "stale"
    assert restore_edges(names, data / "indexes", identity, n + 1) == "sizes differ from the rows"
    assert len(names.edges) == 0 and not any(names.out_edges)  # nothing was taken
    assert restore_edges(names, data / "indexes", identity, n) is None
    assert edge_structures(names) == edge_structures(ctx)


def test_deleting_a_context_removes_its_image(tmp_path: Path) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(5), 20)
    cid = _load(data).cid
    path = image_path(data / "indexes", cid)
    assert path.exists()
    store = index_store(data)
    try:
        Registry(store).delete("k")
    finally:
        store.close()
    assert not path.exists()
