"""The explain diagnostics (docs/explain.md): why a name did or did not resolve for a cue, and why a
source did or did not appear for a query.

Both rerun the real lanes (`lanes.resolve_matches`, `semantic.lexical`, `lanes.searched`) with nothing
truncated, locate the target in what they produced, and name the first verdict that applies. The
provider-facing parts (embedding a cue or a query) stay with the caller, which hands in what it got:
the semantic candidates, the gloss lane's account, the vector lane's query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from taguru_server.store.context import CONCEPT, Context, Passage
from taguru_server.store.lanes import (
    NO_EMBEDDINGS,
    ResolveMatch,
    eligible_sources,
    passes_filter,
    resolve_matches,
    searched,
    top_documents,
)
from taguru_server.store.semantic import CONFIDENT, SEMANTIC_KEEP, confident
from taguru_server.store.text import query_terms, terms
from taguru_server.store.vector_lane import VectorQuery, VectorRow, classify, fuse, sequential_dot, sweep
from taguru_server.store.vectors import fnv1a64
from taguru_server.store.wire import F32 as WireF32

F32 = np.float32
NEAREST_SPELLINGS = 5
CONFIDENT_TEXT = f"the lexical tier was confident (best score ≥ {CONFIDENT})"


def four(x: float) -> str:
    """`{x:.4}`: the exact binary value rounded to 4 decimals, ties to even."""
    return f"{float(x):.4f}"


def four_f32(x: float) -> str:
    return four(float(F32(x)))


def _namespace(kind: int) -> str:
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
    empty = f"no {_namespace(kind)} gloss vectors exist yet — no embedding refresh has run"
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


def not_in_vocabulary(
    kind: int,
    cue: str,
    expected: str,
    view: Vocabulary,
    glosses: list[tuple[str, float]],
    note: str | None,
) -> dict[str, Any]:
    """The first verdict: `expected` is no stored spelling; the nearest ones are attached."""
    nearest: dict[str, Any] = {
        "lexical": [{"name": m.name, "score": m.score, "kind": m.kind} for m in view.nearest],
        "semantic": [{"name": n, "cosine": WireF32(c)} for n, c in glosses],
    }
    if note is not None:
        nearest["semantic_note"] = note
    return {
        "verdict": "not_in_vocabulary",
        "summary": f"'{expected}' is not in this context's {_namespace(kind)} vocabulary — no entry, no alias, no "
        "canonical spelling; the nearest stored spellings are attached",
        "cue": cue,
        "expected": expected,
        "in_vocabulary": False,
        "nearest": nearest,
    }


def _semantic_block(entered: bool, lane: GlossLane, canonical: str) -> dict[str, Any]:
    reason = lane.reason
    if lane.ran and lane.cosine is None:
        reason = f"'{canonical}' has no gloss vector yet — added after the last refresh"
    if not entered and reason is None:
        reason = f"{CONFIDENT_TEXT}, so the semantic tier never joined"
    out: dict[str, Any] = {"entered": entered}
    if reason is not None:
        out["reason"] = reason
    if lane.ran:
        out["floor"] = WireF32(lane.floor or 0.0)
        if lane.cosine is not None:
            out["cosine"] = WireF32(lane.cosine)
        if lane.rank is not None:
            out["rank"] = lane.rank
        out["cap"] = lane.cap
    return out


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


def _resolve_verdict(
    p: Placement, view: Vocabulary, entered: bool, lane: GlossLane, semantic_reason: str | None
) -> tuple[str, str]:
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


def resolve_explanation(
    cue: str,
    expected: str,
    view: Vocabulary,
    full: list[ResolveMatch],
    semantic: list[tuple[str, float]],
    limit: int,
    lane: GlossLane,
) -> dict[str, Any]:
    """The explanation when `expected` is a stored spelling: `full` is the lexical list at the floor (not cut),
    `semantic` the candidates the semantic tier added to the real call, `lane` the gloss lane's account."""
    assert view.membership is not None
    p = place(view, full, semantic, limit)
    entered = not confident(full)
    block = _semantic_block(entered, lane, p.canonical)
    verdict, summary = _resolve_verdict(p, view, entered, lane, block.get("reason"))
    lexical: dict[str, Any] = {}
    if p.target is not None:
        lexical = {"score": p.target.score, "kind": p.target.kind}
    ranking: dict[str, Any] = {}
    if p.merged_at is not None:
        seat = p.merged[p.merged_at]
        ranking = {"rank": p.merged_at + 1, "tier": seat.tier, "score": seat.score}
    ranking.update({"limit": limit, "served": p.served_at is not None})
    if p.reach is not None:
        ranking["limit_to_reach"] = p.reach
    return {
        "verdict": verdict,
        "summary": summary,
        "cue": cue,
        "expected": expected,
        "in_vocabulary": True,
        "canonical": p.canonical,
        "expected_kind": view.membership.kind,
        "lexical": {**lexical, "floor": view.floor, "confident": not entered},
        "semantic": block,
        "ranking": ranking,
    }


# ----- passage search --------------------------------------------------------------------


@attrs.frozen
class SearchTarget:
    """What the request names, checked: the source's passage and whether a paragraph was named."""

    passage: Passage
    paragraph: int | None


def early_verdict(
    ctx: Context,
    query: str,
    source: str,
    paragraph: int | None,
    filtered: tuple[list[str] | None, int | None, int | None],
) -> dict[str, Any] | SearchTarget:
    """The first of the four early verdicts that applies (answered as is), else the checked target."""
    sid = ctx.find_source(source)
    passage = ctx.passages.get(sid) if sid is not None else None
    if passage is None:
        return {
            "verdict": "not_stored",
            "summary": f"source '{source}' has no passages in context '{ctx.name}' — never stored here, or stored "
            "and later retracted (the store keeps no tombstone history to tell which)",
            "source": source,
        }
    n = len(passage.paragraphs)
    if (paragraph is not None and paragraph >= n) or n == 0:
        out: dict[str, Any] = {
            "verdict": "paragraph_out_of_range",
            "summary": f"paragraph {paragraph or 0} is out of range for source '{source}' — it stores {n} "
            "paragraph(s), 0-based",
            "source": source,
        }
        if paragraph is not None:
            out["paragraph"] = paragraph
        out["paragraphs"] = n
        return out
    tags, since, until = filtered
    if (tags is not None or since is not None or until is not None) and not passes_filter(
        passage, set(tags or []), since, until
    ):
        return {
            "verdict": "filtered_out",
            "summary": f"source '{source}' is excluded by the request's source filter (tags/since/until) — the "
            "search being explained never considered it",
            "source": source,
        }
    if not query_terms(query):
        return {
            "verdict": "no_query_terms",
            "summary": "the query yields no searchable terms — a search of it answers the empty list before either "
            "lane runs",
            "source": source,
        }
    return SearchTarget(passage, paragraph)


@attrs.frozen
class Ranked:
    """One paragraph of the untruncated ranking, with each lane's (rank, raw score) evidence."""

    source: str
    paragraph: int
    score: float
    bm25: tuple[int, float] | None
    vector: tuple[int, float] | None


@attrs.frozen
class SearchRun:
    """The search being explained: its inputs, the untruncated ranking, the whole vector sweep."""

    ctx: Context
    query: str
    tags: list[str] | None
    since: int | None
    until: int | None
    vq: VectorQuery
    ranked: list[Ranked]
    rows: list[VectorRow]
    fused: bool
    floor: float | None

    def served(self, limit: int) -> list[Any]:
        """Exactly what `…/sources/search` answers at `limit`."""
        return searched(self.ctx, self.query, limit, self.tags, self.since, self.until, self.vq)[2]


def full_ranking(
    ctx: Context, query: str, filtered: tuple[list[str] | None, int | None, int | None], vq: VectorQuery
) -> SearchRun:
    """The search rerun with nothing truncated: every paragraph touching a term (and every swept row)."""
    tags, since, until = filtered
    q_terms = query_terms(query)
    allowed = None
    names = None
    if tags is not None or since is not None or until is not None:
        allowed, _n = eligible_sources(ctx, tags or [], since, until)
        names = {ctx.sources[sid] for sid in np.nonzero(allowed)[0].tolist() if sid < len(ctx.sources)}
    docs = top_documents(ctx, q_terms, max(ctx.bm25.n_live, 1), allowed)
    doc_source, doc_par = ctx.bm25.doc_source, ctx.bm25.doc_par
    lexical = [(ctx.sources[doc_source[d]], doc_par[d], F32(s)) for d, s in docs]
    state = classify(ctx, vq)
    store = ctx.vectors.passages
    if not state.ran or store is None or vq.vector is None or state.floor is None:
        ranked = [Ranked(s, p, float(sc), (i, float(sc)), None) for i, (s, p, sc) in enumerate(lexical, start=1)]
        return SearchRun(ctx, query, tags, since, until, vq, ranked, [], False, None)
    rows = sweep(store, vq.vector, store.rows, -2.0, names)
    f_floor = F32(state.floor)
    floored = [r for r in rows if F32(r.score) >= f_floor]
    hits = fuse(ctx, [(s, p, float(sc)) for s, p, sc in lexical], floored, True, len(lexical) + len(floored))
    ranked = [Ranked(h.source, h.paragraph, h.score, h.bm25, h.vector) for h in hits]
    return SearchRun(ctx, query, tags, since, until, vq, ranked, rows, True, state.floor)


def _pool_floor(rank: int) -> int:
    """The smallest limit whose lane pool (max(4·limit, 50)) holds a lane rank."""
    return 1 if rank <= 50 else -(-rank // 4)


def probe_reach(
    run: SearchRun, source: str, paragraph: int, rank: int, hit: Ranked, expired: Callable[[], bool]
) -> int | None:
    """The smallest verified limit that serves the target, from its rank up (None: none found in budget)."""
    full = len(run.ranked)
    lane_ranks = [lane[0] for lane in (hit.bm25, hit.vector) if lane is not None]
    need = _pool_floor(max(lane_ranks)) if lane_ranks else 1
    ceiling = max(full, len(run.rows))
    candidate = min(max(rank, need), full)
    for _ in range(2 * max(ceiling, 2).bit_length() + 4):
        if expired():
            return None
        if any(h.source == source and h.paragraph == paragraph for h in run.served(candidate)):
            return candidate
        if candidate >= ceiling:
            return None
        candidate = min(candidate * 2, full if candidate < full else ceiling)
    return None


def _vector_block(run: SearchRun, source: str, paragraph: int, text: str, hit: Ranked | None) -> dict[str, Any]:
    if not run.fused:
        state = classify(run.ctx, run.vq)
        return {"ran": False, "reason": state.reason or NO_EMBEDDINGS}
    out: dict[str, Any] = {"ran": True, "floor": WireF32(run.floor or 0.0)}
    current = fnv1a64(text)
    cosine = next(
        (r.score for r in run.rows if r.source == source and r.paragraph == paragraph and r.para_hash == current),
        None,
    )
    if cosine is not None:
        out["cosine"] = WireF32(cosine)
    if hit is not None and hit.vector is not None:
        out["rank"] = hit.vector[0]
    return out


def _bm25_block(
    ctx: Context, target: SearchTarget, paragraph: int, q_terms: list[str], hit: Ranked | None
) -> tuple[dict[str, Any], bool]:
    passage = target.passage
    doc = passage.docs[paragraph] if paragraph < len(passage.docs) else None
    stats = ctx.bm25.explain(q_terms, doc)
    score = F32(0.0)
    for st in stats:
        score = F32(score + st.contribution)
    out: dict[str, Any] = {}
    if hit is not None and hit.bm25 is not None:
        out["rank"] = hit.bm25[0]
    out["score"] = WireF32(float(score))
    out["terms"] = [
        {
            "term": term,
            "tf": WireF32(float(st.tf)),
            "df": st.df,
            "idf": WireF32(float(st.idf)),
            "contribution": WireF32(float(st.contribution)),
        }
        for term, st in zip(q_terms, stats, strict=True)
    ]
    return out, any(st.tf > 0 for st in stats)


def paragraph_terms(passage: Passage, paragraph: int) -> list[str]:
    """The paragraph's own spelled terms (its text, then its questions), deduplicated, first kept."""
    texts = [passage.paragraphs[paragraph]] + [q for p, q in passage.questions if p == paragraph]
    out: dict[str, None] = {}
    for text in texts:
        out.update(dict.fromkeys(terms(text)))
    return list(out)


def _search_summary(verdict: str, source: str, p: int, ranking: dict[str, Any], vector: dict[str, Any]) -> str:
    if verdict == "served":
        rank, ranked, limit = ranking.get("rank", 0), ranking["ranked"], ranking["limit"]
        return f"served: paragraph {p} of '{source}' ranked {rank} of {ranked} at limit {limit}"
    if verdict == "below_cutoff":
        reach = ranking.get("limit_to_reach")
        clause = (
            f"limit {reach} reaches it"
            if reach is not None
            else f"no limit up to {ranking['ranked']} reaches it (pool interplay)"
        )
        cutoff = ranking.get("cutoff_score")
        shown = "-" if cutoff is None else four_f32(cutoff)
        return (
            f"paragraph {p} of '{source}' ranked {ranking.get('rank', 0)} of {ranking['ranked']} — the cutoff at limit "
            f"{ranking['limit']} was score {shown}; {clause}"
        )
    if not vector["ran"]:
        clause = f" and the vector lane did not run ({vector.get('reason') or 'off'})"
    elif "cosine" in vector:
        clause = f"; the vector lane scored it {four_f32(vector['cosine'])} against floor {four_f32(vector['floor'])}"
    else:
        clause = "; the vector lane ran but this paragraph has no current embedding yet"
    return f"paragraph {p} of '{source}' shares no term with the query{clause}"


def search_explanation(
    run: SearchRun, source: str, target: SearchTarget, limit: int, expired: Callable[[], bool]
) -> dict[str, Any]:
    """The explanation of one source (or one of its paragraphs) against the search `run` reran."""
    ctx = run.ctx
    passage = target.passage
    chosen = target.paragraph
    if chosen is None:
        chosen = next((h.paragraph for h in run.ranked if h.source == source), 0)
    at = next((i for i, h in enumerate(run.ranked) if h.source == source and h.paragraph == chosen), None)
    hit = run.ranked[at] if at is not None else None
    served_hits = run.served(limit)
    served = any(h.source == source and h.paragraph == chosen for h in served_hits)
    q_terms = query_terms(run.query)
    bm25, overlap = _bm25_block(ctx, target, chosen, q_terms, hit)
    vector = _vector_block(run, source, chosen, passage.paragraphs[chosen], hit)
    ranking: dict[str, Any] = {"fused": run.fused, "ranked": len(run.ranked)}
    if hit is not None and at is not None:
        ranking["rank"] = at + 1
        ranking["score"] = WireF32(hit.score)
    ranking["limit"] = limit
    ranking["served"] = served
    if served_hits:
        ranking["cutoff_score"] = WireF32(served_hits[-1].score)
    if served:
        ranking["limit_to_reach"] = limit
    elif hit is not None and at is not None:
        reach = probe_reach(run, source, chosen, at + 1, hit, expired)
        if reach is not None:
            ranking["limit_to_reach"] = reach
        else:
            ranking["limit_to_reach_reason"] = "unreachable"
    verdict = "served" if served else "below_cutoff" if hit is not None else "no_term_overlap"
    out: dict[str, Any] = {
        "verdict": verdict,
        "summary": _search_summary(verdict, source, chosen, ranking, vector),
        "source": source,
        "paragraph": chosen,
        "paragraphs": len(passage.paragraphs),
        "paragraph_named": target.paragraph is not None,
        "query_terms": q_terms,
    }
    if not overlap:
        out["paragraph_terms"] = paragraph_terms(passage, chosen)
    out["bm25"] = bm25
    out["vector"] = vector
    out["ranking"] = ranking
    return out
