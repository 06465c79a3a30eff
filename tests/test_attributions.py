"""The packed attribution records and source → edges index behave as the lists and sets they replace."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from taguru_server.store.index.index_file import min_max, read_arrays, release_pages, write_arrays
from taguru_server.store.model.attributions import CHUNK, Attributions, SourceEdges, pack, source_csr


def _records(rng: random.Random, n_edges: int, n_sources: int) -> list[list[list[Any]]]:
    out = []
    for _ in range(n_edges):
        k = rng.choice([0, 0, 1, 1, 2, 3, 7])
        sids = rng.sample(range(n_sources), k)
        out.append(
            [
                [s, rng.choice([1.0, -0.5, 0.25, 1e300]), rng.randint(1, 5), rng.choice([None, 0, 3, 4_000_000_000])]
                for s in sids
            ]
        )
    return out


def test_packed_records_read_back_as_the_lists() -> None:
    rng = random.Random(3)
    model = _records(rng, 500, 40)
    table = Attributions()
    table.extend(model)
    assert table.delta() == 0 and len(table) == 500
    assert [table[e] for e in range(500)] == model
    assert list(table) == model and table == model
    assert table.n_records() == sum(len(r) for r in model)
    assert [e for e, _ in table.span(10, 20)] == list(range(10, 20))
    with pytest.raises(IndexError):
        table[500]


def test_writers_change_the_delta_and_the_columns_merge_it() -> None:
    rng = random.Random(5)
    model = _records(rng, 300, 25)
    table = Attributions()
    table.extend(model)
    for step in range(400):
        e = rng.randrange(len(model))
        kind = step % 4
        if kind == 0:  # a writer changes an edge's records in place
            records = table.own(e)
            records.append([rng.randrange(25), 2.0, 1, None])
            model[e].append([records[-1][0], 2.0, 1, None])
        elif kind == 1:
            table[e] = []
            model[e] = []
        elif kind == 2:
            table.append([[1, 0.5, 1, 2]])
            model.append([[1, 0.5, 1, 2]])
        else:  # a fresh read of a packed edge is not the stored list: changing it changes nothing
            fresh = table[e]
            if fresh is not table[e]:  # a packed edge (not yet in the delta)
                fresh.append([0, 9.0, 9, None])
                assert table[e] == model[e]
    assert list(table) == model
    ptr, sid, rsum, cnt, par = table.packed()
    want = pack(model)
    for got, expected in zip((ptr, sid, rsum, cnt, par), want, strict=True):
        assert got.tolist() == expected.tolist()
    table.fold()
    assert table.delta() == 0 and list(table) == model
    del table[120:]
    del model[120:]
    assert list(table) == model and len(table) == 120
    assert table.n_records() == sum(len(r) for r in model)


def test_iteration_crosses_slices() -> None:
    model = [[[e % 7, 1.0, 1, None]] if e % 3 else [] for e in range(CHUNK + 50)]
    table = Attributions()
    table.extend(model)
    table.own(CHUNK + 1).append([2, 1.0, 1, 5])
    model[CHUNK + 1].append([2, 1.0, 1, 5])
    assert list(table) == model


def test_damaged_columns_are_refused() -> None:
    ptr, sid, rsum, cnt, par = pack([[[0, 1.0, 1, None]], [[1, 2.0, 1, 3]]])
    assert Attributions.valid(ptr, sid, rsum, cnt, par, 2)
    assert not Attributions.valid(ptr, sid, rsum, cnt, par, 1)  # a source the context does not have
    assert not Attributions.valid(ptr[::-1].copy(), sid, rsum, cnt, par, 2)
    assert not Attributions.valid(ptr, sid, np.array([1.0, np.inf]), cnt, par, 2)
    keys, sptr, ids = source_csr(np.array([0, 1, 1]), np.array([4, 2, 4]))
    assert keys.tolist() == [2, 4] and sptr.tolist() == [0, 1, 3] and ids.tolist() == [1, 0, 1]
    assert SourceEdges.valid(keys, sptr, ids, 5, 2)
    assert not SourceEdges.valid(keys, sptr, ids, 4, 2) and not SourceEdges.valid(keys, sptr, ids, 5, 1)


def test_source_edges_behave_as_a_dict_of_sets() -> None:
    rng = random.Random(11)
    model: dict[int, set[int]] = {}
    edges, sources = [], []
    for e in range(200):
        for s in rng.sample(range(30), rng.randint(0, 3)):
            edges.append(e)
            sources.append(s)
            model.setdefault(s, set()).add(e)
    index = SourceEdges()
    index.take(*source_csr(np.array(edges), np.array(sources)))
    assert index == model and sorted(index) == sorted(model)
    for _ in range(300):
        s = rng.randrange(35)
        op = rng.randrange(5)
        if op == 0:
            got, want = index.get(s), model.get(s)
            assert got == want
            if got is not None:
                e = rng.randrange(200)
                got.add(e)
                want.add(e)  # type: ignore[union-attr]
        elif op == 1:
            index.setdefault(s, set()).discard(3)
            model.setdefault(s, set()).discard(3)
        elif op == 2:
            assert index.pop(s, None) == model.pop(s, None)
        elif op == 3:
            assert (s in index) == (s in model)
        else:
            index[s] = {s}
            model[s] = {s}
    assert dict(index.items()) == model and len(index) == len(model)


def test_checks_leave_no_resident_copy_and_views_stay_valid(tmp_path: Path) -> None:
    data = np.arange(3_000_000, dtype=np.int32)[::-1].copy()
    path = tmp_path / "ctx-1.test"
    write_arrays(path, {"kind": "test"}, {"docs": data, "small": np.array([7, -2], dtype=np.int64)})
    _header, arrays = read_arrays(path)
    assert min_max(arrays["docs"]) == (0, 2_999_999)
    assert min_max(arrays["small"]) == (-2, 7)
    release_pages(arrays)
    assert int(arrays["docs"][0]) == 2_999_999 and arrays["docs"][-5:].tolist() == [4, 3, 2, 1, 0]


def test_cover_sums_as_the_loop_over_the_records_sums() -> None:
    rng = random.Random(17)
    model = _records(rng, 700, 12)
    for records in model:  # sums that round differently in another order
        for rec in records:
            rec[1] = rng.choice([0.1, 0.2, 0.3, 1e16, -1e16, 3.0, -0.7])
    table = Attributions()
    table.extend(model)
    for _ in range(60):  # some edges written since, some appended
        e = rng.randrange(len(model))
        table.own(e).append([rng.randrange(12), 0.1, 2, None])
        model[e].append([table[e][-1][0], 0.1, 2, None])
    table.append([[3, 0.3, 1, None], [4, 0.1, 1, None]])
    model.append([[3, 0.3, 1, None], [4, 0.1, 1, None]])
    for skip in (None, 3):
        for first, last in ((0, len(model)), (5, 400), (650, 10_000)):
            counts, sums = table.cover(first, last, skip)
            want_c, want_s = [], []
            for records in model[first:last]:
                c, s = 0, 0.0
                for rec in records:
                    if rec[0] != skip:
                        c += rec[2]
                        s += rec[1]
                want_c.append(c)
                want_s.append(s)
            assert counts.tolist() == want_c
            assert [x.hex() for x in sums.tolist()] == [x.hex() for x in want_s]


def test_a_copy_holds_the_same_records_and_its_own_delta() -> None:
    import copy
    import pickle

    model = _records(random.Random(23), 50, 9)
    table = Attributions()
    table.extend(model)
    table.own(4).append([1, 1.0, 1, None])
    for other in (copy.deepcopy(table), pickle.loads(pickle.dumps(table))):
        assert list(other) == list(table) and other.delta() == 1
        other.own(5).append([2, 1.0, 1, None])
        assert table[5] == model[5] and other[5] != model[5]
