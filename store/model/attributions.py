"""Attribution records and the source → edges index as packed columns plus a small delta of what changed.

A large context holds millions of attribution records (`[source_id, sum, count, paragraph|None]` per
source per edge); as Python lists they took more memory than everything else in a loaded context.
Here the loaded records are five arrays: an edge's records are `ptr[e]:ptr[e + 1]` of the source
(int32), sum (float64), count and paragraph (int64, −1 for none) columns, mapped from the edge image
or packed once from the rows; the edges written since keep their records as lists in `_own`.

Reads go through `attrs[e]`, which gives the edge's records as lists; for a packed edge those are
fresh lists, so **a writer takes `attrs.own(e)`** (the edge's list from then on, kept in the delta) or
assigns `attrs[e] = records`. `fold` packs the delta back into the columns (the image writer and a
compaction do). `SourceEdges` does the same for the per-source edge sets: a CSR from the image, and
the sets a write touched, materialized on first use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from taguru_server.store.model.csr import grouped, owners

Record = list[Any]  # [source_id, sum, count, paragraph | None]
CHUNK = 1 << 16  # edges per slice when iterating every edge's records


def _records(sid: list[Any], rsum: list[Any], cnt: list[Any], par: list[Any]) -> list[Record]:
    return [[s, w, c, None if p < 0 else p] for s, w, c, p in zip(sid, rsum, cnt, par, strict=True)]


def pack(per_edge: list[list[Record]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The five columns of `per_edge`'s records."""
    ptr = np.zeros(len(per_edge) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(r) for r in per_edge), dtype=np.int64, count=len(per_edge)), out=ptr[1:])
    flat = [rec for records in per_edge for rec in records]
    n = len(flat)
    sid = np.fromiter((r[0] for r in flat), dtype=np.int32, count=n)
    rsum = np.fromiter((r[1] for r in flat), dtype=np.float64, count=n)
    cnt = np.fromiter((r[2] for r in flat), dtype=np.int64, count=n)
    par = np.fromiter((-1 if r[3] is None else r[3] for r in flat), dtype=np.int64, count=n)
    return ptr, sid, rsum, cnt, par


class Attributions:
    """Per edge id, its attribution records: packed columns for the loaded edges, lists for those written since."""

    __slots__ = ("_ptr", "_sid", "_sum", "_cnt", "_par", "_packed", "_own", "_len", "_views")

    def __init__(self) -> None:
        self.take(*pack([]))

    def take(self, ptr: np.ndarray, sid: np.ndarray, rsum: np.ndarray, cnt: np.ndarray, par: np.ndarray) -> None:
        """Hold `len(ptr) - 1` edges' records as the given columns (mapped or packed), and no delta."""
        self._ptr, self._sid, self._sum, self._cnt, self._par = ptr, sid, rsum, cnt, par
        # the same columns as memoryviews: indexing one gives a Python number without a numpy scalar
        self._views = tuple(np.ascontiguousarray(c).data for c in (ptr, sid, rsum, cnt, par))
        self._packed = len(ptr) - 1
        self._len = self._packed
        self._own: dict[int, list[Record]] = {}

    @staticmethod
    def valid(
        ptr: np.ndarray, sid: np.ndarray, rsum: np.ndarray, cnt: np.ndarray, par: np.ndarray, n_sources: int
    ) -> bool:
        """Whether the columns describe records `take` may hold (a file's, checked before it is trusted)."""
        n = len(sid)
        if not (ptr.ndim == 1 and len(ptr) >= 1 and len(rsum) == len(cnt) == len(par) == n):
            return False
        if int(ptr[0]) != 0 or int(ptr[-1]) != n or bool((np.diff(ptr) < 0).any()):
            return False
        if n and (int(sid.min()) < 0 or int(sid.max()) >= n_sources or int(par.min()) < -1):
            return False
        return not (n and not bool(np.isfinite(rsum).all()))

    def __len__(self) -> int:
        return self._len

    def __getstate__(self) -> tuple[Any, ...]:
        """What a copy or a pickle keeps: the columns and the delta (the memoryviews are rebuilt from them)."""
        return (self._ptr, self._sid, self._sum, self._cnt, self._par), self._own, self._len

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        columns, own, length = state
        self.take(*columns)
        self._own, self._len = own, length

    def __getitem__(self, e: int) -> list[Record]:
        got = self._own.get(e)
        if got is not None:
            return got
        if not 0 <= e < self._packed:
            if 0 <= e < self._len:
                return []
            raise IndexError(e)
        ptr, sid, rsum, cnt, par = self._views
        a, b = ptr[e], ptr[e + 1]
        if b - a == 1:  # the common case: one source
            p = par[a]
            return [[sid[a], rsum[a], cnt[a], None if p < 0 else p]]
        if a == b:
            return []
        return _records(sid[a:b].tolist(), rsum[a:b].tolist(), cnt[a:b].tolist(), par[a:b].tolist())

    def own(self, e: int) -> list[Record]:
        """Edge `e`'s records as the list a writer changes in place (kept in the delta from now on)."""
        got = self._own.get(e)
        if got is None:
            got = self._own[e] = self[e]
        return got

    def __setitem__(self, e: int, records: list[Record]) -> None:
        if not 0 <= e < self._len:
            raise IndexError(e)
        self._own[e] = records

    def append(self, records: list[Record]) -> None:
        self._own[self._len] = records
        self._len += 1

    def extend(self, per_edge: list[list[Record]]) -> None:
        """Append edges' records; onto an empty table they are packed (a load from the rows)."""
        if self._len == 0:
            self.take(*pack(per_edge))
            return
        for records in per_edge:
            self.append(records)

    def __delitem__(self, cut: slice) -> None:
        """`del attrs[keep:]`: forget the edges from `keep` on (the only deletion a context makes)."""
        if not isinstance(cut, slice) or cut.step is not None or cut.stop is not None:
            raise TypeError("only `del attrs[keep:]` is supported")
        keep = max(0, min(self._len, cut.start or 0))
        for e in [e for e in self._own if e >= keep]:
            del self._own[e]
        if keep < self._packed:
            self._ptr = self._ptr[: keep + 1]
            self._views = (self._ptr.data, *self._views[1:])
            self._packed = keep
        self._len = keep

    def __iter__(self) -> Iterator[list[Record]]:
        for _e, records in self.span(0, self._len):
            yield records

    def span(self, first: int, last: int) -> Iterator[tuple[int, list[Record]]]:
        """(edge id, records) for the edges [first, last), read a slice of the columns at a time."""
        own = self._own
        last = min(last, self._len)
        for start in range(max(first, 0), last, CHUNK):
            stop = min(start + CHUNK, last)
            packed_stop = min(stop, self._packed)
            if start < packed_stop:
                bounds = self._ptr[start : packed_stop + 1].tolist()
                a, b = bounds[0], bounds[-1]
                sid, rsum = self._sid[a:b].tolist(), self._sum[a:b].tolist()
                cnt, par = self._cnt[a:b].tolist(), self._par[a:b].tolist()
                for i, e in enumerate(range(start, packed_stop)):
                    got = own.get(e)
                    if got is not None:
                        yield e, got
                        continue
                    lo, hi = bounds[i] - a, bounds[i + 1] - a
                    yield e, _records(sid[lo:hi], rsum[lo:hi], cnt[lo:hi], par[lo:hi])
            for e in range(max(start, packed_stop), stop):
                yield e, own.get(e) or []

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attributions):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        if isinstance(other, list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def cover(self, first: int, last: int, skip: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Per edge of [first, last): the summed count and the summed weight of its records from every source
        but `skip`, each sum taken in record order from 0.0 as a loop over the records takes it (so the
        floats are the loop's to the bit). Vectorized over the edges one record position at a time."""
        last = min(last, self._len)
        first = max(0, first)
        n = max(0, last - first)
        counts = np.zeros(n, dtype=np.int64)
        sums = np.zeros(n, dtype=np.float64)
        p = min(last, self._packed)
        if first < p:
            ptr = self._ptr[first : p + 1]
            a, b = int(ptr[0]), int(ptr[-1])
            lens = np.diff(ptr)
            edge = np.repeat(np.arange(p - first, dtype=np.int64), lens)
            rank = np.arange(b - a, dtype=np.int64) - np.repeat(ptr[:-1] - a, lens)
            rsum = self._sum[a:b]
            rcnt = self._cnt[a:b]
            if skip is not None:
                kept = self._sid[a:b] != skip
                rsum = np.where(kept, rsum, 0.0)  # adding +0.0 to a sum that started at +0.0 changes no bit
                rcnt = np.where(kept, rcnt, 0)
            order = np.argsort(rank, kind="stable")
            bounds = np.zeros(int(rank.max()) + 2 if len(rank) else 1, dtype=np.int64)
            np.cumsum(np.bincount(rank), out=bounds[1:])
            for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                at = order[lo:hi]
                where = edge[at]  # each edge once per position: the adds are elementwise
                sums[where] += rsum[at]
                counts[where] += rcnt[at]
        for e, records in self._own.items():
            if first <= e < last:
                c, s = 0, 0.0
                for rec in records:
                    if rec[0] != skip:
                        c += rec[2]
                        s += rec[1]
                counts[e - first], sums[e - first] = c, s
        return counts, sums

    def n_records(self) -> int:
        packed = int(self._ptr[self._packed])
        for e, records in self._own.items():
            if e < self._packed:
                packed -= int(self._ptr[e + 1] - self._ptr[e])
            packed += len(records)
        return packed

    def delta(self) -> int:
        """How many edges hold their records as lists (written since the columns were taken)."""
        return len(self._own)

    def packed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All edges' records as five columns (the delta merged in), without changing what is held."""
        n, p = self._len, self._packed
        ptr = self._ptr[: p + 1]
        base = int(ptr[p])
        cols = (self._sid[:base], self._sum[:base], self._cnt[:base], self._par[:base])
        if not self._own and n == p:
            return (ptr, *cols)
        own_e = np.array(sorted(self._own), dtype=np.int64)
        own_recs = [self._own[e] for e in own_e.tolist()]
        counts = np.zeros(n, dtype=np.int64)
        counts[:p] = np.diff(ptr)
        lens = np.array([len(r) for r in own_recs], dtype=np.int64)
        counts[own_e] = lens
        new_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=new_ptr[1:])
        total = int(new_ptr[-1])
        out = [np.empty(total, dtype=c.dtype) for c in cols]
        rec_edge = owners(ptr)
        overridden = np.zeros(max(n, 1), dtype=bool)
        overridden[own_e] = True
        keep = ~overridden[rec_edge]
        kept_edge = rec_edge[keep]
        at = new_ptr[kept_edge] + (np.arange(base, dtype=np.int64)[keep] - ptr[kept_edge])
        for o, c in zip(out, cols, strict=True):
            o[at] = c[keep]
        flat = [rec for records in own_recs for rec in records]
        if flat:
            starts = np.repeat(new_ptr[own_e], lens)
            within = np.arange(len(flat), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
            at = starts + within
            _p, sid, rsum, cnt, par = pack([flat])
            for o, c in zip(out, (sid, rsum, cnt, par), strict=True):
                o[at] = c
        return new_ptr, out[0], out[1], out[2], out[3]

    def fold(self) -> None:
        """Pack the delta into the columns (a compaction, or after an image is written)."""
        if self._own or self._len != self._packed:
            self.take(*self.packed())

    def record_sources(self) -> tuple[np.ndarray, np.ndarray]:
        """(edge id, source id) of every record, in edge order: what the source → edges index is built from."""
        ptr, sid, _s, _c, _p = self.packed()
        return owners(ptr), sid


def _csr_ids(ptr: np.ndarray, ids: np.ndarray, i: int) -> list[int]:
    return ids[int(ptr[i]) : int(ptr[i + 1])].tolist()


class SourceEdges:
    """Source id → the set of edge ids its records attribute: a CSR (keys ascending) for the loaded
    edges, and the sets a write touched (materialized from the CSR on first use, None once removed)."""

    __slots__ = ("_keys", "_ptr", "_ids", "_slot", "_own")

    def __init__(self) -> None:
        self.take(np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32))

    def take(self, keys: np.ndarray, ptr: np.ndarray, ids: np.ndarray) -> None:
        self._keys, self._ptr, self._ids = keys, ptr, ids
        self._slot: dict[int, int] = dict(zip(keys.tolist(), range(len(keys)), strict=True))
        self._own: dict[int, set[int] | None] = {}

    @staticmethod
    def valid(keys: np.ndarray, ptr: np.ndarray, ids: np.ndarray, n_sources: int, n_edges: int) -> bool:
        if not (len(ptr) == len(keys) + 1 and int(ptr[0]) == 0 and int(ptr[-1]) == len(ids)):
            return False
        if bool((np.diff(ptr) < 0).any()) or (len(keys) and bool((np.diff(keys) <= 0).any())):
            return False
        if len(keys) and (int(keys[0]) < 0 or int(keys[-1]) >= n_sources):
            return False
        return not (len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= n_edges))

    def get(self, sid: int, default: Any = None) -> Any:
        if sid in self._own:
            got = self._own[sid]
            return default if got is None else got
        slot = self._slot.get(sid)
        if slot is None:
            return default
        got = self._own[sid] = set(_csr_ids(self._ptr, self._ids, slot))
        return got

    def __getitem__(self, sid: int) -> set[int]:
        got = self.get(sid)
        if got is None:
            raise KeyError(sid)
        return got

    def __setitem__(self, sid: int, edges: set[int]) -> None:
        self._own[sid] = edges

    def setdefault(self, sid: int, default: set[int]) -> set[int]:
        got = self.get(sid)
        if got is None:
            self._own[sid] = got = default
        return got

    def pop(self, sid: int, default: Any = None) -> Any:
        got = self.get(sid)
        if got is None:
            return default
        self._own[sid] = None
        return got

    def __contains__(self, sid: object) -> bool:
        if sid in self._own:
            return self._own[sid] is not None
        return sid in self._slot

    def keys(self) -> list[int]:
        mine = [k for k in self._keys.tolist() if k not in self._own]
        mine.extend(k for k, v in self._own.items() if v is not None)
        return sorted(mine)

    def items(self) -> Iterator[tuple[int, set[int]]]:
        for k in self.keys():
            got = self._own.get(k)
            yield k, got if got is not None else set(_csr_ids(self._ptr, self._ids, self._slot[k]))

    def update(self, other: Mapping[int, set[int]]) -> None:
        for k, v in other.items():
            self._own[k] = v

    def __len__(self) -> int:
        return len(self.keys())

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SourceEdges | dict):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def source_csr(edge_of_record: np.ndarray, source_of_record: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, ptr, ids): per source id present, ascending, the edge ids of its records in ascending order."""
    src = np.asarray(source_of_record, dtype=np.int64)
    keys = np.unique(src)
    ptr, ids = grouped(np.searchsorted(keys, src), np.asarray(edge_of_record, dtype=np.int64), len(keys))
    return keys.astype(np.int32), ptr, ids
