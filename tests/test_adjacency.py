"""The packed adjacency (store/model/adjacency.py) behaves as the list of lists it replaces, and a CSR read
from an edge image that does not hold is refused before anything is taken."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from test_edge_image import _load, _write
from test_index_files import edge_structures

from taguru_server.store.index.index_file import read_arrays, write_arrays
from taguru_server.store.model.adjacency import HOT, Adjacency
from taguru_server.store.model.csr import grouped
from taguru_server.store.persist.edge_image import image_path


def _model(rng: random.Random, n_groups: int, n_edges: int) -> list[list[int]]:
    keys = [rng.randrange(n_groups) for _ in range(n_edges)]
    keys[: HOT + 3] = [1] * (HOT + 3)  # one group large enough to be kept once read
    out: list[list[int]] = [[] for _ in range(n_groups)]
    for e, k in enumerate(keys):
        out[k].append(e)
    return out


def _packed(model: list[list[int]]) -> Adjacency:
    keys = np.array([g for g, ids in enumerate(model) for _ in ids], dtype=np.int64)
    ids = np.array([e for ids in model for e in ids], dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    adj = Adjacency()
    adj.take(*grouped(keys[order], ids[order], len(model)))
    return adj


def test_a_packed_adjacency_reads_as_its_lists_and_writes_through_own() -> None:
    rng = random.Random(5)
    model = _model(rng, 60, 2000)
    adj = _packed(model)
    assert len(adj) == 60 and adj == model and list(adj) == model
    assert [adj.degree(g) for g in range(60)] == [len(ids) for ids in model]
    small = next(g for g in range(60) if 0 < len(model[g]) < HOT)
    read = adj[small]
    read.append(10**6)  # a packed small group's read is a fresh list: changing it changes nothing
    assert adj[small] == model[small]
    assert adj[1] is adj[1]  # the large group is built once and kept
    for g in (small, 7, 1):  # writers go through own()
        adj.own(g).append(5000 + g)
        model[g].append(5000 + g)
    assert adj == model
    adj.append([9001])
    model.append([9001])
    adj.append([])
    model.append([])
    assert adj == model and len(adj) == 62
    for _ in range(5):  # pops reach into the packed groups
        adj.pop()
        model.pop()
        assert adj == model
    with pytest.raises(IndexError):
        adj[len(model)]
    adj.grow(3)  # empty groups, built when read and kept once owned
    model.extend([[], [], []])
    assert adj == model and adj.degree(len(model) - 1) == 0
    adj.own(len(model) - 2).append(77)
    model[-2].append(77)
    assert adj == model and adj.degree(len(model) - 2) == 1
    ptr, ids = adj.packed()
    again = Adjacency()
    again.take(ptr, ids)
    assert again == model
    adj.fold()
    assert adj._own == {} and adj == model
    assert Adjacency.valid(ptr, ids, len(model), 10**6)


def test_an_invalid_csr_is_refused() -> None:
    ptr = np.array([0, 2, 2, 5], dtype=np.int64)
    ids = np.array([0, 3, 1, 2, 4], dtype=np.int32)
    assert Adjacency.valid(ptr, ids, 3, 5)
    assert not Adjacency.valid(ptr, ids, 4, 5)  # one pointer short
    assert not Adjacency.valid(ptr, ids, 3, 4)  # an id beyond the edges
    assert not Adjacency.valid(np.array([1, 2, 2, 5]), ids, 3, 5)  # does not start at 0
    assert not Adjacency.valid(np.array([0, 3, 2, 5]), ids, 3, 5)  # decreasing
    assert not Adjacency.valid(np.array([0, 2, 2, 4]), ids, 3, 5)  # does not end at the id count
    assert not Adjacency.valid(ptr, np.array([3, 0, 1, 2, 4], dtype=np.int32), 3, 5)  # a group not ascending
    assert not Adjacency.valid(ptr, np.array([0, 3, -1, 2, 4], dtype=np.int32), 3, 5)  # negative


def test_an_image_with_a_damaged_adjacency_is_read_from_the_rows(tmp_path: Path) -> None:
    """A file whose checksums hold but whose adjacency does not (written by something else) is not taken."""
    data = tmp_path / "store"
    _write(data, random.Random(4), 80)
    first = _load(data)
    path = image_path(data / "indexes", first.cid)
    header, arrays = read_arrays(path)
    arrays = {k: np.array(v) for k, v in arrays.items()}
    out_ptr, out_ids = arrays["out_ptr"], arrays["out_ids"]
    a = int(out_ptr[np.flatnonzero(np.diff(out_ptr) >= 2)[0]])
    out_ids[[a, a + 1]] = out_ids[[a + 1, a]]  # two ids of one group swapped: it no longer ascends
    write_arrays(path, header, arrays)
    damaged = _load(data)
    assert damaged.edges_restored == ("rows", "damaged (adjacency)")
    assert edge_structures(damaged) == edge_structures(_load(data, index=False))
    assert _load(data).edges_restored == ("image", None)


@pytest.mark.parametrize("concepts", [["a", "b", "c"], ["a", "b", "a", "c"]])
def test_interning_a_loads_names_at_once_equals_interning_them_one_by_one(concepts: list[str]) -> None:
    from taguru_server.store.model.context import Context, Meta

    one, bulk = Context(1, "k", Meta()), Context(1, "k", Meta())
    for name in concepts:
        one.intern_concept(name)
    for name in ["r", "s"]:
        one.intern_label(name)
    for name in ["x", "x", "y"]:
        one.intern_source(name)
    bulk.intern_loaded(concepts, ["r", "s"], ["x", "x", "y"])
    assert (bulk.concepts, bulk.concept_id, bulk.labels, bulk.label_id, bulk.sources, bulk.source_id) == (
        one.concepts,
        one.concept_id,
        one.labels,
        one.label_id,
        one.sources,
        one.source_id,
    )
    assert bulk.out_edges == one.out_edges and bulk.in_edges == one.in_edges and bulk.label_edges == one.label_edges
    assert [(lex.records, list(lex.alive), lex.entry_of) for lex in bulk.lexicons] == [
        (lex.records, list(lex.alive), lex.entry_of) for lex in one.lexicons
    ]
    with pytest.raises(ValueError):
        bulk.intern_loaded(["z"], [], [])
