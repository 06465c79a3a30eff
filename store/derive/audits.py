"""The audits of a context: what every audit shares (deadlines, floors, fingerprints) and the drift audits.

Everything under the audits reads one in-memory context and writes nothing (read-only, never verdicts):
the twin sweeps are in `twins.py`, the consolidation candidates in `consolidation.py`. Orders and
tie-breaks follow the wire contract: ids are the dense intern-order ids the context keeps, names sort
as Python strings (UTF-8 byte order), sums are the f64 values the context holds.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from taguru_server.store.model.context import CONCEPT, LABEL, UNSOURCED_EXPORT, Context, _saturate

DEFAULT_FLOOR = 0.6
CHECK_EVERY = 512  # entries between deadline checks


class Expired(Exception):
    """The request's budget ran out in the middle of a sweep."""


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise Expired


def clamp01(value: float | None, default: float = DEFAULT_FLOOR) -> float:
    v = default if value is None else float(value)
    return min(max(v, 0.0), 1.0)


# ----- drift -------------------------------------------------------------------------------


def _sort_key(ctx: Context, weight: float, e: int) -> tuple[float, str, str, str]:
    return (
        -abs(weight),
        ctx.concepts[ctx.edges.subject[e]],
        ctx.labels[ctx.edges.label[e]],
        ctx.concepts[ctx.edges.object[e]],
    )


@attrs.frozen
class Unsourced:
    """An edge whose attributions do not cover its count: what is left of its weight and of its count."""

    edge: int
    weight: float
    count: int


def unsourced(
    ctx: Context, floor: float, limit: int, after: dict[str, Any] | None, deadline: float | None
) -> tuple[int, list[Unsourced]]:
    """(total past the floor, one page) of edges whose attributions do not cover their count."""
    export_sid = ctx.source_id.get(UNSOURCED_EXPORT)
    found: list[tuple[tuple[float, str, str, str], int, float, int]] = []
    bar = abs(floor)
    for e, records in ctx.edges.attributions.span(0, len(ctx.edges.subject)):
        if e % 4096 == 0:
            _check(deadline)
        cnt = ctx.edges.count[e]
        if cnt <= 0:
            continue
        covered = 0
        covered_sum = 0.0
        for sid, rsum, rcount, _p in records:
            if rcount > 0 and sid != export_sid:
                covered += rcount
                covered_sum = _saturate(covered_sum + rsum)
        rest = cnt - covered
        if rest <= 0:
            continue
        weight = _saturate(ctx.edges.weight[e] - covered_sum)
        if abs(weight) >= bar:
            found.append((_sort_key(ctx, weight, e), e, weight, rest))
    total = len(found)
    if after is not None:
        bound = (-abs(float(after["weight"])), after["subject"], after["label"], after["object"])
        found = [f for f in found if f[0] > bound]
    found.sort(key=lambda f: f[0])
    page = found[:limit]
    return total, [Unsourced(e, w, rest) for _k, e, w, rest in page]


def live_concepts(ctx: Context) -> set[int]:
    out: set[int] = set()
    for e in range(len(ctx.edges.subject)):
        if ctx.edges.count[e] > 0:
            out.add(ctx.edges.subject[e])
            out.add(ctx.edges.object[e])
    return out


def live_labels(ctx: Context) -> set[int]:
    return {ctx.edges.label[e] for e in range(len(ctx.edges.subject)) if ctx.edges.count[e] > 0}


def dead_aliases(ctx: Context) -> tuple[dict[str, str], dict[str, str]]:
    """({alias: canonical} of concept aliases, of label aliases) whose canonical is on no live edge."""
    concepts, labels = live_concepts(ctx), live_labels(ctx)
    out: list[dict[str, str]] = []
    for kind, live, names in ((CONCEPT, concepts, ctx.concepts), (LABEL, labels, ctx.labels)):
        table = ctx.aliases[kind]
        out.append({alias: names[table[alias]] for alias in sorted(table) if table[alias] not in live})
    return out[0], out[1]
