"""The triple index (store/model/edges.py: TripleIndex): packed sorted keys for the loaded edges plus a dict of
the added ones answers every lookup, removal and listing as the plain dict it replaces does."""

from __future__ import annotations

import random

import numpy as np
import pytest

from taguru_server.store.model.edges import EdgeTable, TripleIndex


def _table(rnd: random.Random, n_concepts: int, n_labels: int, n: int) -> EdgeTable:
    table = EdgeTable()
    for _ in range(n):
        table.row(rnd.randrange(n_concepts), rnd.randrange(n_labels), rnd.randrange(n_concepts))
    return table


@pytest.mark.parametrize("seed", range(8))
def test_the_index_acts_as_the_plain_dict(seed: int) -> None:
    rnd = random.Random(seed)
    n_concepts, n_labels = rnd.randint(1, 40), rnd.randint(1, 6)
    loaded = _table(rnd, n_concepts, n_labels, rnd.randint(0, 300))
    plain = dict(loaded.by_triple.items())
    index = EdgeTable()
    index.subject, index.label, index.object = loaded.subject, loaded.label, loaded.object
    index.index_triples(n_concepts, n_labels)
    got = index.by_triple
    assert sorted(got.items()) == sorted(plain.items()) and len(got) == len(plain)
    next_id = len(loaded.subject)
    for _ in range(400):  # lookups, additions (also past the load's spans), removals, re-additions
        key = (rnd.randrange(n_concepts + 3), rnd.randrange(n_labels + 2), rnd.randrange(n_concepts + 3))
        action = rnd.random()
        if action < 0.5:
            assert got.get(key) == plain.get(key) and (key in got) == (key in plain)
            assert got.get(key, -1) == plain.get(key, -1)
        elif action < 0.75:
            assert got.pop(key, None) == plain.pop(key, None)
        elif key not in plain:
            got[key] = plain[key] = next_id
            next_id += 1
    assert sorted(got.items()) == sorted(plain.items())
    assert dict(got) == plain
    for key, e in plain.items():
        assert got[key] == e
    with pytest.raises(KeyError):
        got[(n_concepts + 9, 0, 0)]


def test_spans_too_large_to_pack_fall_back_to_the_dict() -> None:
    assert TripleIndex.packable(1_000_000, 1000)
    assert not TripleIndex.packable(3_000_000_000, 1)
    table = EdgeTable()
    table.subject, table.label, table.object = [0, 5], [0, 0], [1, 2]
    table.index_triples(3_000_000_000, 1)
    assert table.by_triple._keys is None
    assert sorted(table.by_triple.items()) == [((0, 0, 1), 0), ((5, 0, 2), 1)]


def test_mapped_keys_are_used_as_they_are() -> None:
    keys = TripleIndex.packed(np.array([2, 0]), np.array([1, 0]), np.array([0, 3]), 4, 2)
    order = np.argsort(keys, kind="stable")
    frozen_keys, frozen_ids = keys[order], order.astype(np.int32)
    frozen_keys.flags.writeable = False
    index = TripleIndex()
    index.take(frozen_keys, frozen_ids, 4, 2)
    assert index.get((2, 1, 0)) == 0 and index.get((0, 0, 3)) == 1 and index.get((1, 1, 1)) is None
    assert index.pop((2, 1, 0)) == 0 and index.get((2, 1, 0)) is None
    index[(2, 1, 0)] = 7
    assert sorted(index.items()) == [((0, 0, 3), 1), ((2, 1, 0), 7)]
