"""A seeded sake world and its three question sets for bench/quality.py (one-hop, two-hop, cross-lingual).

Breweries (some with near-twin names: one kanji apart) each have a four-paragraph page (location and
founding, toji, rice, brand) and a news page; every toji has a page of two paragraphs (guild and home
town; an award), every rice variety and town a page of its own. None of those pages names a brewery.
Distractors repeat names without facts: shop listings (the only association they carry is the
shop's `取扱` of each brewery it lists), reviews, and English shop pages naming the romanized aliases.
Everything follows from the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

# kanji with a reading each; a brewery name is two of them + 酒造, its alias the readings + " Shuzo"
KANJI = {
    "青": "ao",
    "嶺": "mine",
    "白": "shira",
    "鷺": "sagi",
    "黒": "kuro",
    "松": "matsu",
    "月": "tsuki",
    "桂": "katsura",
    "花": "hana",
    "泉": "izumi",
    "朝": "asa",
    "日": "hi",
    "雪": "yuki",
    "川": "kawa",
    "菊": "kiku",
    "正": "masa",
    "宗": "mune",
    "大": "oo",
    "関": "zeki",
    "龍": "ryu",
    "梅": "ume",
    "竹": "take",
    "鶴": "tsuru",
    "亀": "kame",
    "星": "hoshi",
    "光": "hikari",
    "森": "mori",
    "谷": "tani",
    "滝": "taki",
    "浜": "hama",
    "秋": "aki",
    "冬": "fuyu",
    "春": "haru",
    "夏": "natsu",
    "岩": "iwa",
}
SURNAMES = ["高瀬", "北村", "森田", "石川", "藤井", "小野", "長谷川", "村上", "堀", "水野", "大西", "杉山"]
GIVEN = ["健一", "誠", "修", "浩二", "直樹", "隆", "明美", "裕子"]
GUILDS = ["南部杜氏組合", "越後杜氏組合", "能登杜氏組合", "但馬杜氏組合", "丹波杜氏組合", "広島杜氏組合"]
PREFS = ["雲居県", "霧島県", "山辺県", "海原県", "白峰県", "緑川県", "東雲県"]
RICE = ["山田錦", "五百万石", "雄町", "美山錦", "八反錦", "愛山", "亀の尾", "出羽燦々"]
TOWN_HEADS = ["霧沢", "桜台", "白川", "水無", "杉原", "大滝", "月見", "鹿野", "若葉", "石垣", "浅間", "葉山"]
STYLES = ["純米吟醸", "大吟醸", "特別純米", "本醸造"]
AWARDS = ["全国新酒鑑評会金賞", "県知事賞", "審査員特別賞"]


# each fact paragraph of a brewery page in one of several wordings; the later ones share few words with
# the questions (a paraphrase), as real pages do
KURA_FORMS = (
    (
        "{b.name}は{b.town}にある蔵元で、{b.year}年に創業した。",
        "{b.year}年、{b.town}の地で{b.name}の歴史が始まった。",
        "{b.town}の酒蔵といえば{b.name}で、{b.year}年の創業である。",
    ),
    (
        "{b.name}の杜氏は{b.toji}である。仕込みは毎年十月に始まる。",
        "{b.name}の蔵で酒造りを率いるのは{b.toji}だ。",
        "{b.toji}は{b.name}で長く造りの責任者を務めている。",
    ),
    (
        "{b.name}の酒造りには{b.rice}が使われている。",
        "{b.name}は仕込みに{b.rice}を選んでいる。",
        "{b.rice}を磨いて醸すのが{b.name}の流儀である。",
    ),
    (
        "{b.name}の代表銘柄は「{b.brand}」である。",
        "「{b.brand}」は{b.name}を代表する一本だ。",
        "{b.name}といえば「{b.brand}」の名が挙がる。",
    ),
)


@dataclass
class World:
    passages: dict[str, str] = field(default_factory=dict)
    associations: list[tuple[str, str, str, float, str, int]] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    sets: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def page(self, source: str, paragraphs: list[str]) -> None:
        self.passages[source] = "\n\n".join(paragraphs)

    def fact(self, s: str, label: str, o: str, source: str, paragraph: int, weight: float = 1.0) -> None:
        self.associations.append((s, label, o, weight, source, paragraph))


@dataclass
class Brewery:
    name: str
    alias: str
    town: str
    year: int
    toji: str
    rice: str
    brand: str
    slug: str


def _names(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """n distinct brewery names with aliases; about a quarter are near twins of another (one kanji apart)."""
    chars = list(KANJI)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(out) < n:
        if out and rng.random() < 0.25:
            base = rng.choice(out)[0]
            pair = [base[0], rng.choice(chars)] if rng.random() < 0.5 else [rng.choice(chars), base[1]]
        else:
            pair = rng.sample(chars, 2)
        name = f"{pair[0]}{pair[1]}酒造"
        if name in seen or pair[0] == pair[1]:
            continue
        seen.add(name)
        alias = f"{KANJI[pair[0]].capitalize()}{KANJI[pair[1]]} Shuzo"
        if any(a == alias for _n, a in out):
            continue
        out.append((name, alias))
    return out


def build_world(seed: int = 7, n_breweries: int = 40) -> World:
    """The world and its question sets."""
    rng = random.Random(seed)
    w = World()
    towns = {f"{h}町": rng.choice(PREFS) for h in TOWN_HEADS}
    tojis = [f"{s}{g}" for s in SURNAMES for g in GIVEN]
    rng.shuffle(tojis)
    tojis = tojis[: max(6, n_breweries * 2 // 3)]
    toji_facts = {t: (rng.choice(GUILDS), rng.choice(list(towns)), rng.choice(AWARDS)) for t in tojis}
    rice_pref = {r: rng.choice(PREFS) for r in RICE}
    breweries = []
    for i, (name, alias) in enumerate(_names(rng, n_breweries)):
        b = Brewery(
            name,
            alias,
            rng.choice(list(towns)),
            rng.randint(1700, 1990),
            rng.choice(tojis),
            rng.choice(RICE),
            f"{name[:2]}{rng.choice(STYLES)}",
            f"b{i:03d}",
        )
        breweries.append(b)
        src = f"kura/{b.slug}.md"
        w.page(src, [rng.choice(forms).format(b=b) for forms in KURA_FORMS])
        w.fact(b.name, "所在地", b.town, src, 0)
        w.fact(b.name, "創業", f"{b.year}年", src, 0)
        w.fact(b.name, "杜氏", b.toji, src, 1)
        w.fact(b.name, "使用米", b.rice, src, 2)
        w.fact(b.name, "銘柄", b.brand, src, 3)
        news = f"news/{b.slug}.md"
        w.page(news, [f"{b.name}は今年、新しい貯蔵庫を完成させた。", f"{b.name}の蔵開きには多くの人が訪れた。"])
        w.fact(b.name, "完成", "貯蔵庫", news, 0)
        w.fact(b.name, "開催", "蔵開き", news, 1)
        w.aliases[b.alias] = b.name
    for t, (guild, home, award) in toji_facts.items():
        src = f"toji/{t}.md"
        w.page(src, [f"{t}は{guild}に所属する杜氏で、{home}の出身である。", f"{t}は{award}を受賞した。"])
        w.fact(t, "所属", guild, src, 0)
        w.fact(t, "出身", home, src, 0)
        w.fact(t, "受賞", award, src, 1)
    for r, pref in rice_pref.items():
        src = f"rice/{r}.md"
        w.page(src, [f"{r}は主に{pref}で栽培される酒米である。", f"{r}は粒が大きく、心白が出やすい。"])
        w.fact(r, "産地", pref, src, 0)
        w.fact(r, "特徴", "心白", src, 1)
    for town, pref in towns.items():
        src = f"town/{town}.md"
        w.page(src, [f"{town}は{pref}の山あいにある町である。", f"{town}は名水の里として知られる。"])
        w.fact(town, "所在", pref, src, 0)
        w.fact(town, "名物", "名水", src, 1)
    _distractors(rng, w, breweries)
    w.sets = _questions(rng, breweries, toji_facts, rice_pref, towns)
    return w


def _distractors(rng: random.Random, w: World, breweries: list[Brewery]) -> None:
    for i in range(max(10, len(breweries) * 3 // 4)):
        listed = rng.sample(breweries, min(5, len(breweries)))
        shop, src = f"酒のさかや{i:02d}", f"shop/{i:02d}.md"
        names = "、".join(b.name for b in listed)
        w.page(
            src,
            [
                f"{shop}の取扱銘柄一覧：{names}。",
                f"{listed[0].name}の限定酒、{listed[1].name}の新酒が入荷しました。{listed[0].name}はお一人様一本まで。",
            ],
        )
        for b in listed:
            w.fact(shop, "取扱", b.name, src, 0)
    for i, b in enumerate(breweries):
        w.page(
            f"review/{i:03d}.md",
            [f"{b.name}の酒を飲みました。{b.name}は香りがよく、{b.name}の杜氏さんの腕を感じます。"],
        )
        if i % 2 == 0:
            w.page(
                f"en/shop{i:03d}.md",
                [
                    f"{b.alias} sake now in stock! Order {b.alias} online. "
                    f"{b.alias} gift sets and {b.alias} tasting notes."
                ],
            )


ONE_HOP = {
    "所在地": ("{b}はどこにありますか", 0, "Where is {a} located?"),
    "杜氏": ("{b}の杜氏は誰ですか", 1, "Who is the toji of {a}?"),
    "使用米": ("{b}はどの酒米を使っていますか", 2, "Which sake rice does {a} use?"),
    "銘柄": ("{b}の代表銘柄は何ですか", 3, "What is the flagship brand of {a}?"),
    "創業": ("{b}は何年に創業しましたか", 0, "When was {a} founded?"),
}


def _questions(
    rng: random.Random,
    breweries: list[Brewery],
    toji_facts: dict[str, Any],
    rice_pref: dict[str, str],
    towns: dict[str, str],
) -> dict[str, list[dict[str, Any]]]:
    one, two, cross = [], [], []
    for i, b in enumerate(breweries):
        kura = f"kura/{b.slug}.md"
        label = rng.choice(list(ONE_HOP))
        ja, par, en = ONE_HOP[label]
        one.append({"origins": [b.name], "query": ja.format(b=b.name), "gold": [[kura, par]]})
        kind = rng.choice(("guild", "home", "rice", "pref"))
        if kind in ("guild", "home"):
            text = "{b}の杜氏はどの杜氏組合に所属していますか" if kind == "guild" else "{b}の杜氏はどこの出身ですか"
            hops = [[kura, 1], [f"toji/{b.toji}.md", 0]]
        elif kind == "rice":
            text, hops = "{b}が使う酒米の主な産地はどこですか", [[kura, 2], [f"rice/{b.rice}.md", 0]]
        else:
            text, hops = "{b}がある町はどの県にありますか", [[kura, 0], [f"town/{b.town}.md", 0]]
        two.append({"origins": [b.name], "query": text.format(b=b.name), "gold": hops, "hops": [[h] for h in hops]})
        if i % 2 == 0 or len(cross) < 10:
            label = rng.choice(list(ONE_HOP))
            _ja, par, en = ONE_HOP[label]
            cross.append({"origins": [b.alias], "query": en.format(a=b.alias), "gold": [[kura, par]]})
    return {"one-hop": one, "two-hop": two, "cross-lingual": cross}
