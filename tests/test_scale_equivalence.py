"""The store's exact shortcuts against plain implementations of the spec's algorithms.

Every speed-up in store/ that skips work (bulk tokenization, BM25 top-k bounds, activation in
bands, resolve through indexes, import fast paths) must give byte-identical results to the
straightforward algorithm of the substrate spec. The plain versions live here, written from
the spec, and are compared on many seeded random small corpora and graphs.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import struct
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taguru_server.server.wire.render import lanes as lane_wire
from taguru_server.stages.render import association_out
from taguru_server.store.model.context import CONCEPT, Context, Meta
from taguru_server.store.read import activation, activation_graph, banded, citations, gloss
from taguru_server.store.read import query as query_lane
from taguru_server.store.read.passages import SourceFilter
from taguru_server.store.text import (
    bigrams,
    bulk_term_counts,
    normalize,
    paragraph_counts,
    query_terms,
    split_many,
    split_paragraphs,
    terms,
)

# ----- alphabets for random text ----------------------------------------------------------

# kana (both scripts, half-width too), kanji, ASCII of both cases, digits, full-width forms,
# punctuation, whitespace, combining marks, sigma, separators the bulk path uses internally,
# characters outside the BMP, and compatibility characters whose NFKC holds uppercase ASCII.
ALPHABET = list(
    "あいうかきアイウカキーｱｲｳﾞ酒造蔵杜氏水米霧沢青嶺"
    "abcXYZAppStateHTTPsServer019"
    "ＡＢｃ１２（）「」、。・ 　\t\r"
    "\u0301\u3099ΣσΑ\x00\x01"
    "\U00020b9f\U0001f600\u2121\u24b6\U0001f130Ⅻß"
)


def rand_text(rng: random.Random, n_max: int = 24) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, n_max)))


text_strategy = st.lists(st.sampled_from(ALPHABET), max_size=40).map("".join)


# ----- tokenizer: bulk path vs terms() ------------------------------------------------------


def _bulk_counters(docs: list[list[str]]) -> tuple[list[Counter], list[int]]:
    found, p_term, p_doc, p_tf, lens = bulk_term_counts(docs)
    out = [Counter() for _ in docs]
    for t, d, tf in zip(p_term.tolist(), p_doc.tolist(), p_tf.tolist(), strict=False):
        assert out[d][found[t]] == 0, "a (document, term) pair appears twice"
        out[d][found[t]] = int(tf)
    return out, lens.tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(text_strategy, min_size=1, max_size=3), min_size=1, max_size=6))
def test_bulk_tokenizer_matches_terms(docs: list[list[str]]) -> None:
    got, lens = _bulk_counters(docs)
    for parts, counts, n in zip(docs, got, lens, strict=False):
        ref = Counter(t for p in parts for t in terms(p))
        assert counts == ref
        assert n == sum(ref.values())


def test_bulk_tokenizer_seeded_corpora() -> None:
    rng = random.Random(5)
    for _round in range(40):
        docs = [[rand_text(rng, 60) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 30))]
        got, lens = _bulk_counters(docs)
        for parts, counts, n in zip(docs, got, lens, strict=False):
            ref = Counter(t for p in parts for t in terms(p))
            assert counts == ref and n == sum(ref.values())


# ----- BM25: plain reference of §9.2 / §9.3 -------------------------------------------------

F = np.float32


def reference_search(ctx: Context, query: str, limit: int, allowed: set[str] | None = None) -> list[tuple]:
    """Score every paragraph from scratch; sort fully; (source, paragraph, f32 bits) rows."""
    docs = []
    for sid, passage in ctx.passages.items():
        by_par = defaultdict(list)
        for p, q in passage.questions:
            by_par[p].append(q)
        for i, text in enumerate(passage.paragraphs):
            doc_terms = terms(text)
            for q in by_par[i]:
                doc_terms.extend(terms(q))
            docs.append((ctx.sources[sid], i, Counter(doc_terms), len(doc_terms)))
    q_terms = query_terms(query)
    if not docs or not q_terms or limit == 0:
        return []
    n = len(docs)
    big_n = F(n)
    avgdl = F(max(sum(d[3] for d in docs) / n, 1.0))
    df = Counter(t for d in docs for t in d[2])
    k1, b = F(1.2), F(0.75)
    rows = []
    for source, par, counts, length in docs:
        if not any(t in counts for t in q_terms):
            continue
        if allowed is not None and source not in allowed:
            continue
        score = F(0.0)
        for t in q_terms:
            tf = counts.get(t)
            if not tf:
                continue
            nt = F(df[t])
            idf = F(math.log(float(F(1.0) + (big_n - nt + F(0.5)) / (nt + F(0.5)))))
            tf32 = F(tf)
            c = (idf * (tf32 * (k1 + F(1.0)))) / (tf32 + k1 * ((F(1.0) - b) + (b * F(length)) / avgdl))
            score = F(score + c)
        rows.append((source, par, score))
    rows.sort(key=lambda r: (-r[2], r[0], r[1]))
    return [(s, p, struct.pack("<f", sc)) for s, p, sc in rows[:limit]]


def ours_search(ctx: Context, query: str, limit: int, tags: list[str] | None = None) -> list[tuple]:
    result = lane_wire.search_passages(ctx, query, limit, SourceFilter(tags=tags))
    hits = result["hits"]
    for rank, h in enumerate(hits, start=1):
        assert h["lanes"]["bm25"]["rank"] == rank
        assert h["score"] == h["lanes"]["bm25"]["score"]
        assert float(np.float32(h["score"])) == h["score"]  # an f32 value, as the wire prints it
    return [(h["source"], h["paragraph"], struct.pack("<f", h["score"])) for h in hits]


WORDS = [
    "酒造",
    "杜氏",
    "霧沢",
    "青嶺酒造",
    "水",
    "米",
    "Brewery",
    "toji",
    "AppState",
    "蔵",
    "仕込み",
    "1852年",
    "ｶﾀｶﾅ",
    "カタカナ",
    "の",
    "は",
    "sake",
    "SAKE",
    "river",
]


def _random_passage(rng: random.Random) -> tuple[str, list[tuple[int, str]]]:
    pars = []
    for _ in range(rng.randint(1, 5)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.2:
            words.append(rand_text(rng, 8))
        pars.append(rng.choice(["", " ", "、"]).join(words))
    text = "\n\n".join(pars)
    questions = [(rng.randrange(len(pars) + 1), rng.choice(WORDS) + "は？") for _ in range(rng.randint(0, 2))]
    return text, questions


def _random_context(rng: random.Random, n_sources: int, n_ops: int) -> Context:
    ctx = Context(1, "t", Meta())
    names = [f"s{rng.randrange(1000):03d}" for _ in range(n_sources)]
    for _ in range(n_ops):
        name = rng.choice(names)
        roll = rng.random()
        if roll < 0.8:
            text, questions = _random_passage(rng)
            tags = [rng.choice(["a", "b", "c"])]
            ctx.store_passage(name, text, questions, [], [], tags, 1, None)
        else:
            ctx.retract_source(name)
        if rng.random() < 0.3:
            lane_wire.search_passages(ctx, rng.choice(WORDS), 5)  # seal at odd moments
    return ctx


@pytest.mark.parametrize("seed", range(60))
def test_bm25_top_k_matches_full_scoring(seed: int) -> None:
    rng = random.Random(seed)
    ctx = _random_context(rng, rng.randint(1, 12), rng.randint(1, 40))
    for _ in range(12):
        query = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.2:
            query = rand_text(rng, 10)
        limit = rng.choice([0, 1, 2, 3, 5, 10, 200])
        assert ours_search(ctx, query, limit) == reference_search(ctx, query, limit), (query, limit)
        docs, scores = ctx.bm25.search(query_terms(query))  # every hit, unordered
        got = sorted(
            (ctx.sources[ctx.bm25.doc_source[d]], ctx.bm25.doc_par[d], struct.pack("<f", sc))
            for d, sc in zip(docs.tolist(), scores.tolist(), strict=False)
        )
        assert got == sorted(reference_search(ctx, query, 10**9))
        tag = rng.choice(["a", "b"])
        allowed = {ctx.sources[sid] for sid, p in ctx.passages.items() if tag in p.tags}
        assert ours_search(ctx, query, limit, [tag]) == reference_search(ctx, query, limit, allowed)


def test_bm25_many_ties_and_large_corpus() -> None:
    """Identical paragraphs across many sources: the bound must never drop a tied document."""
    rng = random.Random(99)
    ctx = Context(1, "t", Meta())
    for i in range(300):
        body = "青嶺酒造の杜氏は高瀬である。" if i % 3 else "霧沢の水で仕込む。青嶺酒造。"
        extra = "".join(rng.choice("酒造蔵杜氏水米") for _ in range(rng.randint(0, 6)))
        ctx.store_passage(f"src{rng.randrange(10**6):06d}-{i}", body + "\n\n" + extra, [], [], [], [], 1, None)
    for query in ["青嶺酒造", "杜氏 水", "酒造 蔵 米 霧沢", "高瀬", "水"]:
        for limit in (1, 5, 7, 50, 200, 1000):
            assert ours_search(ctx, query, limit) == reference_search(ctx, query, limit)


def test_split_and_normalize_helpers_unchanged() -> None:
    assert split_paragraphs("\nA\nB\n\n \t \nC\n\n") == ["A\nB", "C"]
    assert normalize("ＡΣカ") == "aσか"
    assert bigrams("abca") == ["ab", "bc", "ca"]


# ----- resolve: plain lexicon of §7 ---------------------------------------------------------


class PlainLexicon:
    """§7 lexical tier with a linear scan over every spelling."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, int, bool]] = []  # (normalized, record, alive)
        self.of: dict[str, int] = {}

    def add(self, spelling: str, record: int) -> None:
        self.of[spelling] = len(self.entries)
        self.entries.append((normalize(spelling), record, True))

    def remove(self, spelling: str) -> None:
        e = self.of.pop(spelling, None)
        if e is not None:
            n, r, _a = self.entries[e]
            self.entries[e] = (n, r, False)

    def lookup(self, cue: str, dice_floor: float) -> list[tuple[int, float, str]]:
        q = normalize(cue)
        if not q:
            return []
        live = [(e, n, r) for e, (n, r, a) in enumerate(self.entries) if a]
        hits = []
        matched = set()
        for e, s, _r in live:
            if not s:
                continue
            if s == q:
                hits.append((e, 1.0, "exact"))
                matched.add(e)
            elif q in s or s in q:
                hits.append((e, min(len(s), len(q)) / max(len(s), len(q)), "containment"))
                matched.add(e)
        if not any(k == "exact" for _e, _s, k in hits):
            df = Counter(g for _e, s, _r in live for g in bigrams(s))
            stop = max(len(live) // 20, 64)
            qg = [g for g in bigrams(q) if df.get(g, 0) <= stop]
            if qg:
                for e, s, _r in live:
                    if e in matched:
                        continue
                    tg = [g for g in bigrams(s) if df[g] <= stop]
                    shared = len(set(qg) & set(tg))
                    if not tg or not shared:
                        continue
                    dice = 2.0 * shared / (len(qg) + len(tg))
                    if dice >= dice_floor:
                        hits.append((e, dice, "fuzzy"))
        best: dict[int, tuple[float, str]] = {}
        for e, score, kind in hits:
            r = self.entries[e][1]
            if r not in best or score > best[r][0]:
                best[r] = (score, kind)
        return [(r, s, k) for r, (s, k) in best.items()]


SPELLING_PIECES = [
    "酒造",
    "青嶺",
    "霧沢",
    "川",
    "町",
    "Aomine",
    "Brewery",
    "brew",
    "kiri",
    "sawa",
    " ",
    "ア",
    "あ",
    "ｱ",
    "高瀬",
    "Takase",
    "ka",
    "ki",
    "a",
    "ー",
    "Σ",
]


def _spelling(rng: random.Random) -> str:
    return "".join(rng.choice(SPELLING_PIECES) for _ in range(rng.randint(1, 4)))


@pytest.mark.parametrize("seed", range(40))
def test_lexicon_matches_linear_scan(seed: int) -> None:
    from taguru_server.store.index.lexicon import Lexicon

    rng = random.Random(seed)
    ours, plain = Lexicon(), PlainLexicon()
    spellings: list[str] = []
    for i in range(rng.randint(1, 150)):
        s = _spelling(rng)
        if s in ours.entry_of:
            continue
        record = rng.randrange(i + 1)
        ours.add(s, record)
        plain.add(s, record)
        spellings.append(s)
        if rng.random() < 0.1 and spellings:
            gone = rng.choice(spellings)
            ours.remove(gone)
            plain.remove(gone)
        if rng.random() < 0.2:
            ours.lookup(_spelling(rng), 0.3)  # read at odd moments (cached views)
    for _ in range(30):
        cue = _spelling(rng) if rng.random() < 0.8 else rand_text(rng, 6)
        if rng.random() < 0.3:
            cue = cue[: rng.randint(1, max(1, len(cue)))]
        floor = rng.choice([0.0, 0.2, 0.3, 0.5, 1.0])
        assert sorted(ours.lookup(cue, floor)) == sorted(plain.lookup(cue, floor)), (cue, floor)


def test_lexicon_stop_grams_with_many_spellings() -> None:
    """Past 64·20 spellings the stop threshold moves; common grams must stop counting."""
    from taguru_server.store.index.lexicon import Lexicon

    rng = random.Random(3)
    ours, plain = Lexicon(), PlainLexicon()
    seen = set()
    while len(seen) < 1500:
        s = "".join(rng.choice("酒造蔵青嶺霧沢kaisw") for _ in range(rng.randint(2, 6)))
        if s not in seen:
            seen.add(s)
            ours.add(s, len(seen))
            plain.add(s, len(seen))
    for _ in range(60):
        cue = "".join(rng.choice("酒造蔵青嶺霧沢kaiswx") for _ in range(rng.randint(1, 7)))
        assert sorted(ours.lookup(cue, 0.3)) == sorted(plain.lookup(cue, 0.3)), cue


@pytest.mark.parametrize("extra", [0, 1, 2])
def test_lexicon_stop_threshold_boundary(extra: int) -> None:
    """Grams posted by exactly the threshold count, and by one more, around the stop rule."""
    from taguru_server.store.index.lexicon import Lexicon

    ours, plain = Lexicon(), PlainLexicon()
    n = 1300 + 20 * extra  # threshold max(n // 20, 64)
    stop = max(n // 20, 64)
    spellings = [f"{i:05d}x" for i in range(n)]
    for i in range(stop):
        spellings[i] = f"青嶺{i:05d}"
    for i in range(stop, 2 * stop + 1):
        spellings[i] = f"霧沢{i:05d}"
    for i, s in enumerate(spellings):
        ours.add(s, i)
        plain.add(s, i)
    for cue in ["青嶺霧沢", "青嶺00012x", "霧沢青嶺000", "青嶺", "霧沢", "00012"]:
        for floor in (0.0, 0.3):
            assert sorted(ours.lookup(cue, floor)) == sorted(plain.lookup(cue, floor)), cue


# ----- activate: the §8.3 heap walk ---------------------------------------------------------


def plain_activate(ctx: Context, origins: list[str], decay: float, limit: int) -> dict[str, Any]:
    """§8.3 step by step (a copy of the original implementation, kept independent of store/)."""
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
    while heap:
        neg_a, c = heapq.heappop(heap)
        if c in settled:
            continue
        settled.add(c)
        a = -neg_a
        edges = [e for e in ctx.out_edges[c] if ctx.edges.count[e] > 0] + [
            e for e in ctx.in_edges[c] if ctx.edges.count[e] > 0
        ]
        total = 0.0
        for e in edges:
            total += abs(ctx.edges.weight[e])
        if total == 0:
            continue
        for e in edges:
            score = a * decay * abs(ctx.edges.weight[e])
            if score <= 0:
                continue
            if score > strength.get(e, 0.0):
                strength[e] = score
                source[e] = c
            flow = score / total
            if flow < 1e-6:
                continue
            for n in (ctx.edges.subject[e], ctx.edges.object[e]):
                if n in settled:
                    continue
                if flow > best.get(n, 0.0):
                    best[n] = flow
                    parent[n] = c
                    heapq.heappush(heap, (-flow, n))
    ranked = sorted(strength, key=lambda e: (-strength[e], e))[:limit]
    matches = []
    for e in ranked:
        chain = [source[e]]
        while chain[-1] in parent:
            chain.append(parent[chain[-1]])
        chain.reverse()
        matches.append(
            {"strength": strength[e], "path": [ctx.concepts[c] for c in chain], "association": association_out(ctx, e)}
        )
    return {"total": len(strength), "matches": matches}


def _bits(result: dict[str, Any]) -> Any:
    """Floats compared by their bits, so -0.0, NaN-free rounding differences all show."""
    if isinstance(result, dict):
        return {k: _bits(v) for k, v in result.items()}
    if isinstance(result, list):
        return [_bits(v) for v in result]
    if isinstance(result, float):
        return struct.pack("<d", result)
    return result


WEIGHTS = [1.0, 1.0, 1.0, 0.5, 2.0, -1.0, 0.3, 3.0, 1e-3, 1e-9, 7.5, -0.25]


def _matches_only(ctx: Context, origins: list[str], decay: float, limit: int) -> Any:
    """The matches of a walk that stops once scoring is done (evidence's), computed afresh."""
    ctx.read_cache.pop("activations", None)
    found = activation.activation(ctx, origins, decay, limit, total=False)
    ctx.read_cache.pop("activations", None)
    return _bits(lane_wire.render_activation(ctx, found)["matches"])


def _random_graph(rng: random.Random, n_concepts: int, n_assertions: int, hubs: int = 0) -> Context:
    ctx = Context(1, "g", Meta())
    names = [f"c{i}" for i in range(n_concepts)]
    labels = ["l0", "l1", "l2"]
    for _i in range(n_assertions):
        if hubs and rng.random() < 0.4:
            s = names[rng.randrange(hubs)]
        else:
            s = rng.choice(names)
        o = s if rng.random() < 0.03 else rng.choice(names)  # some self-loops
        if rng.random() < 0.5:
            s, o = o, s
        w = rng.choice(WEIGHTS)
        src = f"src{rng.randrange(6)}" if rng.random() < 0.8 else None
        ctx.assert_association(s, rng.choice(labels), o, w, src, None)
        if rng.random() < 0.03:
            ctx.retract_association(s, rng.choice(labels), o)  # dead edges
        if rng.random() < 0.01:
            ctx.retract_source(f"src{rng.randrange(6)}")
        if rng.random() < 0.05:
            lane_wire.activate(ctx, [rng.choice(names)], 0.5, 5)  # cache built at odd moments
    if rng.random() < 0.5 and ctx.find_concept(names[0]) is not None:
        ctx.add_alias(CONCEPT, "alias-of-c0", names[0])
    return ctx


@pytest.mark.parametrize("seed", range(80))
def test_activate_matches_heap_walk(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    ctx = _random_graph(rng, n, rng.randint(0, 4 * n), hubs=rng.choice([0, 0, 2]))
    for _ in range(8):
        origins = [f"c{rng.randrange(n + 2)}" for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.2:
            origins.append("alias-of-c0")
        if rng.random() < 0.1 and origins:
            origins.append(origins[0])  # duplicates
        decay = rng.choice([0.5, 0.5, 0.1, 0.9, 0.99, 0.3333, 1.0, 0.0, 1e-5, rng.random()])
        limit = rng.choice([0, 1, 3, 20, 1000])
        plain = _bits(plain_activate(ctx, origins, decay, limit))
        assert _matches_only(ctx, origins, decay, limit) == plain["matches"], (origins, decay, limit)
        ours = lane_wire.activate(ctx, origins, decay, limit)
        assert _bits(ours) == plain, (origins, decay, limit)


@pytest.mark.parametrize("seed", range(6))
def test_activate_hub_graph_matches(seed: int) -> None:
    """A larger graph with hubs: many bands, many ties of equal weights and flows."""
    rng = random.Random(1000 + seed)
    ctx = _random_graph(rng, 400, 2500, hubs=5)
    for decay in (0.5, 0.75, 0.2):
        origins = [f"c{rng.randrange(400)}"]
        plain = _bits(plain_activate(ctx, origins, decay, 20))
        assert _matches_only(ctx, origins, decay, 20) == plain["matches"]
        assert _bits(lane_wire.activate(ctx, origins, decay, 20)) == plain


def test_activate_equal_weights_grid() -> None:
    """Uniform weights make many equal activations: producer and parent ties by concept id."""
    ctx = Context(1, "grid", Meta())
    for i in range(12):
        for j in range(12):
            if j + 1 < 12:
                ctx.assert_association(f"n{i}-{j}", "r", f"n{i}-{j + 1}", 1.0, "s", None)
            if i + 1 < 12:
                ctx.assert_association(f"n{i}-{j}", "d", f"n{i + 1}-{j}", 1.0, "s", None)
    for origins in (["n0-0"], ["n5-5"], ["n0-0", "n11-11"], ["n3-7", "n7-3"]):
        for decay in (0.5, 0.9):
            for limit in (20, 1000):
                ours = lane_wire.activate(ctx, origins, decay, limit)
                assert _bits(ours) == _bits(plain_activate(ctx, origins, decay, limit))


@pytest.mark.parametrize("seed", range(40))
def test_run_prefixes_hold_the_band_top(seed: int) -> None:
    """The prefixes hold exactly the `limit` strongest scores of the band (the kth the walk trims by)."""
    import numpy as np

    rng = random.Random(seed)
    lens = np.array([rng.randint(0, 40) for _ in range(rng.randint(1, 6))], dtype=np.int64)
    runs = [sorted((rng.choice([0.0, 0.5, 1.0, 1.0, 2.0, 3.0]) for _ in range(n)), reverse=True) for n in lens]
    prod = np.array([v for run in runs for v in run], dtype=np.float64)
    scored = np.array([rng.random() < 0.7 for _ in range(len(prod))], dtype=bool) & (prod > 0)
    for limit in (1, 2, 5, 20):
        got = np.sort(banded._run_prefixes(prod, scored, lens, limit))[::-1][:limit]
        want = np.sort(prod[scored])[::-1][:limit]
        assert got.tolist() == want.tolist(), (lens.tolist(), limit)


@pytest.mark.parametrize("seed", range(12))
def test_activate_bands_of_hubs_with_tied_runs(seed: int) -> None:
    """Several hubs settle in one band, each with a long run of few distinct weights (the band's
    top is taken from each run's first `limit` scored entries), linked to each other so some of
    their entries belong to the other hub."""
    rng = random.Random(7000 + seed)
    ctx = Context(1, "hubs", Meta())
    hubs = [f"h{i}" for i in range(rng.randint(2, 5))]
    for h in hubs:
        for j in range(rng.randint(30, 90)):
            leaf = f"{h}-{j}" if rng.random() < 0.7 else f"shared{rng.randrange(20)}"
            ctx.assert_association(h, "r", leaf, rng.choice([1.0, 1.0, 2.0, 2.0, 3.0, 0.5]), "s", None)
    for a, b in zip(hubs, hubs[1:], strict=False):
        ctx.assert_association(a, "link", b, rng.choice([1.0, 3.0, 10.0]), "s", None)
    for _ in range(6):
        origins = rng.sample(hubs, rng.randint(1, len(hubs)))
        decay = rng.choice([0.5, 0.9, 0.2])
        for limit in (1, 3, 7, 20, 200):
            ours = lane_wire.activate(ctx, origins, decay, limit)
            assert _bits(ours) == _bits(plain_activate(ctx, origins, decay, limit)), (origins, decay, limit)
            assert (
                _matches_only(ctx, origins, decay, limit)
                == _bits(plain_activate(ctx, origins, decay, limit))["matches"]
            )


@pytest.mark.parametrize("decay", [0.5, 0.9, 0.99, 0.999999])
@pytest.mark.parametrize("ratio", [0.3, 0.49, 0.51, 0.8, 0.85, 0.95, 0.999])
def test_activate_late_improvement_inside_a_band(decay: float, ratio: float) -> None:
    """x first hears from the origin directly, then more strongly through y: x must not be
    settled at the weaker value, whatever the band width."""
    ctx = Context(1, "band", Meta())
    ctx.assert_association("o", "r", "y", 1.0, "s", None)
    ctx.assert_association("o", "r", "x", ratio, "s", None)
    ctx.assert_association("y", "r", "x", 100.0, "s", None)
    ctx.assert_association("x", "r", "z", 5.0, "s", None)
    ctx.assert_association("z", "r", "w", 1.0, "s", None)
    for limit in (1, 2, 20):
        assert _bits(lane_wire.activate(ctx, ["o"], decay, limit)) == _bits(plain_activate(ctx, ["o"], decay, limit))


@pytest.mark.parametrize("decay", [1e-5, 0.5, 5e-324, 1e-300])
def test_activate_scores_that_underflow(decay: float) -> None:
    """Sub-normal sums: some scores round to zero and must not count in `total`."""
    ctx = Context(1, "tiny", Meta())
    for i, w in enumerate([1e-318, 5e-324, 1.0, 1e-310, 2.0, 1e-300]):
        ctx.assert_association("o", "r", f"x{i}", w, "s", None)
        ctx.assert_association(f"x{i}", "r", f"y{i}", w, "s", None)
    for limit in (1, 20):
        assert _bits(lane_wire.activate(ctx, ["o"], decay, limit)) == _bits(plain_activate(ctx, ["o"], decay, limit))


# ----- import: association-line shortcuts vs the full checks --------------------------------


def _parse_outcome(text: str, fast: bool) -> Any:
    from taguru_server.store.transfer import importer

    saved = importer.FAST_PATHS
    importer.FAST_PATHS = fast
    try:
        batches = importer.parse_stream(text)
    except importer.ParseError as exc:
        return ("error", str(exc))
    except Exception as exc:  # noqa: BLE001 - both paths must fail the same way
        return ("exception", type(exc).__name__, str(exc))
    finally:
        importer.FAST_PATHS = saved
    out = []
    for b in batches:
        rows = [(s, lab, o, struct.pack("<d", w), type(w).__name__, p) for s, lab, o, w, p in b.associations]
        out.append((b.context, b.source, b.first_line, b.last_line, b.needs_passage_line, rows, b.aliases, b.passage))
    return out


ASSOC_VARIANTS = [
    '{"subject": "青嶺酒造", "label": "杜氏", "object": "高瀬", "weight": 1.0, "paragraph": 0}',
    '{"subject":"a","label":"b","object":"c","weight":-2.5e3}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 1}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 1e400}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 1000000.0000001}',
    '{"subject": "a", "label": "b", "object": "c", "weight": -1000000.0}',
    '{"subject": "a", "label": "b", "object": "c", "weight": -0.0, "paragraph": 4294967295}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": 4294967296}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": 99999999999999999999999}',
    '{"subject": "", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "a\\u0000", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "a\\"q", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "\\ud800", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "' + "字" * 256 + '", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "' + "字" * 342 + '", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "' + "a" * 1024 + '", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "' + "a" * 1025 + '", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "source": "x"}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "extra": 1}',
    '{"subject": "a", "label": "b", "object": "c"}',
    '{"subject": "a", "label": "b", "object": "c", "weight": "1.0"}',
    '{"subject": "a", "label": "b", "object": "c", "weight": true}',
    '{"subject": "a", "label": "b", "object": "c", "weight": NaN}',
    '{"subject": 1, "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "a", "subject": "z", "label": "b", "object": "c", "weight": 0.5}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": -1}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": 1.0}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": 01}',
    '{"subject": "a", "label": "b", "object": "c", "weight": .5}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5,}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5} x',
    '{ "subject" : "a" ,\t"label":"b","object":"c","weight":5E-1 }',
    '{"label": "b", "subject": "a", "object": "c", "weight": 0.5}',
    '\ufeff{"subject": "a", "label": "b", "object": "c", "weight": 0.5}',
    "[1, 2]",
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": null}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": 9999999999}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": 12}\r',
    '  {"subject": "a", "label": "b", "object": "c", "weight": 1E5}\t ',
    '\u3000{"subject": "a", "label": "b", "object": "c", "weight": 1e-5}\u3000',
    '{"subject": "' + "b" * 256 + '", "label": "' + "字" * 257 + '", "object": "c", "weight": 0.5}',
    '{"subject": "a", "label": "b", "object": "c", "weight": 0.5, "paragraph": 0}' + " " * 5000,
]


@pytest.mark.parametrize("index", range(len(ASSOC_VARIANTS)))
def test_import_association_shortcuts(index: int) -> None:
    line = ASSOC_VARIANTS[index]
    header = '{"taguru_batch": 1, "context": "c", "source": "s"}'
    for text in (f"{header}\n{line}\n", f"{line}\n{header}\n", f'{header}\n{{"passage": "p"}}\n{line}\n{line}\n'):
        assert _parse_outcome(text, True) == _parse_outcome(text, False), text


def test_import_shortcuts_on_a_generated_stream() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from generate import generate

    text = generate(300, seed=3).text
    assert _parse_outcome(text, True) == _parse_outcome(text, False)


@pytest.mark.parametrize("seed", range(4))
def test_activate_after_scoring_closes(seed: int) -> None:
    """limit 1 on a large sparse graph: scoring closes after a few bands and the rest of the
    reach is found by relaxation; `total` must still count every reached edge."""
    rng = random.Random(500 + seed)
    ctx = _random_graph(rng, 1500, 4000, hubs=3)
    for decay in (0.5, 0.8, 0.95):
        for limit in (1, 2):
            origins = [f"c{rng.randrange(1500)}"]
            plain = _bits(plain_activate(ctx, origins, decay, limit))
            assert _matches_only(ctx, origins, decay, limit) == plain["matches"]
            ours = lane_wire.activate(ctx, origins, decay, limit)
            assert _bits(ours) == plain


# ----- paragraph split: fast path vs the line walk of §2.6 ----------------------------------

_WS = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"
)


def plain_split(text: str) -> list[str]:
    out, start = [], None
    lines = text.split("\n")

    def join(a: int, b: int) -> str:
        tail = lines[b][:-1] if lines[b].endswith("\r") else lines[b]
        return tail if a == b else "\n".join(lines[a:b]) + "\n" + tail

    for i, line in enumerate(lines):
        content = line[:-1] if line.endswith("\r") else line
        if not content.strip(_WS):
            if start is not None:
                out.append(join(start, i - 1))
                start = None
        elif start is None:
            start = i
    if start is not None:
        out.append(join(start, len(lines) - 1))
    return out


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["a", "字", "\n", "\n", "\n\n", " ", "\t", "\r", "\u3000", "\x0b", "\x85", "\u2028", "\x1c", "b c"]
        ),
        max_size=30,
    ).map("".join)
)
def test_split_paragraphs_fast_path(text: str) -> None:
    assert split_paragraphs(text) == plain_split(text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.sampled_from(
                ["a", "字", "\n", "\n", "\n\n", "\n\n\n", " ", "\t", "\r", "\u3000", "\x0b", "\x85", "\u2028", "b c"]
            ),
            max_size=20,
        ).map("".join),
        max_size=6,
    )
)
def test_split_many_is_the_plain_split_of_each(texts: list[str]) -> None:
    assert split_many(texts) == [plain_split(t) for t in texts]
    assert paragraph_counts(texts) == [len(plain_split(t)) for t in texts]


# ----- camelCase pieces: run filter vs the character walk of §9.1 step 2 --------------------


def plain_camel(raw: str) -> list[str]:
    import re
    import unicodedata

    text = unicodedata.normalize("NFKC", raw)
    out = []
    for m in re.finditer(r"[A-Za-z0-9]+", text):
        run, starts = m.group(), [0]
        for i in range(1, len(run)):
            c, p = run[i], run[i - 1]
            if "A" <= c <= "Z":
                if ("a" <= p <= "z") or p.isdigit():
                    starts.append(i)
                elif "A" <= p <= "Z" and i + 1 < len(run) and "a" <= run[i + 1] <= "z":
                    starts.append(i)
        if len(starts) >= 2:
            bounds = starts + [len(run)]
            out.extend(run[a:b].lower() for a, b in zip(bounds, bounds[1:], strict=False))
    return out


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(list("aAbBzZ09 -_éＡｂ１") + ["HTTP", "Server", "U64", "Max"]), max_size=14).map("".join)
)
def test_camel_pieces(raw: str) -> None:
    from taguru_server.store.text import camel_terms

    assert camel_terms(raw) == plain_camel(raw)


# ----- the compiled JSON encoder against the plain writer ---------------------------------


def _random_float(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.3:
        return float(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])  # any bit pattern
    if roll < 0.45:
        specials = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e16, -1e16, 1e15, 9999999999999998.0]
        specials += [1e-5, 1e-4, 9.999999999999999e-5, 1e21, 1e22, 1.7976931348623157e308, 0.1, 1.0, -1.0, 123.0]
        return rng.choice(specials)
    if roll < 0.6:
        return float(rng.randint(-(10**18), 10**18))
    if roll < 0.8:
        return rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-330, 308)
    return rng.random() * 10.0 ** rng.randint(-8, 20)


def _random_wire_value(rng: random.Random, depth: int = 0) -> Any:
    from taguru_server.store.wire import F32, RawJSON, encoded

    roll = rng.random()
    if depth < 3 and roll < 0.15:
        return [_random_wire_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 3 and roll < 0.3:
        return {rand_text(rng, 6): _random_wire_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if depth < 3 and roll < 0.33:
        return encoded({"k": _random_wire_value(rng, depth + 1), "w": _random_float(rng)})
    if depth < 3 and roll < 0.36:
        return tuple(_random_wire_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    choices = [
        lambda: _random_float(rng),
        lambda: F32(_random_float(rng)),
        lambda: np.float32(rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-45, 38)),
        lambda: np.float64(_random_float(rng)),
        lambda: rng.choice([float("nan"), float("inf"), -float("inf")]),
        lambda: rng.randint(-(2**70), 2**70),
        lambda: rng.randint(-5, 5),
        lambda: np.int64(rng.randint(-(2**40), 2**40)),
        lambda: rand_text(rng) + "".join(chr(rng.randint(0, 0x3F)) for _ in range(rng.randint(0, 3))),
        lambda: "".join(chr(rng.choice([rng.randint(0x80, 0x2FFF), rng.randint(0x10000, 0x10FFFF)])) for _ in range(3)),
        lambda: RawJSON('{"raw":[1,2.5]}'),
        lambda: rng.choice([None, True, False]),
    ]
    return rng.choice(choices)()


@pytest.mark.parametrize("seed", range(40))
def test_compiled_encoder_prints_what_the_plain_writer_prints(seed: int) -> None:
    from taguru_server.store.wire import dumps, dumps_bytes, plain_dumps

    rng = random.Random(seed)
    for _ in range(300):
        value = _random_wire_value(rng)
        plain = plain_dumps(value)
        assert dumps(value) == plain
        assert dumps_bytes(value) == plain.encode("utf-8")


@pytest.mark.parametrize("seed", range(10))
def test_encoding_in_pieces_prints_what_one_call_prints(seed: int) -> None:
    from taguru_server.store.wire import Encoded, dumps_bytes, encode_in_pieces

    rng = random.Random(seed)
    for _ in range(40):
        rows = [_random_wire_value(rng) for _ in range(rng.randint(0, 40))]
        value = {"total": len(rows), "rows": rows, "nested": {"rows": tuple(rows), "n": None}}
        whole = dumps_bytes(value)
        for piece in (1, 3, 1024):
            assert encode_in_pieces(value, piece).data == whole
        inner = encode_in_pieces(rows, 2)
        spliced = {"total": len(rows), "rows": inner, "nested": {"rows": inner, "n": None}}
        assert encode_in_pieces(spliced, 5).data == whole == dumps_bytes(spliced)
        assert isinstance(inner, Encoded)


def test_compiled_encoder_floats_and_refusals() -> None:
    from taguru_server.store.wire import F32, dumps, format_f32, format_f64, plain_dumps

    rng = random.Random(5)
    for _ in range(50_000):
        v = _random_float(rng)
        assert dumps(v) == format_f64(v) == plain_dumps(v)
        assert dumps([F32(v)]) == f"[{format_f32(F32(v))}]"
    assert dumps([1e16, -0.0, 5e-324, 1e-7]) == "[1e+16,-0.0,5e-324,1e-7]"
    for bad in ({1: 2}, object(), [{"x": {1, 2}}]):
        with pytest.raises(TypeError):
            dumps(bad)
    lone = "a\ud800b"
    assert dumps(lone) == plain_dumps(lone)


# ----- glosses read from the activation graph against the plain scan ----------------------


def plain_gloss_edges(ctx: Context, kind: int, record: int) -> list[int]:
    """The definition: over every edge of the concept (label), live ones by |sum| desc, then id."""
    if kind == CONCEPT:
        edges = ctx.out_edges[record] + [e for e in ctx.in_edges[record] if ctx.edges.subject[e] != ctx.edges.object[e]]
        n = 4
    else:
        edges = ctx.label_edges[record]
        n = 3
    live = sorted((-abs(ctx.edges.weight[e]), e) for e in edges if ctx.edges.count[e] > 0)
    return [e for _k, e in live[:n]]


@pytest.mark.parametrize("seed", range(60))
def test_gloss_edges_match_the_plain_scan(seed: int) -> None:
    from taguru_server.store.model.context import LABEL

    rng = random.Random(7000 + seed)
    n = rng.randint(1, 80)
    ctx = _random_graph(rng, n, rng.randint(0, 6 * n), hubs=min(n, rng.choice([0, 2, 5])))
    for _round in range(3):
        if rng.random() < 0.6:
            lane_wire.activate(ctx, [f"c{rng.randrange(n)}"], 0.5, 5)  # the graph current (or not)
        for c in range(len(ctx.concepts)):
            assert gloss.gloss_edges(ctx, CONCEPT, c) == plain_gloss_edges(ctx, CONCEPT, c)
        for lab in range(len(ctx.labels)):
            assert gloss.gloss_edges(ctx, LABEL, lab) == plain_gloss_edges(ctx, LABEL, lab)
            assert gloss.label_gloss(ctx, lab).startswith(ctx.labels[lab] + "。")
        # writes between rounds: cancelled sums (live, zero), retractions, new edges
        for _ in range(rng.randint(0, 6)):
            s, o = f"c{rng.randrange(n)}", f"c{rng.randrange(n)}"
            lab = rng.choice(["l0", "l1", "l2"])
            ctx.assert_association(s, lab, o, 1.0, "z", None)
            if rng.random() < 0.5:
                ctx.assert_association(s, lab, o, -1.0, "y", None)  # sums to zero, still live
            if rng.random() < 0.2:
                ctx.retract_association(s, lab, o)


# ----- per-version caches of evidence candidates and citations ----------------------------


@pytest.mark.parametrize("seed", range(20))
def test_cached_candidates_and_citations_follow_every_write(seed: int) -> None:
    """A cached candidate or citation is always the one built fresh from the current context."""
    from taguru_server.stages.candidates import _association_fields, association_candidate
    from taguru_server.stages.cite import resolve_citations
    from taguru_server.store.wire import dumps, plain_dumps

    rng = random.Random(9000 + seed)
    ctx = Context(1, "g", Meta())
    names = [f"c{i}" for i in range(6)]
    for _step in range(40):
        roll = rng.random()
        src = f"s{rng.randrange(4)}"
        if roll < 0.4:
            rows = [(rng.choice(names), "l", rng.choice(names), rng.choice(WEIGHTS), rng.choice([0, 1, 2, None]))]
            if ctx.find_source(src) is None or ctx.passages.get(ctx.find_source(src) or 0) is None:
                rows = [(s, lab, o, w, None) for s, lab, o, w, _p in rows]
            ctx.assert_many(rows, src)
        elif roll < 0.7:
            text = "\n\n".join(rand_text(rng) for _ in range(rng.randint(1, 3)))
            sections = [(p, f"sec{rng.randrange(3)}") for p in range(3) if rng.random() < 0.5]
            locators = [(p, "page", str(rng.randrange(9))) for p in range(3) if rng.random() < 0.5]
            ctx.store_passage(src, text, [], sections, locators, [], None, None)
        elif roll < 0.8:
            ctx.retract_source(src)
        elif roll < 0.9 and ctx.find_source(src) is not None:
            ctx.remove_passage(ctx.find_source(src) or 0)
        for e in range(len(ctx.edges.subject)):
            cached = association_candidate(ctx, e, "graph_activate", 1)
            fresh = _association_fields(ctx, e)
            assert (cached.canonical_key, cached.source, cached.locators, cached.corroborating) == (
                fresh[0],
                fresh[2],
                fresh[3],
                fresh[4],
            )
            assert dumps(cached.payload) == plain_dumps(association_out(ctx, e)) == dumps(dict(fresh[1]))
            found = resolve_citations(ctx, (cached,))
            assert found == {
                loc: c for loc in cached.locators if not isinstance(c := citations.find_citation(ctx, *loc), str)
            }


# ----- BM25 on hub-heavy text: terms in almost every paragraph, many ties ------------------


@pytest.mark.parametrize("seed", range(8))
def test_bm25_hub_terms_pruned_top_k_matches_exhaustive(seed: int) -> None:
    """Zipf text where the top words sit in nearly every paragraph (and duplicate paragraphs
    tie): whichever way top-k scores (grown candidates, or every posting densely) it returns
    the exhaustive ranking, ties broken by source name and paragraph."""
    rng = random.Random(4242 + seed)
    vocab = ["あか", "いき", "うく", "えけ", "おこ", "かさ", "きし", "くす", "けせ", "こそ", "sake", "toji"]
    vocab += [rand_text(rng, 4) for _ in range(30)]
    cum = list(itertools.accumulate(1.0 / k for k in range(1, len(vocab) + 1)))
    ctx = Context(1, "t", Meta())
    for i in range(rng.randint(50, 160)):
        pars = []
        for _p in range(rng.randint(1, 4)):
            pars.append("".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(6, 30))))
        if rng.random() < 0.2:
            pars.append(pars[0])  # a tie within the source
        ctx.store_passage(
            f"s{rng.randrange(10**4):04d}-{i}", "\n\n".join(pars), [], [], [], [rng.choice("ab")], 1, None
        )
        if rng.random() < 0.05:
            ctx.retract_source(f"s{rng.randrange(10**4):04d}-{rng.randrange(i + 1)}")
    for _ in range(25):
        query = " ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(1, 6)))
        limit = rng.choice([1, 3, 5, 10, 200])
        assert ours_search(ctx, query, limit) == reference_search(ctx, query, limit), (query, limit)
        allowed = {ctx.sources[sid] for sid, p in ctx.passages.items() if "a" in p.tags}
        assert ours_search(ctx, query, limit, ["a"]) == reference_search(ctx, query, limit, allowed)


@pytest.mark.parametrize("seed", range(30))
def test_ranked_facets_match_query_then_rank(seed: int) -> None:
    """The query stage's per-(subject, label) lists give /query's first matches exactly."""
    rng = random.Random(5150 + seed)
    n = rng.randint(1, 40)
    ctx = _random_graph(rng, n, rng.randint(0, 8 * n), hubs=min(n, 3))
    for _round in range(4):
        for _ in range(6):
            subjects = [f"c{rng.randrange(n + 1)}" for _ in range(rng.randint(0, 3))]
            labels = [rng.choice(["l0", "l1", "l2", "nope"]) for _ in range(rng.randint(0, 3))]
            limit = rng.choice([0, 1, 3, 100])
            plain = query_lane.ranked_edges(ctx, query_lane.query_edges(ctx, subjects, labels, None), limit)
            assert query_lane.ranked_facets(ctx, subjects, labels, limit) == plain, (subjects, labels, limit)
        s, o = f"c{rng.randrange(n)}", f"c{rng.randrange(n)}"
        ctx.assert_association(s, rng.choice(["l0", "l1"]), o, rng.choice(WEIGHTS), "w", None)
        if rng.random() < 0.3:
            ctx.retract_association(s, "l0", o)


# ----- near-dup through the prefix index against the quadratic rule -----------------------


def _near_dup_texts(rng: random.Random, n: int) -> list[str]:
    bases = ["".join(rng.choice("abcdefgh酒造杜氏") for _ in range(rng.randint(0, 60))) for _ in range(max(1, n // 4))]
    out = []
    for _ in range(n):
        t = list(rng.choice(bases))
        for _edit in range(rng.choice([0, 0, 1, 2, 5, 20])):
            if t and rng.random() < 0.5:
                del t[rng.randrange(len(t))]
            else:
                t.insert(rng.randint(0, len(t)), rng.choice("abcdefgh酒造杜氏 "))
        out.append("".join(t))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_near_dup_prefix_index_matches_the_quadratic_rule(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from stage_support import cand, fused

    from taguru_server.stages import near_dup
    from taguru_server.stages.near_dup import bigram_set, suppress_near_duplicates

    monkeypatch.setattr(near_dup, "INDEXED_FROM", [1, 24, 10**6][seed % 3])  # index always, often, never
    rng = random.Random(333 + seed)
    n = rng.choice([24, 30, 60, 200])
    texts = _near_dup_texts(rng, n)
    ranked = tuple(
        fused(cand("passage" if rng.random() < 0.9 else "association", f"t\x00{i}", "l", i + 1, text=t), i + 1)
        for i, t in enumerate(texts)
    )
    for threshold in (0.9, 0.5, 1.0, 0.3, rng.random()):
        kept, dropped = suppress_near_duplicates(ranked, threshold)
        plain_kept: list[Any] = []
        plain_dropped = []
        for f in ranked:
            if f.candidate.kind != "passage":
                plain_kept.append(f)
                continue
            g = bigram_set(f.candidate.text)
            hit = None
            for k in plain_kept:
                if k.candidate.kind != "passage":
                    continue
                h = bigram_set(k.candidate.text)
                total = len(g) + len(h)
                if total == 0 or 2 * len(g & h) / total >= threshold:
                    hit = k
                    break
            if hit is None:
                plain_kept.append(f)
            else:
                plain_dropped.append((f.candidate_id, hit.candidate_id))
        assert list(kept) == plain_kept, threshold
        assert [(o.candidate_id, o.duplicate_of) for o in dropped] == plain_dropped


@pytest.mark.parametrize("seed", range(20))
def test_kept_activations_follow_writes_and_aliases(seed: int) -> None:
    """A kept activation is the walk's answer for the current graph, whatever was asked before."""
    rng = random.Random(8080 + seed)
    n = rng.randint(2, 30)
    ctx = _random_graph(rng, n, rng.randint(1, 5 * n), hubs=min(n, 2))
    asked = [[f"c{rng.randrange(n)}" for _ in range(rng.randint(1, 2))] for _ in range(4)]
    for _round in range(6):
        for origins in asked + [["an-alias"]]:
            for decay in (0.5, -0.0, 0.0, 0.9):
                got = _bits(lane_wire.activate(ctx, origins, decay, 10))
                assert got == _bits(plain_activate(ctx, origins, decay, 10)), (origins, decay)
        roll = rng.random()
        s, o = f"c{rng.randrange(n)}", f"c{rng.randrange(n)}"
        if roll < 0.5:
            ctx.assert_association(s, "l0", o, rng.choice(WEIGHTS), "w", None)
        elif roll < 0.7:
            ctx.retract_association(s, "l0", o)
        elif ctx.find_concept(s) is not None:
            ctx.remove_alias(CONCEPT, "an-alias")
            ctx.add_alias(CONCEPT, "an-alias", s)  # the same name now reaches another concept


@pytest.mark.parametrize("seed", range(20))
def test_edges_touching_the_settled_nodes_are_counted_from_their_adjacency_as_from_the_edge_list(seed: int) -> None:
    """`_touching` reads the settled nodes' adjacency when that is shorter than the edge list: self-loops,
    parallel edges and edges with both ends settled count once, as the scan of every edge counts them."""
    rng = random.Random(seed)
    ctx = _random_graph(rng, rng.randint(5, 60), rng.randint(10, 300), hubs=rng.randint(0, 2))
    for _ in range(rng.randint(0, 5)):  # self-loops
        c = ctx.concepts[rng.randrange(len(ctx.concepts))]
        ctx.assert_association(c, "self", c, 1.0, None, None)
    g = activation_graph.ActivationGraph(ctx)
    for _ in range(30):
        settled = np.zeros(len(ctx.concepts), dtype=bool)
        settled[rng.sample(range(len(ctx.concepts)), rng.randint(0, len(ctx.concepts)))] = True
        expected = int(np.count_nonzero(settled[g.use_s] | settled[g.use_o]))
        assert banded._touching(g, settled) == expected


@pytest.mark.parametrize("seed", range(4))
def test_activate_reads_only_the_prefix_of_a_hub_that_can_still_count(seed: int) -> None:
    """Big hubs with many equal weights: once `limit` edges are scored, a node's entries that can
    neither score into the top nor carry flow are skipped; ties at the limit-th score keep the
    lower edge id as the heap walk does."""
    rng = random.Random(9000 + seed)
    ctx = _random_graph(rng, 1200, 12000, hubs=3)
    for decay in (0.5, 0.9, 0.25):
        for limit in (1, 3, 25):
            origins = [f"c{rng.randrange(3)}"] if rng.random() < 0.7 else [f"c{rng.randrange(1200)}"]
            plain = _bits(plain_activate(ctx, origins, decay, limit))
            assert _matches_only(ctx, origins, decay, limit) == plain["matches"], (origins, decay, limit)
            assert _bits(lane_wire.activate(ctx, origins, decay, limit)) == plain
