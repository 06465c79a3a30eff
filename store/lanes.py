"""The read lanes over one context: resolve, describe, query/recall, activate, search, citations."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from store.context import CONCEPT, LABEL, Context
from store.text import query_terms
from store.wire import F32

NO_EMBEDDINGS = "no embedding provider is configured"
GLOSSED_CANDIDATES = 8
SEMANTIC_TIER_BELOW = 0.5
FLOW_FLOOR = 1e-6


# ----- resolve -------------------------------------------------------------------


def resolve(ctx: Context, kind: int, cue: str, dice_floor: float, limit: int) -> list[dict[str, Any]]:
    """Lexical resolve of a cue to canonical concept (or label) names, best first."""
    names = ctx.concepts if kind == CONCEPT else ctx.labels
    lexicon = ctx.lexicons[kind]
    found = lexicon.lookup(cue, dice_floor)
    if not found:
        return []
    from store.text import normalize

    q = normalize(cue)
    rows = []
    for record, score, hit_kind in found:
        name = names[record]
        if hit_kind == "exact" and normalize(name) != q:
            hit_kind = "alias"
        rows.append((record, name, score, hit_kind))
    rows.sort(key=lambda r: (-r[2], r[1]))
    rows = rows[:limit]
    out = []
    for i, (record, name, score, hit_kind) in enumerate(rows):
        item: dict[str, Any] = {"name": name, "score": float(score), "tier": "lexical", "kind": hit_kind}
        if i < GLOSSED_CANDIDATES:
            item["gloss"] = concept_gloss(ctx, record) if kind == CONCEPT else label_gloss(ctx, record)
        out.append(item)
    return out


def _fact(ctx: Context, e: int, omit_subject: bool) -> str:
    subject = "" if omit_subject else ctx.concepts[ctx.e_s[e]] + "の"
    neg = "ではない" if ctx.e_sum[e] < 0 else ""
    return f"{subject}{ctx.labels[ctx.e_l[e]]}は{ctx.concepts[ctx.e_o[e]]}{neg}。"


def _strongest(ctx: Context, edges: list[int], n: int) -> list[int]:
    live = [e for e in edges if ctx.e_cnt[e] > 0]
    return heapq.nsmallest(n, live, key=lambda e: (-abs(ctx.e_sum[e]), e))


def concept_gloss(ctx: Context, c: int) -> str:
    """`{name}。` then up to four of the concept's strongest live facts."""
    edges = ctx.out_edges[c] + [e for e in ctx.in_edges[c] if ctx.e_s[e] != ctx.e_o[e]]
    parts = [ctx.concepts[c] + "。"]
    prev: int | None = None
    for e in _strongest(ctx, edges, 4):
        s = ctx.e_s[e]
        parts.append(_fact(ctx, e, s == c or s == prev))
        prev = s
    return "".join(parts)


def label_gloss(ctx: Context, lab: int) -> str:
    """`{label}。` then up to three of the label's strongest live facts."""
    parts = [ctx.labels[lab] + "。"]
    prev: int | None = None
    for e in _strongest(ctx, ctx.label_edges[lab], 3):
        s = ctx.e_s[e]
        parts.append(_fact(ctx, e, s == prev))
        prev = s
    return "".join(parts)


# ----- describe, query, recall ---------------------------------------------------


def describe(ctx: Context, concept: str) -> dict[str, Any] | None:
    c = ctx.find_concept(concept)
    if c is None:
        return None

    def tally(edges: list[int]) -> list[dict[str, Any]]:
        counts: dict[int, int] = {}
        for e in edges:
            if ctx.e_cnt[e] > 0:
                counts[ctx.e_l[e]] = counts.get(ctx.e_l[e], 0) + 1
        return [{"label": ctx.labels[lab], "count": n} for lab, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]

    as_object = ctx.in_edges[c] + [e for e in ctx.out_edges[c] if ctx.e_o[e] == c]
    return {"concept": ctx.concepts[c], "as_subject": tally(ctx.out_edges[c]), "as_object": tally(as_object)}


def _sort_key(ctx: Context, e: int) -> tuple[float, str, str, str]:
    return (-abs(ctx.weight(e)), ctx.concepts[ctx.e_s[e]], ctx.labels[ctx.e_l[e]], ctx.concepts[ctx.e_o[e]])


def page_matches(
    ctx: Context, edges: list[int], limit: int, after: dict[str, Any] | None
) -> dict[str, Any]:
    """Order matching edges, apply the cursor and limit, and shape the page."""
    total = len(edges)
    keyed = [(_sort_key(ctx, e), e) for e in edges]
    if after is not None:
        bound = (-abs(float(after["weight"])), after["subject"], after["label"], after["object"])
        keyed = [ke for ke in keyed if ke[0] > bound]
    page = heapq.nsmallest(limit, keyed) if limit < len(keyed) else sorted(keyed)
    return {
        "total": total,
        "matches": [ctx.association_out(e) for _k, e in page],
        "plan": {"contexts": [ctx.name]},
    }


def query_edges(
    ctx: Context, subjects: list[str] | None, labels: list[str] | None, objects: list[str] | None
) -> list[int]:
    """Edges (dead ones included) whose positions match every pinned OR-set."""
    sets: list[tuple[str, set[int]]] = []
    if subjects is not None:
        sets.append(("s", {c for c in map(ctx.find_concept, subjects) if c is not None}))
    if labels is not None:
        sets.append(("l", {lab for lab in map(ctx.find_label, labels) if lab is not None}))
    if objects is not None:
        sets.append(("o", {c for c in map(ctx.find_concept, objects) if c is not None}))
    if any(not ids for _p, ids in sets):
        return []

    def candidates(pos: str, ids: set[int]) -> list[int]:
        lists = (
            ctx.out_edges if pos == "s" else ctx.label_edges if pos == "l" else ctx.in_edges
        )
        out: list[int] = []
        for i in ids:
            out.extend(lists[i])
            if pos == "o":
                out.extend(e for e in ctx.out_edges[i] if ctx.e_o[e] == i)
        return out

    sizes = []
    for pos, ids in sets:
        lists = ctx.out_edges if pos == "s" else ctx.label_edges if pos == "l" else ctx.in_edges
        sizes.append((sum(len(lists[i]) for i in ids), pos, ids))
    sizes.sort(key=lambda t: t[0])
    _n, pos0, ids0 = sizes[0]
    arrays = {"s": ctx.e_s, "l": ctx.e_l, "o": ctx.e_o}
    result = []
    for e in dict.fromkeys(candidates(pos0, ids0)):
        if all(arrays[p][e] in ids for _n2, p, ids in sizes[1:]):
            result.append(e)
    return result


def recall_edges(ctx: Context, cue: str) -> list[int]:
    """Edges whose subject, object or label is the cue (exact spelling, alias-folded)."""
    edges: list[int] = []
    c = ctx.find_concept(cue)
    if c is not None:
        edges.extend(ctx.out_edges[c])
        edges.extend(ctx.in_edges[c])
    lab = ctx.find_label(cue)
    if lab is not None:
        edges.extend(ctx.label_edges[lab])
    return list(dict.fromkeys(edges))


# ----- activate ------------------------------------------------------------------


def activate(ctx: Context, origins: list[str], decay: float, limit: int) -> dict[str, Any]:
    """Spreading activation from the origins; edges ranked by the strength that reached them."""
    strength, source, parent, scored_total = spread(ctx, origins, decay)
    ranked = heapq.nsmallest(limit, strength, key=lambda e: (-strength[e], e))
    matches = []
    for e in ranked:
        path = [ctx.concepts[c] for c in _path(parent, source[e])]
        matches.append({"strength": float(strength[e]), "path": path, "association": ctx.association_out(e)})
    return {"total": scored_total, "matches": matches}


def spread(ctx: Context, origins: list[str], decay: float) -> tuple[dict[int, float], dict[int, int], dict[int, int], int]:
    """Run activation; returns per-edge strength, producing concept, parent links, scored count."""
    best: dict[int, float] = {}
    parent: dict[int, int] = {}
    heap: list[tuple[float, int]] = []
    for name in origins:
        c = ctx.find_concept(name)
        if c is not None and c not in best:
            best[c] = 1.0
            heap.append((-1.0, c))
    heapq.heapify(heap)
    settled: set[int] = set()
    strength: dict[int, float] = {}
    source: dict[int, int] = {}
    e_sum, e_cnt, e_s, e_o = ctx.e_sum, ctx.e_cnt, ctx.e_s, ctx.e_o
    while heap:
        neg_a, c = heapq.heappop(heap)
        if c in settled:
            continue
        settled.add(c)
        a = -neg_a
        edges = [e for e in ctx.out_edges[c] if e_cnt[e] > 0] + [e for e in ctx.in_edges[c] if e_cnt[e] > 0]
        total = 0.0
        for e in edges:
            total += abs(e_sum[e])
        if total == 0:
            continue
        ad = a * decay
        for e in edges:
            score = ad * abs(e_sum[e])
            if score <= 0:
                continue
            if score > strength.get(e, 0.0):
                strength[e] = score
                source[e] = c
            flow = score / total
            if flow < FLOW_FLOOR:
                continue
            for n in (e_s[e], e_o[e]):
                if n in settled:
                    continue
                if flow > best.get(n, 0.0):
                    best[n] = flow
                    parent[n] = c
                    heapq.heappush(heap, (-flow, n))
    return strength, source, parent, len(strength)


def _path(parent: dict[int, int], c: int) -> list[int]:
    chain = [c]
    seen = {c}
    while chain[-1] in parent:
        p = parent[chain[-1]]
        if p in seen:
            break
        chain.append(p)
        seen.add(p)
    chain.reverse()
    return chain


# ----- passage search ------------------------------------------------------------


def search_passages(
    ctx: Context,
    query: str,
    limit: int,
    tags: list[str] | None = None,
    since: int | None = None,
    until: int | None = None,
) -> dict[str, Any]:
    """BM25 over paragraphs (the vector lane reports that no provider is configured)."""
    filtered = tags is not None or since is not None or until is not None
    entry: dict[str, Any] = {"context": ctx.name}
    allowed = None
    if filtered:
        allowed, eligible = _eligible_sources(ctx, tags or [], since, until)
    plan_filter = {"eligible_sources": eligible, "total_sources": len(ctx.passages)} if filtered else None

    def skipped(reason: str) -> dict[str, Any]:
        entry["lanes"] = {"bm25": {"ran": False, "reason": reason}, "vector": {"ran": False, "reason": reason}}
        if plan_filter is not None:
            entry["filter"] = plan_filter
        return {"plan": {"contexts": [entry]}, "hits": []}

    if limit == 0:
        return skipped("the requested limit is 0")
    q_terms = query_terms(query)
    if not q_terms:
        return skipped("the query yields no searchable terms")
    entry["lanes"] = {"bm25": {"ran": True}, "vector": {"ran": False, "reason": NO_EMBEDDINGS}}
    if plan_filter is not None:
        entry["filter"] = plan_filter
    hits = []
    for doc, score in top_documents(ctx, q_terms, limit, allowed):
        sid = ctx.bm25.doc_source[doc]
        par = ctx.bm25.doc_par[doc]
        s = F32(score)
        hits.append(
            {
                "source": ctx.sources[sid],
                "paragraph": par,
                "score": s,
                "text": ctx.passages[sid].paragraphs[par],
                "lanes": {"bm25": {"rank": len(hits) + 1, "score": s}},
            }
        )
    return {"plan": {"contexts": [entry]}, "hits": hits}


def top_documents(
    ctx: Context, q_terms: list[str], limit: int, allowed: np.ndarray | None
) -> list[tuple[int, float]]:
    """The best `limit` paragraphs by score desc, source name asc, paragraph asc."""
    docs, scores = ctx.bm25.search(q_terms, allowed)
    if docs.size == 0 or limit <= 0:
        return []
    if docs.size > limit:
        kth = np.partition(scores, docs.size - limit)[docs.size - limit]
        keep = scores >= kth
        docs, scores = docs[keep], scores[keep]
    sources, pars = ctx.bm25.doc_source, ctx.bm25.doc_par
    names = ctx.sources
    ranked = sorted(
        zip(docs.tolist(), scores.tolist()),
        key=lambda ds: (-ds[1], names[sources[ds[0]]], pars[ds[0]]),
    )
    return ranked[:limit]


def _eligible_sources(
    ctx: Context, tags: list[str], since: int | None, until: int | None
) -> tuple[np.ndarray, int]:
    wanted = set(tags)
    allowed = np.zeros(max(len(ctx.sources), 1), dtype=bool)
    eligible = 0
    for sid, passage in ctx.passages.items():
        if wanted and not wanted.intersection(passage.tags):
            continue
        when = passage.date if passage.date is not None else passage.stored_at
        if since is not None and (when is None or when < since):
            continue
        if until is not None and (when is None or when >= until):
            continue
        allowed[sid] = True
        eligible += 1
    return allowed, eligible


# ----- citations -----------------------------------------------------------------


def citation(ctx: Context, source: str, paragraph: int) -> dict[str, Any] | str:
    """The paragraph slice with its section and locator, or 'no_source' / 'no_paragraph'."""
    sid = ctx.find_source(source)
    passage = ctx.passages.get(sid) if sid is not None else None
    if passage is None:
        return "no_source"
    if paragraph >= len(passage.paragraphs):
        return "no_paragraph"
    return {
        "text": passage.paragraphs[paragraph],
        "source": source,
        "section": passage.section_for(paragraph),
        "locator": passage.locator_for(paragraph),
    }


__all__ = ["LABEL", "CONCEPT"]
