"""Deterministic synthetic corpus for the benchmark: taguru JSONL import batches.

A fictional sake world (breweries, toji, towns, prefectures, rivers, brands, rice varieties)
is drawn from a seed; documents about it are then written as one batch per source, in
Japanese and English, with aliases, facts asserted by several sources, conflicting facts
(a different object for the same subject and label, some with negative weights) and
near-duplicate "mirror" documents.

    python bench/generate.py --size 10k --out bench/out/corpus-10k.jsonl

Everything is generated at run time; nothing large is committed. ``generate(size, seed)``
returns the stream text plus the world, which bench/run.py uses to draw its queries.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000}
CONTEXT = "bench"

# (kanji, reading) pairs; the readings are distinct so romanized aliases rarely collide.
KANJI = [
    ("青", "Ao"),
    ("嶺", "Mine"),
    ("霧", "Kiri"),
    ("沢", "Sawa"),
    ("雲", "Kumo"),
    ("居", "I"),
    ("白", "Shira"),
    ("鶴", "Tsuru"),
    ("月", "Tsuki"),
    ("桂", "Katsura"),
    ("山", "Yama"),
    ("川", "Kawa"),
    ("田", "Ta"),
    ("中", "Naka"),
    ("井", "Ii"),
    ("上", "Kami"),
    ("松", "Matsu"),
    ("竹", "Take"),
    ("梅", "Ume"),
    ("花", "Hana"),
    ("菊", "Kiku"),
    ("正", "Masa"),
    ("宗", "Mune"),
    ("大", "O"),
    ("関", "Seki"),
    ("黒", "Kuro"),
    ("龍", "Ryu"),
    ("朝", "Asa"),
    ("日", "Hi"),
    ("春", "Haru"),
    ("秋", "Aki"),
    ("冬", "Fuyu"),
    ("夏", "Natsu"),
    ("水", "Mizu"),
    ("石", "Ishi"),
    ("岩", "Iwa"),
    ("森", "Mori"),
    ("林", "Hayashi"),
    ("谷", "Tani"),
    ("峰", "Hou"),
    ("浜", "Hama"),
    ("海", "Umi"),
    ("波", "Nami"),
    ("風", "Kaze"),
    ("雪", "Yuki"),
    ("星", "Hoshi"),
    ("光", "Hikari"),
    ("明", "Akira"),
    ("泉", "Izumi"),
    ("清", "Kiyo"),
    ("滝", "Taki"),
    ("宮", "Miya"),
    ("福", "Fuku"),
    ("寿", "Kotobuki"),
    ("富", "Tomi"),
    ("金", "Kane"),
    ("銀", "Gin"),
    ("玉", "Tama"),
    ("鈴", "Suzu"),
    ("鹿", "Shika"),
    ("亀", "Kame"),
    ("鷹", "Taka"),
    ("東", "Higashi"),
    ("西", "Nishi"),
    ("南", "Minami"),
    ("北", "Kita"),
    ("高", "Kou"),
    ("長", "Naga"),
    ("広", "Hiro"),
    ("古", "Furu"),
    ("新", "Nii"),
    ("本", "Moto"),
    ("若", "Waka"),
    ("千", "Chi"),
    ("万", "Man"),
    ("桜", "Sakura"),
    ("藤", "Fuji"),
    ("柳", "Yanagi"),
    ("杉", "Sugi"),
    ("檜", "Hinoki"),
    ("泡", "Awa"),
    ("露", "Tsuyu"),
    ("霞", "Kasumi"),
    ("雫", "Shizuku"),
    ("蔵", "Kura"),
    ("稲", "Ine"),
    ("穂", "Ho"),
    ("里", "Sato"),
    ("野", "No"),
    ("原", "Hara"),
    ("島", "Shima"),
    ("坂", "Saka"),
    ("橋", "Hashi"),
    ("瀬", "Se"),
    ("湊", "Minato"),
    ("陽", "You"),
    ("照", "Teru"),
    ("紅", "Beni"),
]
GIVEN = [
    ("健一", "Kenichi"),
    ("誠", "Makoto"),
    ("浩二", "Koji"),
    ("隆", "Takashi"),
    ("大輔", "Daisuke"),
    ("拓也", "Takuya"),
    ("直樹", "Naoki"),
    ("修", "Osamu"),
    ("勇", "Isamu"),
    ("哲也", "Tetsuya"),
    ("和夫", "Kazuo"),
    ("正人", "Masato"),
    ("昭", "Akira"),
    ("茂", "Shigeru"),
    ("進", "Susumu"),
    ("清", "Kiyoshi"),
    ("実", "Minoru"),
    ("博", "Hiroshi"),
    ("剛", "Tsuyoshi"),
    ("聡", "Satoshi"),
    ("亮", "Ryo"),
    ("翔", "Sho"),
    ("陽介", "Yosuke"),
    ("健太", "Kenta"),
    ("優子", "Yuko"),
    ("恵子", "Keiko"),
    ("智子", "Tomoko"),
    ("直美", "Naomi"),
    ("由美", "Yumi"),
    ("真理", "Mari"),
    ("久美子", "Kumiko"),
    ("明美", "Akemi"),
    ("幸子", "Sachiko"),
    ("美穂", "Miho"),
    ("彩", "Aya"),
    ("香織", "Kaori"),
    ("一郎", "Ichiro"),
    ("次郎", "Jiro"),
    ("三郎", "Saburo"),
    ("信", "Shin"),
    ("豊", "Yutaka"),
    ("稔", "Minoru2"),
    ("光男", "Mitsuo"),
    ("秀樹", "Hideki"),
    ("雅人", "Masahito"),
    ("康", "Yasushi"),
    ("武", "Takeshi"),
    ("徹", "Toru"),
    ("功", "Isao"),
    ("登", "Noboru"),
    ("仁", "Hitoshi"),
    ("晃", "Akira2"),
    ("純", "Jun"),
    ("弘", "Hiromu"),
    ("義男", "Yoshio"),
    ("俊", "Shun"),
    ("悟", "Satoru"),
    ("渉", "Wataru"),
    ("学", "Manabu"),
    ("歩", "Ayumu"),
    ("望", "Nozomi"),
    ("薫", "Kaoru"),
    ("忍", "Shinobu"),
    ("操", "Misao"),
    ("栄", "Sakae"),
]
RICE = [
    ("山田錦", "Yamada Nishiki"),
    ("五百万石", "Gohyakumangoku"),
    ("雄町", "Omachi"),
    ("美山錦", "Miyama Nishiki"),
    ("八反錦", "Hattan Nishiki"),
    ("愛山", "Aiyama"),
    ("亀の尾", "Kame no O"),
    ("出羽燦々", "Dewa Sansan"),
    ("吟風", "Ginpu"),
    ("彗星", "Suisei"),
    ("越淡麗", "Koshi Tanrei"),
    ("秋田酒こまち", "Akita Sake Komachi"),
    ("八反", "Hattan"),
    ("神力", "Shinriki"),
    ("強力", "Goriki"),
    ("白鶴錦", "Hakutsuru Nishiki"),
    ("山酒4号", "Yamazake Yongo"),
    ("ひとごこち", "Hitogokochi"),
    ("千本錦", "Senbon Nishiki"),
    ("雪女神", "Yuki Megami"),
    ("華吹雪", "Hana Fubuki"),
    ("結の香", "Yui no Ka"),
    ("蔵の華", "Kura no Hana"),
    ("玉栄", "Tamasakae"),
    ("祝", "Iwai"),
    ("山恵錦", "Sankei Nishiki"),
    ("百万石乃白", "Hyakumangoku no Shiro"),
    ("京の輝き", "Kyo no Kagayaki"),
]
SCHOOLS = [
    "南部杜氏",
    "越後杜氏",
    "丹波杜氏",
    "但馬杜氏",
    "能登杜氏",
    "広島杜氏",
    "出雲杜氏",
    "備中杜氏",
    "山内杜氏",
    "諏訪杜氏",
]
TECHNIQUES = [
    "低温発酵",
    "生酛造り",
    "山廃仕込み",
    "速醸酛",
    "袋吊り",
    "槽搾り",
    "無濾過",
    "火入れ一回",
    "長期熟成",
    "木桶仕込み",
    "麹室の温度管理",
    "小仕込み",
]
TASTES = ["辛口", "甘口", "淡麗", "濃醇", "芳醇", "爽快", "旨口"]
CLIMATES = ["寒冷", "温暖", "多雪", "霧深い", "乾燥", "寒暖差が大きい"]
GEO = ["山あい", "盆地", "海沿い", "川沿い", "高原", "平野部"]
BREWERY_SUFFIX = [
    ("酒造", "Brewery"),
    ("酒蔵", "Sake Works"),
    ("本店", "Honten"),
    ("醸造", "Jozo"),
    ("酒造店", "Shuzoten"),
]
TOWN_SUFFIX = [("町", "Town"), ("村", "Village"), ("市", "City")]
LABEL_ALIASES = {
    "所在地": "located in",
    "創業": "founded",
    "杜氏": "toji",
    "使用米": "rice used",
    "代表銘柄": "flagship",
}
LANDMARKS = ["寺", "神社", "城跡", "温泉", "峠", "公園", "滝", "湖"]
YEASTS = [
    "協会6号酵母",
    "協会7号酵母",
    "協会9号酵母",
    "協会10号酵母",
    "協会14号酵母",
    "協会1801号酵母",
    "自社酵母",
    "蔵付き酵母",
]
AWARDS = [
    "全国新酒鑑評会金賞",
    "全国新酒鑑評会入賞",
    "県知事賞",
    "現代の名工",
    "国際酒類品評会銀賞",
    "国際酒類品評会金賞",
]
SECTIONS = ["概要", "沿革", "人", "水と米", "銘柄", "造り", "風土", "評判"]
FILLER_JA = [
    "地元では古くから親しまれている。",
    "冬の寒さが酒造りに向いている。",
    "蔵の見学は週末に受け付けている。",
    "近年は海外への出荷も増えている。",
    "蔵人は十名ほどである。",
    "季節ごとに限定酒が出る。",
]
FILLER_EN = [
    "Visitors can tour the cellar on weekends.",
    "The winters are cold and suit slow fermentation.",
    "Exports have grown in recent years.",
    "Locals have long favoured its sake.",
]


@dataclass
class World:
    """The facts the documents are written about, and the spellings they use."""

    breweries: list[str] = field(default_factory=list)
    toji: list[str] = field(default_factory=list)
    towns: list[str] = field(default_factory=list)
    prefs: list[str] = field(default_factory=list)
    rivers: list[str] = field(default_factory=list)
    brands: list[str] = field(default_factory=list)
    rice: list[str] = field(default_factory=list)
    alias: dict[str, str] = field(default_factory=dict)  # canonical -> English alias
    facts: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)  # subject -> (s, label, o)


@dataclass
class Corpus:
    """The generated stream and what it was made from."""

    size: int
    seed: int
    text: str
    world: World
    paragraphs: int
    batches: int
    association_lines: int
    sample_paragraphs: list[str]


def _distinct_names(rng: random.Random, count: int, make) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    attempts = 0
    while len(out) < count and attempts < count * 50:
        attempts += 1
        name, reading = make(rng)
        if name in seen:
            continue
        seen.add(name)
        out.append((name, reading))
    return out


def build_world(size: int, rng: random.Random) -> World:
    w = World()
    used_alias: set[str] = set()

    def take_alias(canonical: str, alias: str) -> None:
        if alias not in used_alias:
            used_alias.add(alias)
            w.alias[canonical] = alias

    def two(r: random.Random) -> tuple[str, str]:
        (a, ra), (b, rb) = r.choice(KANJI), r.choice(KANJI)
        return a + b, ra + rb.lower()

    n_pref = max(8, min(47, size // 2000))
    for name, reading in _distinct_names(rng, n_pref, two):
        w.prefs.append(name + "県")
        take_alias(name + "県", f"{reading} Prefecture")
    n_town = max(10, size // 60)
    for name, reading in _distinct_names(rng, n_town, two):
        suffix, en = rng.choice(TOWN_SUFFIX)
        w.towns.append(name + suffix)
        take_alias(name + suffix, f"{reading} {en}")
    for name, reading in _distinct_names(rng, max(6, size // 120), two):
        w.rivers.append(name + "川")
        take_alias(name + "川", f"{reading} River")

    def brewery(r: random.Random) -> tuple[str, str]:
        base, reading = two(r)
        suffix, en = r.choice(BREWERY_SUFFIX)
        return base + suffix, f"{reading} {en}"

    for name, alias in _distinct_names(rng, max(12, size // 10), brewery):
        w.breweries.append(name)
        take_alias(name, alias)

    def person(r: random.Random) -> tuple[str, str]:
        surname, rs = two(r)
        given, rg = r.choice(GIVEN)
        return surname + given, f"{rg} {rs}"

    for name, alias in _distinct_names(rng, max(12, size // 12), person):
        w.toji.append(name)
        take_alias(name, alias)

    def brand(r: random.Random) -> tuple[str, str]:
        (a, ra), (b, rb) = r.choice(KANJI), r.choice(KANJI)
        if r.random() < 0.5:
            return f"{a}の{b}", f"{ra} no {rb}"
        (c, rc) = r.choice(KANJI)
        return a + b + c, ra + rb.lower() + rc.lower()

    for name, alias in _distinct_names(rng, max(12, size // 6), brand):
        w.brands.append(name)
        take_alias(name, alias)
    for name, alias in RICE:
        w.rice.append(name)
        take_alias(name, alias)

    facts = w.facts
    for t in w.towns:
        facts[t] = [
            (t, "所在県", rng.choice(w.prefs)),
            (t, "河川", rng.choice(w.rivers)),
            (t, "気候", rng.choice(CLIMATES)),
            (t, "名所", t[:-1] + rng.choice(LANDMARKS)),
            (t, "人口", f"約{rng.randrange(2, 90)}千人"),
        ]
    for r in w.rice:
        facts[r] = [(r, "主産地", rng.choice(w.prefs)), (r, "分類", "酒造好適米")]
    for b in w.brands:
        facts[b] = [
            (b, "使用米", rng.choice(w.rice)),
            (b, "精米歩合", f"{rng.randrange(35, 75, 5)}%"),
            (b, "味わい", rng.choice(TASTES)),
            (b, "酵母", rng.choice(YEASTS)),
            (b, "日本酒度", f"{rng.randrange(-6, 12):+d}"),
        ]
    for i, p in enumerate(w.toji):
        facts[p] = [
            (p, "出身地", rng.choice(w.towns)),
            (p, "流派", rng.choice(SCHOOLS)),
            (p, "重視", rng.choice(TECHNIQUES)),
        ]
        if i > 0 and rng.random() < 0.6:
            facts[p].append((p, "師匠", w.toji[rng.randrange(i)]))
        if rng.random() < 0.3:
            facts[p].append((p, "受賞", f"{rng.choice(AWARDS)}（{rng.randrange(1980, 2024)}年）"))
    brand_pool = list(w.brands)
    rng.shuffle(brand_pool)
    for i, b in enumerate(w.breweries):
        toji = w.toji[i % len(w.toji)] if rng.random() < 0.8 else rng.choice(w.toji)
        own = [brand_pool[(2 * i + k) % len(brand_pool)] for k in range(rng.choice((1, 1, 2, 3)))]
        facts[b] = [
            (b, "所在地", rng.choice(w.towns)),
            (b, "創業", f"{rng.randrange(1600, 2011)}年"),
            (b, "杜氏", toji),
            (b, "仕込み水", rng.choice(w.rivers)),
            (b, "製法", rng.choice(TECHNIQUES)),
            (b, "蔵元", f"{b[:2]}{rng.choice(GIVEN)[0]}"),
        ]
        facts[b] += [(b, "代表銘柄", x) for x in own]
        for _k in range(rng.choice((0, 1, 1, 2))):
            facts[b].append((b, "受賞", f"{rng.choice(AWARDS)}（{rng.randrange(1980, 2024)}年）"))
        facts[toji].append((toji, "所属", b))
    return w


# sentence templates: label -> (japanese variants, english)
JA = {
    "所在地": [
        "{s}は{o}にある蔵元である。",
        "{s}の蔵は{o}の中心部に建っている。",
        "{o}の{s}は地元の名門として知られる。",
    ],
    "創業": ["{s}の創業は{o}である。", "{s}は{o}に創業した。"],
    "杜氏": ["{s}の杜氏は{o}である。", "{o}が{s}で杜氏を務めている。"],
    "仕込み水": ["{s}の仕込み水は{o}の伏流水である。", "{s}は{o}の水で仕込む。"],
    "代表銘柄": ["{s}の代表銘柄は「{o}」である。", "「{o}」は{s}の看板商品だ。"],
    "使用米": ["「{s}」には{o}が使われる。", "「{s}」は{o}を磨いて造られる。"],
    "精米歩合": ["「{s}」の精米歩合は{o}である。"],
    "味わい": ["「{s}」は{o}の酒として知られる。"],
    "所在県": ["{s}は{o}の町である。", "{s}は{o}の{geo}に位置する。"],
    "河川": ["{s}には{o}が流れている。"],
    "気候": ["{s}の気候は{o}である。"],
    "出身地": ["{s}は{o}の生まれである。", "{s}は{o}で育った。"],
    "流派": ["{s}は{o}の流れをくむ。"],
    "重視": ["{s}は{o}を重んじる。", "{s}の酒造りは{o}に特徴がある。"],
    "師匠": ["{s}は若いころ{o}に師事した。"],
    "所属": ["{s}は{o}に所属している。", "{s}は{o}に迎えられた。"],
    "主産地": ["{s}は{o}で多く作られている。"],
    "分類": ["{s}は{o}の一つである。"],
    "名所": ["{s}には{o}がある。", "{s}の名所といえば{o}だ。"],
    "人口": ["{s}の人口は{o}である。"],
    "酵母": ["「{s}」には{o}が使われている。"],
    "日本酒度": ["「{s}」の日本酒度は{o}である。"],
    "製法": ["{s}は{o}で知られる。"],
    "蔵元": ["{s}の蔵元は{o}である。"],
    "受賞": ["{s}は{o}を受けた。", "{s}は{o}に輝いた。"],
    "出荷先": ["{s}の酒は{o}にも出荷されている。"],
    "提携": ["{s}は{o}と共同で酒を造ったことがある。"],
    "来訪": ["{s}には{o}の杜氏が見学に訪れた。"],
}
EN = {
    "所在地": "{S} is a sake brewery in {O}.",
    "創業": "{S} was founded in {O}.",
    "杜氏": "The master brewer (toji) of {S} is {O}.",
    "仕込み水": "{S} draws its brewing water from the {O}.",
    "代表銘柄": "The flagship sake of {S} is {O}.",
    "使用米": "{S} is brewed from {O} rice.",
    "精米歩合": "{S} is polished to {O}.",
    "味わい": "{S} tastes {O}.",
    "所在県": "{S} lies in {O}.",
    "河川": "The {O} flows through {S}.",
    "気候": "The climate of {S} is {O}.",
    "出身地": "{S} was born in {O}.",
    "流派": "{S} belongs to the {O} school.",
    "重視": "{S} values {O}.",
    "師匠": "{S} trained under {O}.",
    "所属": "{S} works at {S2}.",
    "主産地": "{S} is grown mostly in {O}.",
    "分類": "{S} is a sake rice ({O}).",
    "名所": "{S} is known for {O}.",
    "人口": "{S} has a population of {O}.",
    "酵母": "{S} uses {O}.",
    "日本酒度": "{S} has a sake meter value of {O}.",
    "製法": "{S} is known for {O}.",
    "蔵元": "The owner of {S} is {O}.",
    "受賞": "{S} received the {O}.",
    "出荷先": "{S} ships to {O}.",
    "提携": "{S} once brewed together with {O}.",
    "来訪": "Brewers from {O} visited {S}.",
}
NEG_JA = "{s}の{l}は{o}ではない。"
DISPUTED_JA = "一説には{s}の{l}は{o}ともいわれる。"


def _dumps(v: object) -> str:
    return json.dumps(v, ensure_ascii=False)


def generate(size: int | str, seed: int = 7) -> Corpus:
    """The whole JSONL stream for `size` paragraphs (1k / 10k / 100k, or any int)."""
    target = SIZES[size] if isinstance(size, str) else int(size)
    rng = random.Random(seed)
    w = build_world(target, rng)
    facts = w.facts
    declared: set[str] = set()  # concept aliases a batch may already use as spellings
    declared_labels: set[str] = set()
    out: list[str] = []
    n_par = n_batches = n_assoc = 0
    docs: list[tuple[str, list[str], list[list[tuple[str, str, str, float]]]]] = []
    samples: list[str] = []
    kinds = ("brewery", "toji", "town", "en", "rice", "mirror")
    kind_weights = (40, 24, 14, 13, 3, 6)
    entities = {"brewery": w.breweries, "toji": w.toji, "town": w.towns, "rice": w.rice}
    date0 = 1_600_000_000

    years = [f"{y}年" for y in range(1600, 2011)]
    alternatives = {
        "所在地": w.towns,
        "出身地": w.towns,
        "杜氏": w.toji,
        "師匠": w.toji,
        "創業": years,
        "仕込み水": w.rivers,
        "河川": w.rivers,
        "代表銘柄": w.brands,
        "所属": w.breweries,
        "使用米": w.rice,
        "精米歩合": ["40%", "50%", "60%", "70%"],
        "味わい": TASTES,
        "名所": ["古寺", "古城"],
        "人口": ["約1千人"],
        "酵母": YEASTS,
        "日本酒度": ["+0"],
        "製法": TECHNIQUES,
        "蔵元": w.toji,
        "受賞": AWARDS,
        "出荷先": w.towns,
        "提携": w.breweries,
        "来訪": w.breweries,
        "所在県": w.prefs,
        "主産地": w.prefs,
        "気候": CLIMATES,
        "流派": SCHOOLS,
        "重視": TECHNIQUES,
        "分類": ["酒造好適米", "一般米"],
    }

    def neighbourhood(main: str) -> list[tuple[str, str, str]]:
        pool = list(facts.get(main, ()))
        for _s, _l, o in list(pool):
            pool.extend(facts.get(o, ())[:2])
        return list(dict.fromkeys(pool))

    while n_par < target:
        kind = rng.choices(kinds, kind_weights)[0]
        if kind == "mirror" and not docs:
            kind = "brewery"
        n_batches += 1
        header: dict[str, object] = {"taguru_batch": 1, "context": CONTEXT, "source": ""}
        if n_batches == 1:
            header["create"] = {"description": f"synthetic sake corpus, {target} paragraphs, seed {seed}"}
        if kind == "mirror":
            src_name, pars, assoc = docs[rng.randrange(len(docs))]
            pars = list(pars)
            i = rng.randrange(len(pars))
            pars[i] = pars[i] + rng.choice(FILLER_JA)  # a near-duplicate paragraph
            pars = pars[: max(1, target - n_par)]
            assoc = assoc[: len(pars)]
            header["source"] = f"mirror/{n_batches:06d}/{src_name}"
            tags = ["mirror"]
            lang = "ja"
        else:
            pool_name = "brewery" if kind == "en" else kind
            main = rng.choice(entities[pool_name])
            pool = neighbourhood(main)
            lang = "en" if kind == "en" else "ja"
            header["source"] = f"{kind}/{n_batches:06d}.md"
            tags = [kind, lang]
            n_here = min(rng.randint(3, 8), target - n_par)
            pars, assoc = [], []
            for _p in range(n_here):
                sentences: list[str] = []
                rows: list[tuple[str, str, str, float]] = []
                k = rng.choice((4, 4, 5, 5))
                for s, lab, o in rng.sample(pool, k) if len(pool) >= k else [rng.choice(pool) for _ in range(k)]:
                    weight = 1.0
                    roll = rng.random()
                    if roll < 0.03 and lab in ("杜氏", "所在地", "創業", "使用米", "出身地"):
                        # a conflicting claim: another object for the same subject and label
                        o = rng.choice(alternatives[lab])
                        weight = 0.5
                        if lang == "ja":
                            sentences.append(DISPUTED_JA.format(s=s, l=lab, o=o))
                    elif roll < 0.05:
                        weight = -1.0  # a negated fact about a wrong object
                        o = rng.choice(alternatives[lab])
                        if lang == "ja":
                            sentences.append(NEG_JA.format(s=s, l=lab, o=o))
                    elif roll < 0.12:
                        weight = round(rng.uniform(0.3, 0.9), 2)
                    if weight > 0.5 or weight == 1.0:
                        if lang == "ja":
                            sentences.append(rng.choice(JA[lab]).format(s=s, o=o, geo=rng.choice(GEO)))
                    if lang == "en":
                        line = EN[lab].format(S=w.alias.get(s, s), O=w.alias.get(o, o), S2=w.alias.get(o, o))
                        sentences.append(line if weight > 0 else "It is not true that " + line[0].lower() + line[1:])
                        s_sp = w.alias[s] if s in declared else s
                        o_sp = w.alias[o] if o in declared else o
                        l_sp = LABEL_ALIASES[lab] if lab in declared_labels else lab
                        rows.append((s_sp, l_sp, o_sp, weight))
                    else:
                        rows.append((s, lab, o, weight))
                if rng.random() < 0.5:
                    # an incidental fact: mostly a new edge, seldom repeated by another source
                    lab, o = rng.choice((("出荷先", w.towns), ("提携", w.breweries), ("来訪", w.breweries)))
                    o = rng.choice(o)
                    if lang == "ja":
                        sentences.append(JA[lab][0].format(s=main, o=o))
                        rows.append((main, lab, o, 1.0))
                    else:
                        sentences.append(EN[lab].format(S=w.alias.get(main, main), O=w.alias.get(o, o)))
                        rows.append((main, lab, w.alias[o] if o in declared else o, 1.0))
                if rng.random() < 0.3:
                    sentences.append(rng.choice(FILLER_JA if lang == "ja" else FILLER_EN))
                pars.append(("" if lang == "ja" else " ").join(sentences))
                assoc.append(rows)
            docs.append((header["source"], pars, assoc))  # type: ignore[arg-type]
        n_par += len(pars)
        out.append(_dumps(header))
        passage = "\n\n".join(pars)
        if kind == "brewery" and n_par < target and rng.random() < 0.5:
            passage = f"# {main}\n\n" + passage  # a title paragraph with no facts
            n_par += 1
            offset = 1
        else:
            offset = 0
        out.append(_dumps({"passage": passage, "date": date0 + n_batches * 3600, "tags": tags}))
        if len(samples) < 4000 and rng.random() < 0.5:
            samples.extend(pars[:2])
        if kind in ("brewery", "toji", "town"):
            for p in range(len(pars)):
                if rng.random() < 0.4:
                    out.append(_dumps({"paragraph": p + offset, "section": SECTIONS[(p + len(kind)) % len(SECTIONS)]}))
                if rng.random() < 0.3:
                    out.append(_dumps({"paragraph": p + offset, "locator": {"kind": "page", "value": str(p + 1)}}))
            if rng.random() < 0.25:
                out.append(_dumps({"paragraph": offset, "question": f"{main}について教えてください"}))
        used_concepts: set[str] = set()
        used_labels: set[str] = set()
        for p, rows in enumerate(assoc):
            for s, lab, o, weight in rows:
                out.append(
                    f'{{"subject": {_dumps(s)}, "label": {_dumps(lab)}, "object": {_dumps(o)}, '
                    f'"weight": {weight}, "paragraph": {p + offset}}}'
                )
                used_concepts.add(s)
                used_concepts.add(o)
                used_labels.add(lab)
                n_assoc += 1
        if kind in ("brewery", "toji", "town", "rice"):
            for c in sorted(used_concepts):
                alias = w.alias.get(c)
                if alias is not None and (c == main or rng.random() < 0.3):
                    out.append(_dumps({"alias": alias, "canonical": c, "kind": "concept"}))
                    declared.add(c)
        if kind == "en":
            for lab in sorted(used_labels):
                if lab in LABEL_ALIASES and lab not in declared_labels:
                    out.append(_dumps({"alias": LABEL_ALIASES[lab], "canonical": lab, "kind": "label"}))
                    declared_labels.add(lab)
    return Corpus(target, seed, "\n".join(out) + "\n", w, n_par, n_batches, n_assoc, samples)


def queries(corpus: Corpus, count: int = 300, seed: int = 11) -> dict[str, list]:
    """Deterministic cues, origins and search queries drawn from the generated corpus."""
    rng = random.Random(seed)
    w = corpus.world
    named = w.breweries + w.toji + w.towns + w.brands
    resolve: list[str] = []
    while len(resolve) < count:
        roll = rng.random()
        name = rng.choice(named)
        if roll < 0.3:
            resolve.append(name)  # exact
        elif roll < 0.5 and name in w.alias:
            resolve.append(w.alias[name].lower() if rng.random() < 0.5 else w.alias[name])  # alias
        elif roll < 0.7 and len(name) >= 3:
            a = rng.randrange(len(name) - 1)
            resolve.append(name[a : a + rng.randint(2, 3)])  # containment
        elif roll < 0.9 and len(name) >= 3:
            i = rng.randrange(len(name))
            resolve.append(name[:i] + rng.choice(KANJI)[0] + name[i + 1 :])  # a typo: fuzzy
        else:
            resolve.append(rng.choice(["霧沢の蔵元", "吟醸", "sake brewery", "Nishiki", "杜氏", "純米大吟醸"]))
    activate: list[list[str]] = []
    pools = [(w.breweries, 40), (w.toji, 25), (w.brands, 15), (w.towns, 10), (w.rice, 5)]
    while len(activate) < count:
        if rng.random() < 0.05:
            activate.append([rng.choice(w.breweries), rng.choice(w.toji)])
            continue
        pool = rng.choices([p for p, _w in pools], [wt for _p, wt in pools])[0]
        activate.append([rng.choice(pool)])
    search: list[str] = []
    labels = ["杜氏", "創業", "仕込み水", "代表銘柄", "使用米", "流派", "出身地"]
    while len(search) < count:
        roll = rng.random()
        if roll < 0.3:
            search.append(f"{rng.choice(w.breweries)} {rng.choice(labels)}")
        elif roll < 0.5:
            search.append(f"{rng.choice(w.breweries)}の杜氏は誰か")
        elif roll < 0.75:
            par = rng.choice(corpus.sample_paragraphs)
            a = rng.randrange(max(1, len(par) - 12))
            search.append(par[a : a + rng.randint(6, 14)])
        elif roll < 0.9:
            name = rng.choice(w.breweries)
            search.append(f"{w.alias.get(name, 'sake')} toji water")
        else:
            search.append(rng.choice(w.toji) + " " + rng.choice(TECHNIQUES))
    return {"resolve": resolve, "activate": activate, "search": search}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1k", help="1k, 10k, 100k or a paragraph count")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None, help="output file (default: bench/out/corpus-SIZE.jsonl; '-' for stdout)")
    args = ap.parse_args(argv)
    size = args.size if args.size in SIZES else int(args.size)
    t0 = time.perf_counter()
    corpus = generate(size, args.seed)
    took = time.perf_counter() - t0
    if args.out == "-":
        sys.stdout.write(corpus.text)
    else:
        path = Path(args.out or Path(__file__).parent / "out" / f"corpus-{args.size}.jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(corpus.text, encoding="utf-8")
        print(
            f"{path}: {corpus.batches} batches, {corpus.paragraphs} paragraphs, {corpus.association_lines} "
            f"association lines, {len(corpus.text.encode()) / 1e6:.1f} MB, generated in {took:.2f}s",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
