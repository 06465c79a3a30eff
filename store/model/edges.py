"""The context's associations as one table: a row per (subject, label, object), addressed by edge id.

Edge ids are positions, assigned in order of first assertion and never reused (a retracted edge
keeps its row with a zero count). The columns are plain lists today, read in place by the lanes and
the persistence layer (`table.subject[e]`, `numpy.asarray(table.weight)`); they are reached only
through this object, so a columnar layout (arrays, a mapped file) changes this module and the few
places that build a table, not every reader.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from taguru_server.store.model.attributions import Attributions

Triple = tuple[int, int, int]


class TripleIndex:
    """(subject, label, object) ids → edge id: a sorted column of packed keys for the edges a load took (from
    the edge image, mapped, or built once from the columns), and a dict of the edges added since.

    A dict of 1.23M tuple keys took ~150 MB and ~0.6 s to fill at 300k paragraphs; the packed column takes
    12 bytes an edge and is shared by every process mapping the image. A key packs (s, l, o) as
    `(s·span_l + l)·span_o + o` over the spans (concept and label counts) of the load; a triple outside the
    spans was not among the loaded edges. An edge of the column that is forgotten (`pop`) is remembered as
    gone."""

    __slots__ = ("_keys", "_ids", "_span_l", "_span_o", "_span_s", "_extra", "_gone")

    def __init__(self) -> None:
        self._keys: np.ndarray | None = None  # packed keys, ascending
        self._ids: np.ndarray | None = None  # the edge id of each key
        self._span_s = self._span_l = self._span_o = 0
        self._extra: dict[Triple, int] = {}
        self._gone: set[int] = set()

    @staticmethod
    def packable(n_concepts: int, n_labels: int) -> bool:
        """Whether every key over these spans fits a signed 64-bit integer."""
        return n_concepts * n_concepts * max(n_labels, 1) < 2**62

    @staticmethod
    def packed(subject: np.ndarray, label: np.ndarray, obj: np.ndarray, n_concepts: int, n_labels: int) -> np.ndarray:
        """The packed keys of the given columns (see the class)."""
        s, lab, o = (np.asarray(c, dtype=np.int64) for c in (subject, label, obj))
        return (s * n_labels + lab) * n_concepts + o

    def take(self, keys: np.ndarray, ids: np.ndarray, n_concepts: int, n_labels: int) -> None:
        """Hold the sorted packed `keys` and their edge `ids` (as they are: e.g. mapped) as the loaded edges."""
        self._keys, self._ids = keys, ids
        self._span_s = self._span_o = n_concepts
        self._span_l = n_labels
        self._extra = {}
        self._gone = set()

    def _base(self, key: Triple) -> int | None:
        keys = self._keys
        if keys is None:
            return None
        s, lab, o = key
        if not (0 <= s < self._span_s and 0 <= lab < self._span_l and 0 <= o < self._span_o):
            return None
        k = (s * self._span_l + lab) * self._span_o + o
        i = int(keys.searchsorted(k))
        if i < len(keys) and int(keys[i]) == k:
            e = int(self._ids[i])  # type: ignore[index]
            return None if e in self._gone else e
        return None

    def get(self, key: Triple, default: Any = None) -> Any:
        e = self._extra.get(key)
        if e is not None:
            return e
        e = self._base(key)
        return default if e is None else e

    def __getitem__(self, key: Triple) -> int:
        e = self.get(key)
        if e is None:
            raise KeyError(key)
        return int(e)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.get(key) is not None

    def __setitem__(self, key: Triple, e: int) -> None:
        self._extra[key] = e

    def pop(self, key: Triple, default: Any = None) -> Any:
        e = self._extra.pop(key, None)
        if e is not None:
            return e
        e = self._base(key)
        if e is None:
            return default
        self._gone.add(e)
        return e

    def update(self, pairs: Iterable[tuple[Triple, int]]) -> None:
        self._extra.update(pairs)

    def items(self) -> Iterator[tuple[Triple, int]]:
        """Every (triple, edge id) held: the loaded edges in key order, then the added ones."""
        if self._keys is not None and self._ids is not None:
            span_l, span_o = self._span_l, self._span_o
            gone, extra = self._gone, self._extra
            for k, e in zip(self._keys.tolist(), self._ids.tolist(), strict=True):
                if e in gone:
                    continue
                so, o = divmod(k, span_o)
                s, lab = divmod(so, span_l)
                if (s, lab, o) not in extra:
                    yield (s, lab, o), e
        yield from self._extra.items()

    def keys(self) -> Iterator[Triple]:
        return (key for key, _e in self.items())

    def __iter__(self) -> Iterator[Triple]:
        return self.keys()

    def __len__(self) -> int:
        return sum(1 for _ in self.items())


class EdgeTable:
    """Edge columns by edge id: concept ids of subject and object, label id, summed weight,
    assertion count, and the attribution records `[source_id, sum, count, paragraph|None]`."""

    __slots__ = ("subject", "label", "object", "weight", "count", "attributions", "by_triple")

    def __init__(self) -> None:
        # numeric columns in `array` buffers: 8 bytes an edge, copied from the edge image in one call, and
        # no reference count in their pages (forked workers keep sharing them)
        self.subject: array[int] = array("q")
        self.label: array[int] = array("q")
        self.object: array[int] = array("q")
        self.weight: array[float] = array("d")
        self.count: array[int] = array("q")
        self.attributions = Attributions()
        self.by_triple = TripleIndex()

    def __len__(self) -> int:
        return len(self.subject)

    def find(self, s: int, lab: int, o: int) -> int | None:
        """The id of the edge (s, lab, o), or None when it was never asserted."""
        return self.by_triple.get((s, lab, o))

    def row(self, s: int, lab: int, o: int) -> int:
        """The id of the edge (s, lab, o), appending an empty row (weight 0, count 0) the first time."""
        key = (s, lab, o)
        e = self.by_triple.get(key)
        if e is None:
            e = len(self.subject)
            self.by_triple[key] = e
            self.subject.append(s)
            self.label.append(lab)
            self.object.append(o)
            self.weight.append(0.0)
            self.count.append(0)
            self.attributions.append([])
        return e

    def columns(self) -> tuple[array[int], array[int], array[int], array[float], array[int], Attributions]:
        """The six columns in their order: subject, label, object, weight, count, attributions."""
        return self.subject, self.label, self.object, self.weight, self.count, self.attributions

    def index_triples(self, n_concepts: int, n_labels: int) -> None:
        """Index the loaded edges' triples from the columns (a load from the rows; the edge image maps its own)."""
        n = len(self.subject)
        if not TripleIndex.packable(n_concepts, n_labels):
            self.by_triple.update(zip(zip(self.subject, self.label, self.object, strict=True), range(n), strict=True))
            return
        keys = TripleIndex.packed(
            np.asarray(self.subject), np.asarray(self.label), np.asarray(self.object), n_concepts, n_labels
        )
        order = np.argsort(keys, kind="stable")
        self.by_triple.take(keys[order], order.astype(np.int32), n_concepts, n_labels)

    def triple(self, e: int) -> Triple:
        """(subject, label, object) ids of edge `e`."""
        return self.subject[e], self.label[e], self.object[e]
