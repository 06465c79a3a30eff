"""The context's associations as one table: a row per (subject, label, object), addressed by edge id.

Edge ids are positions, assigned in order of first assertion and never reused (a retracted edge
keeps its row with a zero count). The columns are plain lists today, read in place by the lanes and
the persistence layer (`table.subject[e]`, `numpy.asarray(table.weight)`); they are reached only
through this object, so a columnar layout (arrays, a mapped file) changes this module and the few
places that build a table, not every reader.
"""

from __future__ import annotations

from typing import Any

Triple = tuple[int, int, int]


class EdgeTable:
    """Edge columns by edge id: concept ids of subject and object, label id, summed weight,
    assertion count, and the attribution records `[source_id, sum, count, paragraph|None]`."""

    __slots__ = ("subject", "label", "object", "weight", "count", "attributions", "by_triple")

    def __init__(self) -> None:
        self.subject: list[int] = []
        self.label: list[int] = []
        self.object: list[int] = []
        self.weight: list[float] = []
        self.count: list[int] = []
        self.attributions: list[list[list[Any]]] = []
        self.by_triple: dict[Triple, int] = {}

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

    def columns(self) -> tuple[list[int], list[int], list[int], list[float], list[int], list[list[list[Any]]]]:
        """The six columns in their order: subject, label, object, weight, count, attributions."""
        return self.subject, self.label, self.object, self.weight, self.count, self.attributions

    def triple(self, e: int) -> Triple:
        """(subject, label, object) ids of edge `e`."""
        return self.subject[e], self.label[e], self.object[e]
