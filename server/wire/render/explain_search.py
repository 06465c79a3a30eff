"""The search explanation (docs/explain.md): why a source did or did not appear for a query.

The verdict and its wire result, from the store's rerun of the passage lanes (`explain_search.SearchRun`):
the first early verdict that applies, else where the target stands in BM25, the vector lane and the fusion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taguru_server.store.index.vectors import fnv1a64
from taguru_server.store.model.context import Context
from taguru_server.store.read.explain import F32, four_f32
from taguru_server.store.read.explain_search import Ranked, SearchRun, SearchTarget, paragraph_terms, probe_reach
from taguru_server.store.read.passages import NO_EMBEDDINGS, SourceFilter
from taguru_server.store.read.vector_lane import classify
from taguru_server.store.text import query_terms
from taguru_server.store.wire import F32 as WireF32


def early_verdict(
    ctx: Context,
    query: str,
    source: str,
    paragraph: int | None,
    scope: SourceFilter,
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
    if scope.active and not scope.admits(passage):
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
