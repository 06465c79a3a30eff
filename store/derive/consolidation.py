"""The consolidation audit (docs/audits.md, "Consolidation"): merge, contradiction and staleness candidates."""

from __future__ import annotations

import struct

import attrs

from taguru_server.store.derive.audits import DEFAULT_FLOOR, _check
from taguru_server.store.derive.twins import Twins, semantic_pairs, sweep
from taguru_server.store.model.context import CONCEPT, Context
from taguru_server.store.model.schema_check import hidden_label
from taguru_server.store.read.gloss import concept_types

DETECTOR = "consolidation/1"
CHECKS = ("merge", "contradiction", "staleness")

FNV_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFF_FFFF_FFFF_FFFF


# ----- the audit's typed result ---------------------------------------------------------------


@attrs.frozen
class Fact:
    """A neighbour fact of a concept: an edge out of it or into it, by label, with the other end."""

    direction: str  # "out" or "in"
    label: str
    other: str


@attrs.frozen
class MergeCandidate:
    """Two concepts that may be one: name similarity, each side's asserted types (a schema installed), the
    overlap of their neighbour facts, its evidence."""

    a: str
    b: str
    tier: str  # "lexical" or "semantic"
    name_score: float
    types_a: tuple[str, ...]
    types_b: tuple[str, ...]
    overlap: float
    shared_total: int
    only_a_total: int
    only_b_total: int
    shared: tuple[Fact, ...]  # each list at most the evidence cap long
    only_a: tuple[Fact, ...]
    only_b: tuple[Fact, ...]
    fingerprint: str


@attrs.frozen
class MergeSection:
    """The merge check: how many pairs were ranked, the first `limit`, the semantic tier's note."""

    total: int
    candidates: tuple[MergeCandidate, ...]
    semantic_note: str | None


@attrs.frozen
class ObjectRow:
    """One object of a (subject, label) with several: its weight, count, sources, latest dated source."""

    object: str
    weight: float
    count: int
    sources: tuple[str, ...]
    latest: int | None


@attrs.frozen
class ObjectsCandidate:
    """A (subject, label) with several live objects, and how functional the label tends to be."""

    subject: str
    label: str
    functional_tendency: float
    objects: tuple[ObjectRow, ...]
    fingerprint: str


@attrs.frozen
class ContestedCandidate:
    """An edge that some sources support and others dispute."""

    subject: str
    label: str
    object: str
    weight: float
    count: int
    supporting_sources: tuple[str, ...]
    disputing_sources: tuple[str, ...]
    fingerprint: str


@attrs.frozen
class ContradictionSection:
    """The contradiction check: how many candidates there are, the first `limit` (objects, then contested)."""

    total: int
    candidates: tuple[ObjectsCandidate | ContestedCandidate, ...]


@attrs.frozen
class StaleCandidate:
    """An edge whose latest dated source lags its subject's neighbourhood by `gap` seconds."""

    subject: str
    label: str
    object: str
    latest: int
    neighborhood_latest: int
    gap: int
    sources: tuple[str, ...]
    fingerprint: str


@attrs.frozen
class StalenessSection:
    """The staleness check: how many edges lag, how many live edges have no dated source, the first `limit`."""

    total: int
    undatable: int
    candidates: tuple[StaleCandidate, ...]


@attrs.frozen
class Consolidation:
    """The consolidation audit's result: the requested sections (None when not requested)."""

    merge: MergeSection | None = None
    contradiction: ContradictionSection | None = None
    staleness: StalenessSection | None = None


# ----- fingerprints ------------------------------------------------------------------------


def fold(d: int, data: bytes) -> int:
    for byte in data:
        d = ((d ^ byte) * FNV_PRIME) & MASK64
    return d


def field(d: int, s: str) -> int:
    return fold(fold(d, s.encode("utf-8")), b"\0")


def fields(d: int, *strings: str) -> int:
    """`field` folded over the strings in turn."""
    for s in strings:
        d = field(d, s)
    return d


def u64le(n: int) -> bytes:
    return struct.pack("<Q", n & MASK64)


def f64le(x: float) -> bytes:
    return struct.pack("<d", x)


def hex16(d: int) -> str:
    return f"{d:016x}"


def effective_times(ctx: Context) -> dict[int, int]:
    """Source id -> `date ?? stored_at` of its passage, for every datable source."""
    out: dict[int, int] = {}
    for sid, passage in ctx.passages.items():
        when = passage.date if passage.date is not None else passage.stored_at
        if when is not None:
            out[sid] = when
    return out


def _neighbours(ctx: Context, x: int, hidden: int | None = None) -> set[tuple[int, int, int]]:
    """A concept's live neighbour facts (direction, label, other end), the `hidden` label's left out."""
    out: set[tuple[int, int, int]] = set()
    for e in ctx.out_edges[x]:
        if ctx.edges.count[e] > 0 and ctx.edges.label[e] != hidden:
            out.add((0, ctx.edges.label[e], ctx.edges.object[e]))
            if ctx.edges.object[e] == x:
                out.add((1, ctx.edges.label[e], x))
    for e in ctx.in_edges[x]:
        if ctx.edges.count[e] > 0 and ctx.edges.label[e] != hidden:
            out.add((1, ctx.edges.label[e], ctx.edges.subject[e]))
    return out


def _merge_candidate(
    ctx: Context, a: str, b: str, tier: str, score: float, cap: int, hidden: int | None
) -> MergeCandidate:
    ia, ib = ctx.concept_id.get(a), ctx.concept_id.get(b)
    na = _neighbours(ctx, ia, hidden) if ia is not None else set()
    nb = _neighbours(ctx, ib, hidden) if ib is not None else set()
    shared, only_a, only_b = sorted(na & nb), sorted(na - nb), sorted(nb - na)
    union = len(shared) + len(only_a) + len(only_b)
    overlap = len(shared) / union if union else 0.0

    def fact(t: tuple[int, int, int]) -> Fact:
        return Fact("out" if t[0] == 0 else "in", ctx.labels[t[1]], ctx.concepts[t[2]])

    def text(t: tuple[int, int, int]) -> str:
        return f"{t[0]}|{ctx.labels[t[1]]}|{ctx.concepts[t[2]]}"

    first, second, f_only, s_only = (a, b, only_a, only_b) if a <= b else (b, a, only_b, only_a)
    d = fields(FNV_BASIS, "merge", first, second)
    for tag, facts in (("s", shared), ("f", f_only), ("g", s_only)):
        d = field(d, tag)
        for s in sorted(text(t) for t in facts):
            d = field(d, s)
    return MergeCandidate(
        a,
        b,
        tier,
        score,
        () if ia is None else concept_types(ctx, ia),
        () if ib is None else concept_types(ctx, ib),
        overlap,
        len(shared),
        len(only_a),
        len(only_b),
        tuple(fact(t) for t in shared[:cap]),
        tuple(fact(t) for t in only_a[:cap]),
        tuple(fact(t) for t in only_b[:cap]),
        hex16(d),
    )


def merge_section(ctx: Context, found: Twins, limit: int, cap: int, deadline: float | None) -> MergeSection:
    pairs: list[tuple[str, str, str, float]] = [
        (ctx.concepts[a], ctx.concepts[b], "lexical", d) for a, b, d in found.lexical[CONCEPT]
    ]
    pairs.extend((a, b, "semantic", float(score)) for a, b, score in semantic_pairs(ctx, CONCEPT, found))
    # every pair is ranked on its overlap; only the first `limit` get their evidence lists and fingerprint
    neighbours: dict[str, set[tuple[int, int, int]]] = {}
    hidden = hidden_label(ctx)  # a schema leaves the type assertions out of the evidence

    def live(name: str) -> set[tuple[int, int, int]]:
        got = neighbours.get(name)
        if got is None:
            x = ctx.concept_id.get(name)
            got = neighbours[name] = _neighbours(ctx, x, hidden) if x is not None else set()
        return got

    seen: set[tuple[str, str]] = set()
    ranked: list[tuple[tuple[float, float, str, str], str]] = []
    for i, (a, b, tier, score) in enumerate(pairs):
        key = (a, b) if a <= b else (b, a)
        if key in seen:
            continue
        seen.add(key)
        if i % 4096 == 0:
            _check(deadline)
        na, nb = live(a), live(b)
        shared = len(na & nb)
        union = len(na) + len(nb) - shared
        ranked.append(((-(shared / union if union else 0.0), -score, a, b), tier))
    ranked.sort()
    top = tuple(_merge_candidate(ctx, k[2], k[3], tier, -k[1], cap, hidden) for k, tier in ranked[:limit])
    return MergeSection(len(ranked), top, found.note)


def _objects_candidate(
    ctx: Context, subject: int, label: int, edges: list[int], tendency: float, times: dict[int, int]
) -> ObjectsCandidate:
    rows = []
    for e in edges:
        records = [rec for rec in ctx.edges.attributions[e] if rec[1] != 0.0]
        dated = [times[rec[0]] for rec in records if rec[0] in times]
        rows.append(
            ObjectRow(
                ctx.concepts[ctx.edges.object[e]],
                ctx.weight(e),
                ctx.edges.count[e],
                tuple(ctx.sources[rec[0]] for rec in records),
                max(dated) if dated else None,
            )
        )
    s_name, l_name = ctx.concepts[subject], ctx.labels[label]
    d = fields(FNV_BASIS, "objects", s_name, l_name)
    for row in sorted(rows, key=lambda r: r.object):
        d = field(d, row.object)
        d = fold(d, u64le(row.count))
        d = fold(d, f64le(row.weight))
        d = fields(d, *sorted(row.sources))
    return ObjectsCandidate(s_name, l_name, tendency, tuple(rows), hex16(d))


def _contested_candidate(ctx: Context, e: int) -> ContestedCandidate | None:
    records = ctx.edges.attributions[e]
    supporting = [ctx.sources[r[0]] for r in records if r[1] > 0.0]
    disputing = [ctx.sources[r[0]] for r in records if r[1] < 0.0]
    if not supporting or not disputing:
        return None
    s, lab, o = ctx.concepts[ctx.edges.subject[e]], ctx.labels[ctx.edges.label[e]], ctx.concepts[ctx.edges.object[e]]
    d = fields(FNV_BASIS, "contested", s, lab, o)
    d = fold(fold(d, u64le(ctx.edges.count[e])), f64le(ctx.edges.weight[e]))
    d = fields(d, "+", *sorted(supporting), "-", *sorted(disputing))
    return ContestedCandidate(
        s, lab, o, ctx.weight(e), ctx.edges.count[e], tuple(supporting), tuple(disputing), hex16(d)
    )


def contradiction_section(
    ctx: Context, limit: int, times: dict[int, int], deadline: float | None
) -> ContradictionSection:
    groups: dict[tuple[int, int], list[int]] = {}
    contested: list[int] = []
    for e, records in ctx.edges.attributions.span(0, len(ctx.edges.subject)):
        if e % 4096 == 0:
            _check(deadline)
        if ctx.edges.count[e] <= 0:
            continue
        groups.setdefault((ctx.edges.subject[e], ctx.edges.label[e]), []).append(e)
        if any(r[1] > 0.0 for r in records) and any(r[1] < 0.0 for r in records):
            contested.append(e)
    one: dict[int, int] = {}
    some: dict[int, int] = {}
    for (_s, lab), edges in groups.items():
        some[lab] = some.get(lab, 0) + 1
        if len(edges) == 1:
            one[lab] = one.get(lab, 0) + 1
    tendency = {lab: one.get(lab, 0) / n for lab, n in some.items()}
    objects = sorted(
        (-tendency[lab], ctx.labels[lab], ctx.concepts[s], s, lab)
        for (s, lab), edges in groups.items()
        if len(edges) >= 2
    )
    # only the candidates inside `limit` are rendered (rows, sources, fingerprint)
    shown: list[ObjectsCandidate | ContestedCandidate] = [
        _objects_candidate(ctx, s, lab, groups[(s, lab)], tendency[lab], times)
        for _t, _l, _s, s, lab in objects[:limit]
    ]
    shown += [c for c in map(lambda e: _contested_candidate(ctx, e), contested[: max(limit - len(shown), 0)]) if c]
    return ContradictionSection(len(objects) + len(contested), tuple(shown))


def staleness_section(
    ctx: Context, limit: int, floor_secs: int, times: dict[int, int], deadline: float | None
) -> StalenessSection:
    latest: dict[int, int] = {}
    undatable = 0
    neighbourhood: dict[int, int] = {}
    for e in range(len(ctx.edges.subject)):
        if e % 4096 == 0:
            _check(deadline)
        if ctx.edges.count[e] <= 0:
            continue
        dated = [times[r[0]] for r in ctx.edges.attributions[e] if r[0] in times]
        if not dated:
            undatable += 1
            continue
        latest[e] = max(dated)
        s = ctx.edges.subject[e]
        neighbourhood[s] = max(neighbourhood.get(s, latest[e]), latest[e])
    found: list[tuple[int, str, str, str, int]] = []
    for e, when in latest.items():
        gap = neighbourhood[ctx.edges.subject[e]] - when
        if gap <= 0 or gap < floor_secs:
            continue
        found.append(
            (
                -gap,
                ctx.concepts[ctx.edges.subject[e]],
                ctx.labels[ctx.edges.label[e]],
                ctx.concepts[ctx.edges.object[e]],
                e,
            )
        )
    found.sort()
    shown = []
    for negative, sn, ln, on, e in found[:limit]:  # only the candidates inside `limit` are rendered
        when, top = latest[e], neighbourhood[ctx.edges.subject[e]]
        d = fields(FNV_BASIS, "stale", sn, ln, on)
        d = fold(fold(d, u64le(when)), u64le(top))
        sources = tuple(ctx.sources[r[0]] for r in ctx.edges.attributions[e])
        shown.append(StaleCandidate(sn, ln, on, when, top, -negative, sources, hex16(d)))
    return StalenessSection(len(found), undatable, tuple(shown))


def consolidation(
    ctx: Context,
    checks: set[str],
    *,
    limit: int = 100,
    evidence_cap: int = 20,
    dice_floor: float = DEFAULT_FLOOR,
    cosine_floor: float = DEFAULT_FLOOR,
    floor_secs: int = 0,
    deadline: float | None = None,
    vectors: bool = False,
    twins: Twins | None = None,
) -> Consolidation:
    """The consolidation audit's result with the requested sections; raises Expired past the budget.

    `twins` is the concept sweep when the caller ran it already (off the event loop)."""
    merge = contradiction = staleness = None
    if "merge" in checks:
        if twins is None:
            twins = sweep(ctx, (CONCEPT,), dice_floor, cosine_floor, deadline, vectors)
        merge = merge_section(ctx, twins, limit, evidence_cap, deadline)
    times = effective_times(ctx) if checks & {"contradiction", "staleness"} else {}
    if "contradiction" in checks:
        contradiction = contradiction_section(ctx, limit, times, deadline)
    if "staleness" in checks:
        staleness = staleness_section(ctx, limit, floor_secs, times, deadline)
    return Consolidation(merge, contradiction, staleness)
