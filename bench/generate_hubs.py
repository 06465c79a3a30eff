"""Deterministic hub-heavy corpus: Zipf-distributed text, two entities per paragraph, hub entities.

Unlike bench/generate.py (a sake world with structured documents), this corpus is built to
stress the tails: entity popularity follows a Zipf law, so a few "hub" entities sit in tens of
thousands of paragraphs and carry tens of thousands of edges; the text is drawn word by word
from a Zipf vocabulary, so the most common words (and their character bigrams) occur in almost
every paragraph.

    python bench/generate_hubs.py --size 100k --out bench/out/hubs-100k.jsonl

Per paragraph: about 40 words (Zipf, exponent 1.0, over a vocabulary of size/5 words of two to
four kana or kanji), the names of two entities (Zipf, exponent 1.0, over size/5 entities), and
five associations between those two entities under distinct labels (a Zipf choice among 30
labels; direction drawn per association; weight 1.0, sometimes 0.5 or a negation at −1.0).
Five paragraphs form one source (one batch). Everything follows from the seed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CONTEXT = "hubs"
SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000, "1m": 1_000_000}
WORDS_PER_PARAGRAPH = 40
PARAGRAPHS_PER_SOURCE = 5
ASSOCIATIONS_PER_PARAGRAPH = 5
N_LABELS = 30

KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん"
KANJI = "山川田中井上松竹梅花菊正宗大関黒龍朝日春秋冬夏水石岩森林谷峰浜海波風雪星光明泉清滝"
SUFFIXES = ("社", "会", "堂", "館", "組", "屋", "園", "庵")
LABEL_NAMES = (
    "所在地",
    "創業者",
    "提携先",
    "取引先",
    "出身",
    "所属",
    "代表",
    "上位組織",
    "関連",
    "競合",
    "後継",
    "前身",
    "協力",
    "出資",
    "受賞",
    "製品",
    "原料",
    "技術",
    "顧問",
    "師匠",
    "弟子",
    "支店",
    "本店",
    "供給元",
    "販売先",
    "共同研究",
    "姉妹",
    "友好",
    "監修",
    "後援",
)


@dataclass
class HubCorpus:
    """The stream and what the benchmark draws its queries from."""

    size: int
    seed: int
    text: str
    entities: list[str]
    entity_cum: list[float]
    words: list[str]
    word_cum: list[float]
    labels: list[str]
    paragraphs: int
    association_lines: int


def zipf_cum(n: int, s: float = 1.0) -> list[float]:
    """Cumulative Zipf weights 1/k^s for ranks 1..n (for `random.choices(cum_weights=...)`)."""
    return list(itertools.accumulate(1.0 / (k**s) for k in range(1, n + 1)))


def _distinct(rng: random.Random, count: int, make) -> list[str]:  # type: ignore[no-untyped-def]
    seen: dict[str, None] = {}
    while len(seen) < count:
        seen.setdefault(make(rng), None)
    return list(seen)


def _word(rng: random.Random) -> str:
    n = rng.choice((2, 2, 3, 3, 3, 4))
    return "".join(rng.choice(KANA if rng.random() < 0.7 else KANJI) for _ in range(n))


def _entity(rng: random.Random) -> str:
    return "".join(rng.choice(KANJI) for _ in range(rng.choice((2, 3, 3, 4)))) + rng.choice(SUFFIXES)


def generate(size: int | str, seed: int = 7) -> HubCorpus:
    """The whole JSONL stream for `size` paragraphs."""
    n = SIZES[size] if isinstance(size, str) else int(size)
    rng = random.Random(seed)
    n_entities = max(200, n // 5)
    n_words = max(500, n // 5)
    entities = _distinct(rng, n_entities, _entity)
    words = _distinct(rng, n_words, _word)
    e_cum = zipf_cum(n_entities)
    w_cum = zipf_cum(n_words)
    l_cum = zipf_cum(N_LABELS, 0.7)
    labels = list(LABEL_NAMES[:N_LABELS])
    out: list[str] = []
    n_par = n_assoc = 0
    batch = 0
    choices = rng.choices
    while n_par < n:
        batch += 1
        header: dict[str, object] = {"taguru_batch": 1, "context": CONTEXT, "source": f"doc/{batch:07d}"}
        if batch == 1:
            header["create"] = {"description": f"hub-heavy synthetic corpus, {n} paragraphs, seed {seed}"}
        pars: list[str] = []
        rows: list[str] = []
        for p in range(min(PARAGRAPHS_PER_SOURCE, n - n_par)):
            a, b = choices(entities, cum_weights=e_cum, k=2)
            while b == a:
                b = choices(entities, cum_weights=e_cum, k=1)[0]
            text = choices(words, cum_weights=w_cum, k=WORDS_PER_PARAGRAPH)
            text.insert(rng.randrange(len(text) + 1), a)
            text.insert(rng.randrange(len(text) + 1), b)
            pars.append("".join(text) + "。")
            picked: set[str] = set()
            while len(picked) < ASSOCIATIONS_PER_PARAGRAPH:
                picked.add(choices(labels, cum_weights=l_cum, k=1)[0])
            for lab in sorted(picked, key=labels.index):
                s, o = (a, b) if rng.random() < 0.7 else (b, a)
                roll = rng.random()
                weight = 1.0 if roll < 0.9 else 0.5 if roll < 0.97 else -1.0
                rows.append(
                    f'{{"subject": {json.dumps(s, ensure_ascii=False)}, "label": "{lab}", '
                    f'"object": {json.dumps(o, ensure_ascii=False)}, "weight": {weight}, "paragraph": {p}}}'
                )
                n_assoc += 1
        n_par += len(pars)
        out.append(json.dumps(header, ensure_ascii=False))
        out.append(json.dumps({"passage": "\n\n".join(pars), "date": 1_600_000_000 + batch}, ensure_ascii=False))
        out.extend(rows)
    return HubCorpus(n, seed, "\n".join(out) + "\n", entities, e_cum, words, w_cum, labels, n_par, n_assoc)


def queries(corpus: HubCorpus, count: int = 300, seed: int = 11) -> dict[str, list]:  # type: ignore[type-arg]
    """Hub-heavy query sets: origins and cues drawn by entity popularity, search text by word popularity."""
    rng = random.Random(seed)
    ents, e_cum = corpus.entities, corpus.entity_cum
    words, w_cum = corpus.words, corpus.word_cum
    pairs: list[list[str]] = []  # `count` per evidence request kind (the last 2·count drawn last)
    while len(pairs) < count:
        a, b = rng.choices(ents, cum_weights=e_cum, k=2)
        if a != b:
            pairs.append([a, b])
    resolve: list[str] = []
    while len(resolve) < count:
        name = rng.choices(ents, cum_weights=e_cum, k=1)[0]
        roll = rng.random()
        if roll < 0.5:
            resolve.append(name)
        elif roll < 0.75:
            i = rng.randrange(len(name) - 1)
            resolve.append(name[i : i + 2])  # containment
        else:
            i = rng.randrange(len(name))
            resolve.append(name[:i] + rng.choice(KANJI) + name[i + 1 :])  # a typo
    search: list[str] = []
    while len(search) < count:
        k = rng.randint(2, 5)
        parts = rng.choices(words, cum_weights=w_cum, k=k)
        if rng.random() < 0.4:
            parts.append(rng.choices(ents, cum_weights=e_cum, k=1)[0])
        search.append(" ".join(parts))
    label_sets = [rng.sample(corpus.labels[:10], 2) for _ in range(count)]
    while len(pairs) < 3 * count:
        a, b = rng.choices(ents, cum_weights=e_cum, k=2)
        if a != b:
            pairs.append([a, b])
    return {"pairs": pairs, "resolve": resolve, "search": search, "labels": label_sets}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="10k", help="1k, 10k, 100k, 1m or a paragraph count")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None, help="output file (default bench/out/hubs-SIZE.jsonl)")
    args = ap.parse_args(argv)
    size = args.size if args.size in SIZES else int(args.size)
    t0 = time.perf_counter()
    corpus = generate(size, args.seed)
    path = Path(args.out or Path(__file__).parent / "out" / f"hubs-{args.size}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(corpus.text, encoding="utf-8")
    print(
        f"{path}: {corpus.paragraphs} paragraphs, {corpus.association_lines} association lines, "
        f"{len(corpus.text.encode()) / 1e6:.1f} MB, generated in {time.perf_counter() - t0:.2f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
