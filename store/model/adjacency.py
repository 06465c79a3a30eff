"""Edge ids by group — a concept's outgoing edges, its incoming edges, a label's edges — packed, with a delta.

A loaded context held these as one Python list per concept and per label, every id an int object:
building them was the largest single step of a load from the edge image (0.7 s at 300k paragraphs),
and they were rebuilt in every process. Here the loaded groups are a CSR — `ptr` (int64) and `ids`
(int32), copied from the edge image's columns or grouped from the rows in one vectorized pass —
in `array` buffers, which no reference count touches, so forked workers keep sharing their pages.
The groups created or changed since are lists of their own in `_own`.

`adj[g]` gives the group as a list of edge ids in ascending order. For a packed group that list is
built on each read, except for a large group (`HOT` ids or more: a hub, read by many requests and
long to build), which is built once and kept. So **a writer takes `adj.own(g)`**, the group's list
from then on; `append` adds a group, `grow(n)` n empty ones, `pop` removes the last one. `fold` packs the delta back (a
compaction does).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import numpy as np

HOT = 512  # a packed group of at least this many edge ids is kept as a list once read


class Adjacency:
    """Per group, its edge ids: a CSR for the loaded groups, lists for the groups written since."""

    __slots__ = ("_ptr", "_ids", "_packed", "_own", "_len")
    __hash__ = None  # type: ignore[assignment]  # compared by content

    def __init__(self) -> None:
        self._ptr = array("q", [0])
        self._ids = array("i")
        self._packed = 0  # groups below this index without an `_own` list are read from the CSR
        self._own: dict[int, list[int]] = {}
        self._len = 0

    def take(self, ptr: np.ndarray, ids: np.ndarray) -> None:
        """Hold exactly the groups of this CSR (validated by `valid`); anything held before is dropped."""
        self._ptr = array("q", np.ascontiguousarray(ptr, dtype=np.int64).tobytes())
        self._ids = array("i", np.ascontiguousarray(ids, dtype=np.int32).tobytes())
        self._packed = self._len = len(ptr) - 1
        self._own = {}

    @staticmethod
    def valid(ptr: np.ndarray, ids: np.ndarray, n_groups: int, n_edges: int) -> bool:
        """Whether a CSR read from a file can be trusted: one pointer per group and one more, starting at
        0, never decreasing, ending at the id count, every id an edge, each group ascending."""
        if ptr.ndim != 1 or ids.ndim != 1 or len(ptr) != n_groups + 1 or int(ptr[0]) != 0:
            return False
        if int(ptr[-1]) != len(ids) or (n_groups and bool((np.diff(ptr) < 0).any())):
            return False
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= n_edges):
            return False
        rising = np.diff(ids.astype(np.int64)) > 0  # within a group each id exceeds the one before it
        starts = ptr[1:-1]
        rising[starts[(starts > 0) & (starts < len(ids))] - 1] = True  # a group's first id starts afresh
        return bool(rising.all())

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, g: int) -> list[int]:
        own = self._own.get(g)
        if own is not None:
            return own
        if not 0 <= g < self._packed:
            if self._packed <= g < self._len:
                return []  # a group added empty and not written since
            raise IndexError(g)
        a, b = self._ptr[g], self._ptr[g + 1]
        found = self._ids[a:b].tolist()
        if b - a >= HOT:
            self._own[g] = found
        return found

    def degree(self, g: int) -> int:
        """`len(adj[g])` without building the list."""
        own = self._own.get(g)
        if own is not None:
            return len(own)
        if not 0 <= g < self._packed:
            if self._packed <= g < self._len:
                return 0
            raise IndexError(g)
        return self._ptr[g + 1] - self._ptr[g]

    def own(self, g: int) -> list[int]:
        """Group `g`'s list, kept: what a writer changes."""
        found = self[g]
        self._own[g] = found
        return found

    def append(self, ids: list[int]) -> None:
        """A new last group."""
        self._own[self._len] = ids
        self._len += 1

    def grow(self, n: int) -> None:
        """`append([])` n times (empty groups are built when read, kept once owned)."""
        self._len += n

    def pop(self) -> None:
        """Forget the last group."""
        if not self._len:
            raise IndexError("pop from an empty adjacency")
        self._len -= 1
        self._own.pop(self._len, None)
        self._packed = min(self._packed, self._len)

    def __iter__(self) -> Iterator[list[int]]:
        for g in range(self._len):
            yield self[g]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (Adjacency, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == list(b) for a, b in zip(self, other, strict=True))

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """The CSR of every group as held now, the delta included."""
        sizes = np.fromiter((self.degree(g) for g in range(self._len)), dtype=np.int64, count=self._len)
        ptr = np.zeros(self._len + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        ids = np.empty(int(ptr[-1]), dtype=np.int32)
        packed = np.frombuffer(self._ids, dtype=np.int32) if len(self._ids) else np.zeros(0, np.int32)
        for g in range(self._len):
            own = self._own.get(g)
            a, b = int(ptr[g]), int(ptr[g + 1])
            if own is not None:
                ids[a:b] = own
            elif b > a:
                ids[a:b] = packed[self._ptr[g] : self._ptr[g + 1]]
        return ptr, ids

    def fold(self) -> None:
        """Pack the delta into the CSR (after a compaction, which builds every group as a list)."""
        self.take(*self.packed())
