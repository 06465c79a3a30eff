"""The explain diagnostics (docs/explain.md): why a name did or did not resolve for a cue, and why a
source did or did not appear for a query.

Both rerun the real lanes (`resolve.resolve_matches`, `semantic.lexical`, `passages.searched`) with nothing
truncated, locate the target in what they produced, and name the first verdict that applies. The
provider-facing parts (embedding a cue or a query) stay with the caller, which hands in what it got:
the semantic candidates, the gloss lane's account, the vector lane's query.
"""

from __future__ import annotations

import attrs
import numpy as np

from taguru_server.store.model.context import CONCEPT, Context
from taguru_server.store.read.passages import NO_EMBEDDINGS
from taguru_server.store.read.resolve import ResolveMatch, resolve_matches
from taguru_server.store.read.semantic import CONFIDENT, SEMANTIC_KEEP
from taguru_server.store.read.vector_lane import sequential_dot

F32 = np.float32
NEAREST_SPELLINGS = 5
CONFIDENT_TEXT = f"the lexical tier was confident (best score ≥ {CONFIDENT})"


def four(x: float) -> str:
    """`{x:.4}`: the exact binary value rounded to 4 decimals, ties to even."""
    return f"{float(x):.4f}"


def four_f32(x: float) -> str:
    return four(float(F32(x)))


def namespace(kind: int) -> str:
    return "concept" if kind == CONCEPT else "label"


# ----- resolve ---------------------------------------------------------------------------


@attrs.frozen
class Vocabulary:
    """One read of the vocabulary: the expected name's membership, the floor, the cue's whole sweep."""

    membership: ResolveMatch | None
    floor: float
    sweep: list[ResolveMatch]
    nearest: list[ResolveMatch]


def vocabulary(ctx: Context, kind: int, cue: str, expected: str, floor: float) -> Vocabulary:
    """`expected` at floor 1.0 (exact or alias only makes a member), the cue at floor 0.0, the nearest spellings."""
    everything = len(ctx.concepts) + len(ctx.labels) + 1
    member = next(
        (m for m in resolve_matches(ctx, kind, expected, 1.0, everything) if m.kind in ("exact", "alias")), None
    )
    sweep = resolve_matches(ctx, kind, cue, 0.0, everything)
    nearest = [] if member is not None else resolve_matches(ctx, kind, expected, 0.0, NEAREST_SPELLINGS)
    return Vocabulary(member, floor, sweep, nearest)


@attrs.frozen
class GlossLane:
    """The gloss lane's account of (cue, canonical): why it could not score, or where the canonical stood."""

    reason: str | None = None
    ran: bool = False
    floor: float | None = None
    cosine: float | None = None
    rank: int | None = None
    passing: int = 0
    cap: int = SEMANTIC_KEEP


def gloss_gate(ctx: Context, kind: int, provider_model: str | None) -> str | None:
    """Why the gloss lane cannot run before any embedding (None: embed the cue and run it)."""
    if provider_model is None:
        return NO_EMBEDDINGS
    store = ctx.vectors.glosses
    empty = f"no {namespace(kind)} gloss vectors exist yet — no embedding refresh has run"
    if store is None or (not store.concepts.rows and not store.labels.rows):
        return empty
    if store.model != provider_model:
        return (
            f"gloss vectors belong to model '{store.model}' but the provider is '{provider_model}' — awaiting re-embed"
        )
    table = store.concepts if kind == CONCEPT else store.labels
    return None if table.rows else empty


def gloss_lane(ctx: Context, kind: int, q: np.ndarray, canonical: str, floor: float) -> GlossLane:
    """The canonical's gloss cosine and its rank in the semantic tier's order (cosine desc, name asc)."""
    store = ctx.vectors.glosses
    assert store is not None
    if store.width != len(q):
        return GlossLane(
            f"gloss vectors are {store.width}-dimensional but the model now answers {len(q)} (a dimensions "
            "setting changed behind its name) — awaiting re-embed"
        )
    table = store.concepts if kind == CONCEPT else store.labels
    names = list(table.rows)
    scores = sequential_dot(np.vstack([table.rows[n] for n in names]).astype(F32), np.asarray(q, dtype=F32))
    f_floor = F32(floor)
    by_name = dict(zip(names, scores.tolist(), strict=True))
    cosine = by_name.get(canonical)
    passing = ahead = 0
    for name, score in by_name.items():
        if F32(score) < f_floor:
            continue
        passing += 1
        if cosine is not None and (score > cosine or (score == cosine and name < canonical)):
            ahead += 1
    rank = ahead + 1 if cosine is not None and F32(cosine) >= f_floor else None
    return GlossLane(None, True, float(f_floor), cosine, rank, passing)


@attrs.frozen
class Seat:
    """One candidate of the merged ladder."""

    name: str
    score: float
    tier: str


def merge(lexical: list[ResolveMatch], semantic: list[tuple[str, float]]) -> list[Seat]:
    """Lexical candidates, then the semantic ones not already present."""
    seen = {m.name for m in lexical}
    seats = [Seat(m.name, m.score, "lexical") for m in lexical]
    return seats + [Seat(n, s, "semantic") for n, s in semantic if n not in seen]


def serve(full: list[ResolveMatch], semantic: list[tuple[str, float]], limit: int) -> list[Seat]:
    """What resolve answers at `limit`: the lexical list cut, the semantic seats merged, overflow off the
    lexical tail first (the ladder of `semantic.ladder`, without glosses)."""
    lex = full[:limit]
    seats = merge(lex, semantic)
    n_lex = len(lex)
    over = len(seats) - limit
    if over <= 0:
        return seats
    cut = min(over, n_lex)
    return seats[: n_lex - cut] + seats[n_lex : len(seats) - (over - cut)]


def limit_to_reach(
    full: list[ResolveMatch], semantic: list[tuple[str, float]], canonical: str, merged_len: int, merged_at: int | None
) -> int | None:
    """The smallest limit whose real serve holds the canonical, verified by rerunning it.

    Serving is not monotonic in the limit while semantic seats can crowd out (or duplicate) lexical
    ones, so the limits near 1 and just above `merged_at` are tried one by one, then doubling."""

    def serves(n: int) -> bool:
        return any(s.name == canonical for s in serve(full, semantic, n))

    span = len(semantic)
    for n in range(1, min(span, merged_len) + 1):
        if serves(n):
            return n
    if merged_at is None:
        return None
    for n in range(merged_at + 1, min(merged_at + 1 + span, merged_len) + 1):
        if serves(n):
            return n
    n = min(merged_at + 2 + span, merged_len)
    for _ in range(8):
        if serves(n):
            return n
        n = min(n * 2, merged_len)
    return None


def semantic_reason(entered: bool, lane: GlossLane, canonical: str) -> str | None:
    """Why the semantic tier did not score the canonical, or None: the gloss lane's reason, a missing gloss
    vector, or the lexical tier's confidence keeping the semantic tier out."""
    reason = lane.reason
    if lane.ran and lane.cosine is None:
        reason = f"'{canonical}' has no gloss vector yet — added after the last refresh"
    if not entered and reason is None:
        reason = f"{CONFIDENT_TEXT}, so the semantic tier never joined"
    return reason


@attrs.frozen
class Placement:
    """Where the canonical stands: in the served list, the merged list, the cue's sweep."""

    canonical: str
    limit: int
    served: list[Seat]
    merged: list[Seat]
    served_at: int | None
    merged_at: int | None
    admitted: bool
    target: ResolveMatch | None
    exact_shortcut: bool
    reach: int | None


def _reach_clause(reach: int | None) -> str:
    return f"limit {reach} reaches it" if reach is not None else "no limit reaches it"


def _semantic_verdict(p: Placement, lane: GlossLane, semantic_reason: str | None) -> tuple[str, str]:
    c = p.canonical
    if lane.ran and lane.cosine is not None and lane.floor is not None:
        cos = four_f32(lane.cosine)
        if F32(lane.cosine) < F32(lane.floor):
            return (
                "semantic_below_floor",
                f"'{c}' shares no spelling with the cue; its gloss cosine {cos} sits under the semantic floor "
                f"{four_f32(lane.floor)} — a floor at or under {cos} would have shown it",
            )
        if lane.rank is not None and lane.rank > lane.cap:
            return (
                "below_cutoff",
                f"'{c}' cleared the semantic floor (cosine {cos}) but ranked {lane.rank} of {lane.passing} — the "
                f"semantic tier serves its top {lane.cap} only",
            )
        return (
            "below_cutoff",
            f"'{c}' earned a semantic seat (cosine {cos}) but the request served only {p.limit}; "
            f"{_reach_clause(p.reach)}",
        )
    return (
        "semantic_not_run",
        f"'{c}' shares no spelling with the cue, and the semantic tier could not score it: "
        f"{semantic_reason or 'it did not run'}",
    )


def resolve_verdict(
    p: Placement, view: Vocabulary, entered: bool, lane: GlossLane, semantic_reason: str | None
) -> tuple[str, str]:
    """The first verdict that applies to a canonical in the vocabulary, and its summary sentence."""
    c = p.canonical
    if p.served_at is not None:
        seat = p.served[p.served_at]
        return (
            "served",
            f"served: '{c}' ranked {p.served_at + 1} of {len(p.served)} at limit {p.limit} ({seat.tier} tier)",
        )
    if p.exact_shortcut:
        return (
            "cue_resolved_exactly",
            f"the cue is an exact spelling of '{view.sweep[0].name}' — the exact tier answers alone, so '{c}' was "
            "never scored against it; a reworded cue is the way in",
        )
    if p.target is not None and not p.admitted:
        score = four(p.target.score)
        return (
            "below_floor",
            f"the resolver scored '{c}' {score} ({p.target.kind}) against dice_floor {four(view.floor)} — a floor at "
            f"or under {score} would have shown it",
        )
    if p.target is not None:
        at = 0 if p.merged_at is None else p.merged_at + 1
        return (
            "below_cutoff",
            f"'{c}' passed the floor but ranked {at} of {len(p.merged)} — the request served {p.limit}; "
            f"{_reach_clause(p.reach)}",
        )
    if not entered:
        return (
            "semantic_not_run",
            f"'{c}' shares no spelling with the cue, and the semantic tier never joined: {CONFIDENT_TEXT}",
        )
    return _semantic_verdict(p, lane, semantic_reason)


def place(view: Vocabulary, full: list[ResolveMatch], semantic: list[tuple[str, float]], limit: int) -> Placement:
    """Locate the canonical in the served list, the merged list and the cue's sweep."""
    assert view.membership is not None
    canonical = view.membership.name
    served = serve(full, semantic, limit)
    merged = merge(full, semantic)
    served_at = next((i for i, s in enumerate(served) if s.name == canonical), None)
    merged_at = next((i for i, s in enumerate(merged) if s.name == canonical), None)
    target = next((m for m in view.sweep if m.name == canonical), None)
    exact_shortcut = target is None and bool(view.sweep) and all(m.kind in ("exact", "alias") for m in view.sweep)
    reach = limit if served_at is not None else limit_to_reach(full, semantic, canonical, len(merged), merged_at)
    return Placement(
        canonical,
        limit,
        served,
        merged,
        served_at,
        merged_at,
        any(m.name == canonical for m in full),
        target,
        exact_shortcut,
        reach,
    )
