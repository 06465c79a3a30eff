"""Evidence quality at equal budget: the service against four peer policies built from its own lane pools.

    .venv/bin/python bench/quality.py                     # the project's three sets, seed 7
    .venv/bin/python bench/quality.py --seed 11 --json bench/out/quality.json

Three question sets are generated from one seeded world (bench/quality_world.py): one-hop (a fact
about a brewery), two-hop (a fact about the brewery's toji, rice or town: two paragraphs joined by
a bridge entity the question does not name; the second paragraph never names the brewery) and
cross-lingual (English questions naming a brewery by its romanized alias, Japanese paragraphs).
Distractor pages repeat names without facts (shop listings, reviews, English shop pages), several
breweries have near-twin names, and every entity has several paragraphs.

Every policy answers from the same pools (one run of the service's graph-passages mode with wide
lane limits: resolve, query, activate, BM25 passages, the graph lane, citations) and is priced by
the service's own admission (`stages/budget.py: admit`: exact bytes and tokens, skip-and-continue):

- `fixed-limit`: the BM25 passage lane's first `search_limit` (5) hits;
- `graphrag-local`: fixed token shares, half for relations (activated associations in order), half
  for text units (the paragraphs those associations cite, in order, then BM25 hits);
- `lightrag-mix`: round-robin over the relation lane (activate) and the chunk lane (BM25);
- `hipporag`: personalized PageRank (restart 0.5) from the anchors over the concept graph, each
  paragraph scored by the summed mass of the entities attributed to it, paragraphs only;
- `service (off)` and `service (graph)`: the service's own package without and with
  `include_graph_passages`.

A gold paragraph counts as cited when the package carries it as a passage item or as a citation.
Printed per set and budget: citation recall (share of gold paragraphs cited), the both-hops rate
(two-hop: share of questions with both paragraphs cited) and source diversity (distinct sources
among the cited paragraphs, per question).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import structlog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from quality_world import World, build_world  # noqa: E402

from taguru_server.pipeline import Graph, run_graph  # noqa: E402
from taguru_server.stages import fuse  # noqa: E402
from taguru_server.stages.budget import admit  # noqa: E402
from taguru_server.stages.candidates import graph_passage_candidate  # noqa: E402
from taguru_server.stages.lanes import (  # noqa: E402
    ACTIVATE_HITS,
    ANCHORS,
    CITATIONS,
    GRAPH_LANES,
    GRAPH_PASSAGE_HITS,
    LANES,
    PASSAGE_HITS,
)
from taguru_server.stages.model import (  # noqa: E402
    CONTEXT,
    REQUEST,
    SERVICES,
    Candidate,
    EvidenceRequest,
    Fused,
    Selection,
    Services,
    Unit,
)
from taguru_server.stages.package import render_package  # noqa: E402
from taguru_server.stages.wiring import evidence_graph, graph_passages_graph  # noqa: E402
from taguru_server.store.model.context import CONCEPT, Context, Meta  # noqa: E402
from taguru_server.store.read.passage_graph import GraphPassageHit  # noqa: E402

BUDGETS = ((4, 800), (8, 1500), (40, 4000))
MAX_BYTES = 65536
POOL_LIMIT = 40  # the peers' lane pools: search, activate and graph lanes this wide
FIXED_LIMIT = 5  # the baseline's fixed passage count (the service's default search_limit)
POLICIES = ("fixed-limit", "graphrag-local", "lightrag-mix", "hipporag", "service (off)", "service (graph)")


def make_context(world: World) -> Context:
    """The world as one in-memory context: passages, associations, aliases."""
    ctx = Context(1, "quality", Meta())
    for source, text in world.passages.items():
        ctx.store_passage(source, text, [], [], [], [], 0, None)
    for s, lab, o, w, src, p in world.associations:
        ctx.assert_association(s, lab, o, w, src, p)
    for alias, canonical in world.aliases.items():
        ctx.add_alias(CONCEPT, alias, canonical)
    return ctx


SERVICES_VALUE = Services(registry=None, may_access=lambda name: True)  # type: ignore[arg-type]


async def run(graph: Graph, ctx: Context, request: EvidenceRequest) -> Any:
    """One run of a stage graph over the context."""
    result = await run_graph(graph, {REQUEST: request, CONTEXT: ctx, SERVICES: SERVICES_VALUE})
    if result.failure is not None:
        raise result.failure
    return result


def request_for(q: dict[str, Any], items: int, tokens: int, graph: bool, **kw: Any) -> EvidenceRequest:
    return EvidenceRequest(
        origins=tuple(q["origins"]),
        query=q["query"],
        max_items=items,
        max_bytes=MAX_BYTES,
        max_tokens=tokens,
        include_graph_passages=graph,
        **kw,
    )


def cited_of(items: Any, citations: Any) -> list[tuple[str, int]]:
    """The (source, paragraph) pairs a package carries: its passage items and its citations."""
    out = [(i["passage"]["source"], i["passage"]["paragraph"]) for i in items if i["kind"] == "passage"]
    out += [(c["source"], c["paragraph"]) for c in citations]
    return out


# ----- peers ---------------------------------------------------------------------------------------


def units(cands: list[Candidate]) -> tuple[Unit, ...]:
    """Single-candidate admission units in order, first copy of each candidate only."""
    seen: set[str] = set()
    out = []
    for c in cands:
        if c.candidate_id in seen:
            continue
        seen.add(c.candidate_id)
        out.append(Unit((Fused(c, ((c.lane, c.rank),), c.locators, 0.0, len(out) + 1),)))
    return tuple(out)


def priced(cands: list[Candidate], found: Any, items: int, tokens: int) -> Selection:
    return admit(units(cands), found, (), items, MAX_BYTES, tokens)


def text_unit(ctx: Context, loc: tuple[str, int], rank: int) -> Candidate:
    """A paragraph as a passage candidate (the PassageHit shape, as the service prices one)."""
    sid = ctx.source_id[loc[0]]
    hit = GraphPassageHit(loc[0], loc[1], 0.0, ctx.passages[sid].paragraphs[loc[1]], rank)
    return attrs.evolve(graph_passage_candidate(ctx.name, hit), lane="passage_bm25")


def hipporag_ranking(ctx: Context, anchors: tuple[str, ...], limit: int) -> list[tuple[str, int]]:
    """PPR (restart 0.5, 50 power iterations) over the concept graph from the anchors; each paragraph
    scored by the summed mass of the distinct entities of the associations attributed to it."""
    n = len(ctx.concepts)
    edges = ctx.edges
    live = [e for e in range(len(edges.subject)) if edges.count[e] > 0]
    a = np.array([edges.subject[e] for e in live] + [edges.object[e] for e in live], dtype=np.int64)
    b = np.array([edges.object[e] for e in live] + [edges.subject[e] for e in live], dtype=np.int64)
    deg = np.bincount(a, minlength=n).astype(float)
    seeds = [ctx.concept_id[x] for x in anchors if x in ctx.concept_id]
    if not seeds:
        return []
    s = np.zeros(n)
    s[seeds] = 1.0 / len(seeds)
    p = s.copy()
    for _ in range(50):
        flow = np.bincount(b, weights=p[a] / np.maximum(deg[a], 1.0), minlength=n)
        p = 0.5 * s + 0.5 * flow
    entities: dict[tuple[str, int], set[int]] = {}
    for e in live:
        for sid, _w, cnt, par in edges.attributions[e]:
            if par is not None and cnt > 0:
                entities.setdefault((ctx.sources[sid], par), set()).update((edges.subject[e], edges.object[e]))
    scored = sorted(((-sum(p[c] for c in cs), loc) for loc, cs in entities.items()), key=lambda t: (t[0], t[1]))
    return [loc for score, loc in scored if score < 0][:limit]


def peer_selections(
    ctx: Context, pools: Any, items: int, tokens: int
) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Every peer's package (items, citations) at one budget, from the pool run's lane values."""
    found = pools.values[CITATIONS].value
    bm25 = list(pools.values[PASSAGE_HITS].value)
    activate = list(pools.values[ACTIVATE_HITS].value)
    out: dict[str, Any] = {}

    sel = priced(bm25[:FIXED_LIMIT], found, items, tokens)
    out["fixed-limit"] = sel

    # GraphRAG local: half the budget for relations, half for text units (linked paragraphs, then BM25)
    rel = priced(activate, found, max(1, items // 2), tokens // 2)
    chosen_rel = {i["candidate_id"] for i in rel.items}
    linked: list[tuple[str, int]] = []
    for c in activate:
        for loc in c.locators:
            if loc not in linked:
                linked.append(loc)
    texts = [text_unit(ctx, loc, i + 1) for i, loc in enumerate(linked)] + bm25
    txt = priced(texts, found, items - len(rel.items), tokens // 2)
    chosen_txt = {i["candidate_id"] for i in txt.items}
    ordered = [c for c in activate if c.candidate_id in chosen_rel] + [c for c in texts if c.candidate_id in chosen_txt]
    out["graphrag-local"] = priced(ordered, found, items, tokens)

    mixed: list[Candidate] = []
    for i in range(max(len(activate), len(bm25))):
        mixed += activate[i : i + 1] + bm25[i : i + 1]
    out["lightrag-mix"] = priced(mixed, found, items, tokens)

    ranking = hipporag_ranking(ctx, pools.values[ANCHORS].value, POOL_LIMIT)
    out["hipporag"] = priced([text_unit(ctx, loc, i + 1) for i, loc in enumerate(ranking)], found, items, tokens)
    return {k: (list(v.items), list(v.citations)) for k, v in out.items()}


# ----- the measurement ------------------------------------------------------------------------------


def score(cited: list[tuple[str, int]], q: dict[str, Any]) -> tuple[float, float | None, int]:
    """Recall of the gold paragraphs, both hops cited (two-hop only), distinct cited sources."""
    have = set(cited)
    gold = [tuple(g) for g in q["gold"]]
    recall = sum(1 for g in gold if g in have) / len(gold)
    both = None
    if q.get("hops"):
        both = 1.0 if all(any(tuple(g) in have for g in hop) for hop in q["hops"]) else 0.0
    return recall, both, len({s for s, _p in have})


async def measure(world: World) -> dict[str, Any]:
    """Every policy's mean recall, both-hops rate and diversity, per set and budget."""
    ctx = make_context(world)
    plain, mode = evidence_graph(), graph_passages_graph()
    results: dict[str, Any] = {}
    for set_name, questions in world.sets.items():
        table: dict[str, Any] = {}
        for items, tokens in BUDGETS:
            sums = {p: [0.0, 0.0, 0.0, 0] for p in POLICIES}
            for q in questions:
                pool_request = request_for(
                    q, POOL_LIMIT, 10**6, True, search_limit=POOL_LIMIT, activate_limit=POOL_LIMIT
                )
                pools = await run(mode, ctx, pool_request)
                packages = peer_selections(ctx, pools, items, tokens)
                for name, graph, lanes, on in (
                    ("service (off)", plain, LANES, False),
                    ("service (graph)", mode, GRAPH_LANES, True),
                ):
                    done = await run(graph, ctx, request_for(q, items, tokens, on))
                    pkg = render_package(done, False, lanes=lanes)
                    packages[name] = (pkg["items"], pkg["citations"])
                for name, (its, cites) in packages.items():
                    r, both, div = score(cited_of(its, cites), q)
                    acc = sums[name]
                    acc[0] += r
                    acc[2] += div
                    if both is not None:
                        acc[1] += both
                        acc[3] += 1
            n = len(questions)
            table[f"{items}/{tokens}"] = {
                p: {
                    "recall": round(v[0] / n, 3),
                    "both_hops": round(v[1] / v[3], 3) if v[3] else None,
                    "diversity": round(v[2] / n, 2),
                }
                for p, v in sums.items()
            }
        results[set_name] = {"questions": len(questions), "budgets": table}
    _ = GRAPH_PASSAGE_HITS  # the pool run's graph lane is what the service fuses; the peers do not read it
    return results


def print_table(results: dict[str, Any]) -> None:
    for set_name, body in results.items():
        print(f"\n## {set_name} ({body['questions']} questions)")
        budgets = list(body["budgets"])
        head = " | ".join(f"{b} recall · both · div" for b in budgets)
        print(f"| policy | {head} |")
        print("|---|" + "---|" * len(budgets))
        for p in POLICIES:
            cells = []
            for b in budgets:
                v = body["budgets"][b][p]
                both = "—" if v["both_hops"] is None else f"{v['both_hops']:.2f}"
                cells.append(f"{v['recall']:.2f} · {both} · {v['diversity']:.2f}")
            print(f"| {p} | " + " | ".join(cells) + " |")


def quiet() -> None:
    """Stage events below warning are not printed."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--breweries", type=int, default=40)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    parser.add_argument("--graph-weight", type=float, default=None, help="measure another graph-lane weight")
    args = parser.parse_args()
    if args.graph_weight is not None:
        fuse.GRAPH_LANE_WEIGHTS["passage_graph"] = args.graph_weight
    quiet()
    world = build_world(args.seed, args.breweries)
    print(
        f"world: {len(world.passages)} sources, {sum(t.count(chr(10) * 2) + 1 for t in world.passages.values())} "
        f"paragraphs, {len(world.associations)} associations, seed {args.seed}"
    )
    results = asyncio.run(measure(world))
    print_table(results)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"seed": args.seed, "results": results}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
