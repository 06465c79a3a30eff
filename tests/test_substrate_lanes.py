"""Positive behaviour of the read lanes and write semantics (§2, §4, §5, §7-§9), values worked by hand."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Client
from substrate_support import assert_error, assert_ok, ctx_path, entry, make_context

pytestmark = pytest.mark.anyio


def a(s: str, label: str, o: str, w: float, **kw: Any) -> dict[str, Any]:
    return {"subject": s, "label": label, "object": o, "weight": w, **kw}


async def post(client: Client, name: str, tail: str, body: Any) -> Any:
    return assert_ok(await client.call("POST", ctx_path(name, tail), body))


async def graph(client: Client, name: str, edges: list[dict[str, Any]]) -> None:
    await make_context(client, name)
    assert await post(client, name, "associations", edges) == len(edges)


def triples(matches: list[dict[str, Any]]) -> list[tuple[str, str, str, float, int]]:
    return [(m["subject"], m["label"], m["object"], m["weight"], m["count"]) for m in matches]


# ----- resolve (§7) --------------------------------------------------------------------------------------


async def test_resolve_containment_with_gloss_illustration(client: Client) -> None:
    await graph(client, "ill", [a("10大脅威選考会", "選出する", "脅威候補", 1.0)])
    assert await post(client, "ill", "resolve", {"cue": "選考会"}) == [
        {
            "name": "10大脅威選考会",
            "score": 0.375,
            "tier": "lexical",
            "kind": "containment",
            "gloss": "10大脅威選考会。選出するは脅威候補。",
        }
    ]


async def test_resolve_kinds(client: Client) -> None:
    await graph(client, "db", [a("PostgreSQL", "is_a", "database", 1.0), a("MySQL", "is_a", "database", 2.0)])
    await post(client, "db", "aliases", {"concepts": {"Postgres": "PostgreSQL"}})
    pg_gloss = "PostgreSQL。is_aはdatabase。"
    # exact: the cue normalizes to the canonical's own spelling
    assert await post(client, "db", "resolve", {"cue": "postgreSQL"}) == [
        {"name": "PostgreSQL", "score": 1.0, "tier": "lexical", "kind": "exact", "gloss": pg_gloss}
    ]
    # alias: an exact hit on an alias spelling reports the canonical name
    assert await post(client, "db", "resolve", {"cue": "ＰＯＳＴＧＲＥＳ"}) == [
        {"name": "PostgreSQL", "score": 1.0, "tier": "lexical", "kind": "alias", "gloss": pg_gloss}
    ]
    # gloss: incoming facts name their subject, strongest first
    assert await post(client, "db", "resolve", {"cue": "DATABASE"}) == [
        {
            "name": "database",
            "score": 1.0,
            "tier": "lexical",
            "kind": "exact",
            "gloss": "database。MySQLのis_aはdatabase。PostgreSQLのis_aはdatabase。",
        }
    ]
    # fuzzy: 2·|{da,at,ta,ab,se}| / (6 + 7)
    assert await post(client, "db", "resolve", {"cue": "databse"}) == [
        {
            "name": "database",
            "score": 10 / 13,
            "tier": "lexical",
            "kind": "fuzzy",
            "gloss": "database。MySQLのis_aはdatabase。PostgreSQLのis_aはdatabase。",
        }
    ]
    assert await post(client, "db", "resolve", {"cue": "databse", "dice_floor": 0.8}) == []
    assert await post(client, "db", "resolve", {"cue": "databse", "dice_floor": 7}) == []  # clamped to 1
    # the context's floor applies when the call gives none
    assert_ok(await client.call("PATCH", ctx_path("db"), {"dice_floor": 0.9}))
    assert await post(client, "db", "resolve", {"cue": "databse"}) == []
    assert len(await post(client, "db", "resolve", {"cue": "databse", "dice_floor": 0.5})) == 1
    assert_ok(await client.call("PATCH", ctx_path("db"), {"dice_floor": 0.3}))
    # containment plus fuzzy: 'mysql' ⊂ 'mysqls' (5/6); postgresql shares {sq, ql}: 2·2/(5+9)
    result = await post(client, "db", "resolve", {"cue": "mysqls", "dice_floor": 0.2})
    assert [(r["name"], r["score"], r["kind"]) for r in result] == [
        ("MySQL", 5 / 6, "containment"),
        ("PostgreSQL", 4 / 14, "fuzzy"),
    ]
    # any exact hit skips the fuzzy step (postgresql would score 4/13 here)
    result = await post(client, "db", "resolve", {"cue": "mysql", "dice_floor": 0.2})
    assert [(r["name"], r["score"], r["kind"]) for r in result] == [("MySQL", 1.0, "exact")]
    # empty after normalization, and limits
    assert await post(client, "db", "resolve", {"cue": ""}) == []
    assert await post(client, "db", "resolve", {"cue": "   "}) == []
    assert await post(client, "db", "resolve", {"cue": "mysqls", "dice_floor": 0.2, "limit": 1}) == [
        {"name": "MySQL", "score": 5 / 6, "tier": "lexical", "kind": "containment", "gloss": "MySQL。is_aはdatabase。"}
    ]
    assert await post(client, "db", "resolve", {"cue": "mysql", "limit": 0}) == []


async def test_resolve_sorting_and_gloss_cutoff(client: Client) -> None:
    # nine concepts all containing the cue: sorted by score desc, then name; only the first 8 glossed
    names = ["ab", "abc", "abd", "xabx", "abcde", "zab", "abab", "yab", "qqab"]
    await graph(client, "many", [a(n, "r", "t", 1.0) for n in names])
    result = await post(client, "many", "resolve", {"cue": "ab"})
    expected_order = sorted(names, key=lambda n: (-(2 / len(n)), n))
    assert [r["name"] for r in result] == expected_order
    assert [r["score"] for r in result] == [2 / len(n) for n in expected_order]
    assert all("gloss" in r for r in result[:8]) and "gloss" not in result[8]
    assert result[0]["kind"] == "exact" and all(r["kind"] == "containment" for r in result[1:])


async def test_concept_and_label_gloss_rules(client: Client) -> None:
    await graph(
        client,
        "gl",
        [
            a("X", "a", "Y", 5),
            a("Z", "b", "X", 4),
            a("Z", "c", "X", 3),
            a("X", "d", "X", 10),
            a("X", "e", "W", -2),
            a("X", "f", "V", 1),
            a("X", "g", "U", 100),
        ],
    )
    await post(client, "gl", "associations/retract", {"subject": "X", "label": "g", "object": "U"})
    # strongest four live facts: d(10, self-loop once), a(5), b(4), c(3); the subject is omitted when it
    # is X itself or repeats the previous fact's subject; the dead g(100) is skipped
    (x,) = [r for r in await post(client, "gl", "resolve", {"cue": "x"}) if r["name"] == "X"]
    assert x["gloss"] == "X。dはX。aはY。ZのbはX。cはX。"
    (w,) = await post(client, "gl", "resolve", {"cue": "w"})
    assert w["gloss"] == "W。XのeはWではない。"
    # records without live edges still resolve, with a bare gloss
    (u,) = await post(client, "gl", "resolve", {"cue": "U"})
    assert (u["name"], u["kind"], u["gloss"]) == ("U", "exact", "U。")
    # label gloss: up to three facts, the subject omitted only when it repeats
    await graph(
        client, "lg", [a("p", "rel", "q", 1), a("p", "rel", "r", -3), a("s", "rel", "t", 2), a("u", "rel", "v", 0.5)]
    )
    assert await post(client, "lg", "resolve_label", {"cue": "REL"}) == [
        {
            "name": "rel",
            "score": 1.0,
            "tier": "lexical",
            "kind": "exact",
            "gloss": "rel。pのrelはrではない。sのrelはt。pのrelはq。",
        }
    ]
    await post(client, "lg", "aliases", {"labels": {"relates": "rel"}})
    result = await post(client, "lg", "resolve_label", {"cue": "relates"})
    assert [(r["name"], r["kind"]) for r in result] == [("rel", "alias")]
    assert await post(client, "lg", "resolve_label", {"cue": "p"}) == []


# ----- describe, query, recall (§8.1-§8.2) ----------------------------------------------------------------


async def test_describe(client: Client) -> None:
    await graph(
        client,
        "de",
        [
            a("x", "q", "y", 1),
            a("x", "p", "y", 1),
            a("x", "p", "z", 1),
            a("w", "q", "x", 1),
            a("x", "dead", "k", 1),
            a("x", "self", "x", 1),
        ],
    )
    await post(client, "de", "associations/retract", {"subject": "x", "label": "dead", "object": "k"})
    assert await post(client, "de", "describe", {"concept": "x"}) == {
        "concept": "x",
        "as_subject": [{"label": "p", "count": 2}, {"label": "q", "count": 1}, {"label": "self", "count": 1}],
        "as_object": [{"label": "q", "count": 1}, {"label": "self", "count": 1}],
    }
    # ties keep label id order, not name order
    assert await post(client, "de", "describe", {"concept": "y"}) == {
        "concept": "y",
        "as_subject": [],
        "as_object": [{"label": "q", "count": 1}, {"label": "p", "count": 1}],
    }
    assert await post(client, "de", "describe", {"concept": "k"}) == {"concept": "k", "as_subject": [], "as_object": []}
    assert await post(client, "de", "describe", {"concept": "nope"}) is None
    assert await post(client, "de", "describe", {"concept": "X"}) is None  # exact spelling only
    await post(client, "de", "aliases", {"concepts": {"X": "x"}})
    assert (await post(client, "de", "describe", {"concept": "X"}))["concept"] == "x"


async def query_graph(client: Client) -> None:
    await graph(
        client,
        "q",
        [
            a("a", "r", "b", 3),
            a("a", "s", "c", -5),
            a("d", "r", "b", 1),
            a("d", "r", "c", 3),
            a("a", "r", "c", 2, source="doc"),
        ],
    )
    await post(client, "q", "associations/retract", {"subject": "a", "label": "r", "object": "c"})


async def test_query_or_sets_order_and_dead_edges(client: Client) -> None:
    await query_graph(client)
    result = await post(client, "q", "query", {"subject": ["a", "d"]})
    assert result["total"] == 5 and result["plan"] == {"contexts": ["q"]}
    assert triples(result["matches"]) == [
        ("a", "s", "c", -5.0, 1),
        ("a", "r", "b", 3.0, 1),
        ("d", "r", "c", 3.0, 1),
        ("d", "r", "b", 1.0, 1),
        ("a", "r", "c", 0.0, 0),
    ]
    assert result["matches"][4] == {
        "subject": "a",
        "label": "r",
        "object": "c",
        "weight": 0.0,
        "count": 0,
        "attributions": [],
    }
    assert await post(client, "q", "query", {"subject": "a"}) == await post(client, "q", "query", {"subject": ["a"]})
    result = await post(client, "q", "query", {"label": "r", "object": "c"})
    assert triples(result["matches"]) == [("d", "r", "c", 3.0, 1), ("a", "r", "c", 0.0, 0)]
    result = await post(client, "q", "query", {"subject": "a", "label": ["r", "s", "zz"], "object": "b"})
    assert triples(result["matches"]) == [("a", "r", "b", 3.0, 1)]
    assert await post(client, "q", "query", {"subject": ["nope", "zz"]}) == {
        "total": 0,
        "matches": [],
        "plan": {"contexts": ["q"]},
    }
    assert (await post(client, "q", "query", {"subject": "a", "object": "zz"}))["total"] == 0
    assert (await post(client, "q", "query", {"subject": ["nope", "d"]}))["total"] == 2
    # limit 0 is legal, total still counts
    assert await post(client, "q", "query", {"subject": ["a", "d"], "limit": 0}) == {
        "total": 5,
        "matches": [],
        "plan": {"contexts": ["q"]},
    }
    # alias-folded positions, canonical output
    await post(client, "q", "aliases", {"concepts": {"A": "a"}, "labels": {"R": "r"}})
    result = await post(client, "q", "query", {"subject": "A", "label": "R"})
    assert triples(result["matches"]) == [("a", "r", "b", 3.0, 1), ("a", "r", "c", 0.0, 0)]


async def test_query_and_recall_cursor(client: Client) -> None:
    await query_graph(client)
    body: dict[str, Any] = {"subject": ["a", "d"], "limit": 2}
    seen = []
    for _ in range(4):
        result = await post(client, "q", "query", body)
        assert result["total"] == 5
        if not result["matches"]:
            break
        seen.extend(triples(result["matches"]))
        last = result["matches"][-1]
        body["after"] = {k: last[k] for k in ("weight", "subject", "label", "object")}
    assert seen == [
        ("a", "s", "c", -5.0, 1),
        ("a", "r", "b", 3.0, 1),
        ("d", "r", "c", 3.0, 1),
        ("d", "r", "b", 1.0, 1),
        ("a", "r", "c", 0.0, 0),
    ]
    # the cursor compares |weight|: a negative weight is as good as its magnitude
    result = await post(
        client,
        "q",
        "query",
        {"subject": ["a", "d"], "after": {"weight": -5, "subject": "a", "label": "s", "object": "c"}},
    )
    assert len(result["matches"]) == 4 and result["total"] == 5
    # a cursor that names no edge still bounds strictly: everything after (3, "b", ...) in order
    result = await post(
        client,
        "q",
        "query",
        {"subject": ["a", "d"], "after": {"weight": 3.0, "subject": "b", "label": "", "object": ""}},
    )
    assert triples(result["matches"])[:1] == [("d", "r", "c", 3.0, 1)]
    # recall matches the cue as subject, object or label, with the same order and cursor
    result = await post(client, "q", "recall", {"cue": "c"})
    assert triples(result["matches"]) == [("a", "s", "c", -5.0, 1), ("d", "r", "c", 3.0, 1), ("a", "r", "c", 0.0, 0)]
    assert result["plan"] == {"contexts": ["q"]}
    result = await post(client, "q", "recall", {"cue": "r", "limit": 1})
    assert result["total"] == 4 and triples(result["matches"]) == [("a", "r", "b", 3.0, 1)]
    result = await post(
        client, "q", "recall", {"cue": "r", "after": {"weight": 3.0, "subject": "a", "label": "r", "object": "b"}}
    )
    assert triples(result["matches"]) == [("d", "r", "c", 3.0, 1), ("d", "r", "b", 1.0, 1), ("a", "r", "c", 0.0, 0)]
    assert await post(client, "q", "recall", {"cue": "zz"}) == {"total": 0, "matches": [], "plan": {"contexts": ["q"]}}


async def test_recall_captured_shape_with_section_and_locator(client: Client) -> None:
    await make_context(client, "rc")
    await post(
        client,
        "rc",
        "associations",
        [
            a("alpha", "connects_to", "beta", 2.0, source="doc.md", paragraph=1),
            a("alpha", "near", "gamma", 1.0, source="other.md", paragraph=7),
        ],
    )
    await post(
        client,
        "rc",
        "sources",
        {
            "passages": {"doc.md": "intro\n\nbody"},
            "sections": {"doc.md": [{"paragraph": 0, "section": "Intro"}]},
            "locators": {"doc.md": [{"paragraph": 1, "locator": {"kind": "page", "value": "2"}}]},
        },
    )
    result = await post(client, "rc", "recall", {"cue": "alpha"})
    assert result["matches"] == [
        {
            "subject": "alpha",
            "label": "connects_to",
            "object": "beta",
            "weight": 2.0,
            "count": 1,
            "attributions": [
                {
                    "source": "doc.md",
                    "weight": 2.0,
                    "count": 1,
                    "paragraph": 1,
                    "section": "Intro",
                    "locator": {"kind": "page", "value": "2"},
                }
            ],
        },
        # no passage stored for other.md: the paragraph is kept, section and locator are null
        {
            "subject": "alpha",
            "label": "near",
            "object": "gamma",
            "weight": 1.0,
            "count": 1,
            "attributions": [
                {"source": "other.md", "weight": 1.0, "count": 1, "paragraph": 7, "section": None, "locator": None}
            ],
        },
    ]
    # with a passage stored, a paragraph past its end is nulled at write time
    await post(client, "rc", "associations", [a("x", "r", "y", 1.0, source="doc.md", paragraph=2)])
    (m,) = (await post(client, "rc", "recall", {"cue": "x"}))["matches"]
    assert m["attributions"][0]["paragraph"] is None


# ----- activate (§8.3) -------------------------------------------------------------------------------------


async def test_activate_decay_limit_and_paths(client: Client) -> None:
    await graph(client, "act", [a("a", "r", "b", 2.0), a("b", "r", "c", 1.0)])
    e0 = {"subject": "a", "label": "r", "object": "b", "weight": 2.0, "count": 1, "attributions": []}
    e1 = {"subject": "b", "label": "r", "object": "c", "weight": 1.0, "count": 1, "attributions": []}
    # decay 0.5: e0 = 1·0.5·2 = 1.0; b gets flow 1.0/2; e1 = 0.5·0.5·1 = 0.25
    assert await post(client, "act", "activate", {"origins": ["a"]}) == {
        "total": 2,
        "matches": [
            {"strength": 1.0, "path": ["a"], "association": e0},
            {"strength": 0.25, "path": ["a", "b"], "association": e1},
        ],
    }
    assert await post(client, "act", "activate", {"origins": ["a"], "limit": 1}) == {
        "total": 2,
        "matches": [{"strength": 1.0, "path": ["a"], "association": e0}],
    }
    full = {
        "total": 2,
        "matches": [
            {"strength": 2.0, "path": ["a"], "association": e0},
            {"strength": 1.0, "path": ["a", "b"], "association": e1},
        ],
    }
    assert await post(client, "act", "activate", {"origins": ["a"], "decay": 1.0}) == full
    assert await post(client, "act", "activate", {"origins": ["a"], "decay": 7}) == full  # clamped to 1
    assert await post(client, "act", "activate", {"origins": ["a"], "decay": -1}) == {"total": 0, "matches": []}
    assert await post(client, "act", "activate", {"origins": ["nope"]}) == {"total": 0, "matches": []}
    assert await post(client, "act", "activate", {"origins": []}) == {"total": 0, "matches": []}
    assert await post(client, "act", "activate", {"origins": ["a"], "limit": 0}) == {"total": 2, "matches": []}
    # from the middle both edges are the origin's own
    result = await post(client, "act", "activate", {"origins": ["b", "nope"]})
    assert [(m["strength"], m["path"], m["association"]["subject"]) for m in result["matches"]] == [
        (1.0 / 2 * 2.0, ["b"], "a"),
        (0.5, ["b"], "b"),
    ]
    # dead edges are skipped
    await post(client, "act", "associations/retract", {"subject": "b", "label": "r", "object": "c"})
    result = await post(client, "act", "activate", {"origins": ["a"]})
    assert result["total"] == 1 and result["matches"][0]["association"] == e0
    # alias-folded origins
    await post(client, "act", "aliases", {"concepts": {"A": "a"}})
    assert (await post(client, "act", "activate", {"origins": ["A"]}))["total"] == 1


async def test_activate_ties_and_negative_weights(client: Client) -> None:
    # equal strengths sort by edge id; the raw |sum| drives scores, so a negative edge spreads too
    await graph(client, "tie", [a("o", "r", "y", -1.0), a("o", "r", "x", 1.0), a("x", "r", "z", 4.0)])
    result = await post(client, "tie", "activate", {"origins": ["o"]})
    got = [(m["strength"], m["path"], m["association"]["object"]) for m in result["matches"]]
    # o: total 2, each edge 0.5; x gets flow 0.25; x: total 5, x→z = 0.25·0.5·4 = 0.5 (ties with o's edges)
    assert got == [(0.5, ["o"], "y"), (0.5, ["o"], "x"), (0.5, ["o", "x"], "z")]
    assert result["total"] == 3


# ----- passage search (§9) ---------------------------------------------------------------------------------


async def search_context(client: Client) -> None:
    await make_context(client, "se")
    await post(
        client,
        "se",
        "sources",
        {
            "passages": {
                "a.md": "青嶺酒造は雲居県霧沢町の蔵元である。",
                "b.md": "酒造の歴史\n\n別の段落",
                "c.md": "酒造",
            },
            "tags": {"a.md": ["sake"], "b.md": ["history", "sake"]},
            "dates": {"a.md": 100, "b.md": 200},
        },
    )


def plan_entry(result: dict[str, Any]) -> dict[str, Any]:
    (ctx,) = result["plan"]["contexts"]
    return ctx


async def test_search_captured_fixture_score(client: Client) -> None:
    await make_context(client, "corpus-c")
    await post(client, "corpus-c", "sources", {"passages": {"doc.md": "青嶺酒造は雲居県霧沢町の蔵元である。"}})
    status, body, _h = await client.call("POST", ctx_path("corpus-c", "sources/search"), {"query": "酒造"})
    assert status == 200
    (hit,) = body["result"]["hits"]
    assert hit == {
        "source": "doc.md",
        "paragraph": 0,
        "score": 0.28768212,
        "text": "青嶺酒造は雲居県霧沢町の蔵元である。",
        "lanes": {"bm25": {"rank": 1, "score": 0.28768212}},
    }


async def test_search_filters_and_plan(client: Client) -> None:
    await search_context(client)
    path = "sources/search"
    unfiltered = await post(client, "se", path, {"query": "酒造"})
    assert plan_entry(unfiltered) == {
        "context": "se",
        "lanes": {"bm25": {"ran": True}, "vector": {"ran": False, "reason": "no embedding provider is configured"}},
    }
    assert sorted((h["source"], h["paragraph"]) for h in unfiltered["hits"]) == [("a.md", 0), ("b.md", 0), ("c.md", 0)]
    texts = {h["source"]: h["text"] for h in unfiltered["hits"]}
    assert texts["b.md"] == "酒造の歴史"  # the paragraph only
    scores = [h["score"] for h in unfiltered["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert [h["lanes"]["bm25"]["rank"] for h in unfiltered["hits"]] == [1, 2, 3]
    assert all(h["score"] == h["lanes"]["bm25"]["score"] for h in unfiltered["hits"])
    # tags: any of them
    r = await post(client, "se", path, {"query": "酒造", "tags": ["history"]})
    assert [h["source"] for h in r["hits"]] == ["b.md"]
    assert plan_entry(r)["filter"] == {"eligible_sources": 1, "total_sources": 3}
    r = await post(client, "se", path, {"query": "酒造", "tags": ["sake", "nothing"]})
    assert sorted(h["source"] for h in r["hits"]) == ["a.md", "b.md"]
    assert plan_entry(r)["filter"] == {"eligible_sources": 2, "total_sources": 3}
    # a filter never changes the scores of the sources it keeps
    by_source = {h["source"]: h["score"] for h in unfiltered["hits"]}
    assert all(h["score"] == by_source[h["source"]] for h in r["hits"])
    # the window is half-open over date ?? stored_at
    r = await post(client, "se", path, {"query": "酒造", "since": 100, "until": 200})
    assert [h["source"] for h in r["hits"]] == ["a.md"]
    r = await post(client, "se", path, {"query": "酒造", "since": 101})
    assert sorted(h["source"] for h in r["hits"]) == ["b.md", "c.md"]  # c.md: stored_at is now
    r = await post(client, "se", path, {"query": "酒造", "until": 1000})
    assert sorted(h["source"] for h in r["hits"]) == ["a.md", "b.md"]
    assert plan_entry(r)["filter"] == {"eligible_sources": 2, "total_sources": 3}
    r = await post(client, "se", path, {"query": "酒造", "tags": []})
    assert plan_entry(r)["filter"] == {"eligible_sources": 3, "total_sources": 3} and len(r["hits"]) == 3
    r = await post(client, "se", path, {"query": "酒造", "tags": ["none"]})
    assert r["hits"] == [] and plan_entry(r)["filter"] == {"eligible_sources": 0, "total_sources": 3}
    # limit: default 5, 0 skips both lanes (the filter is still reported)
    r = await post(client, "se", path, {"query": "酒造", "limit": 1})
    assert len(r["hits"]) == 1 and r["hits"][0] == unfiltered["hits"][0]
    skipped = {"ran": False, "reason": "the requested limit is 0"}
    r = await post(client, "se", path, {"query": "酒造", "limit": 0, "tags": ["sake"]})
    assert r == {
        "plan": {
            "contexts": [
                {
                    "context": "se",
                    "lanes": {"bm25": skipped, "vector": skipped},
                    "filter": {"eligible_sources": 2, "total_sources": 3},
                }
            ]
        },
        "hits": [],
    }
    none = {"ran": False, "reason": "the query yields no searchable terms"}
    r = await post(client, "se", path, {"query": "、。 ！"})
    assert r == {"plan": {"contexts": [{"context": "se", "lanes": {"bm25": none, "vector": none}}]}, "hits": []}
    r = await post(client, "se", path, {"query": "", "since": 1})
    assert plan_entry(r)["lanes"]["bm25"] == none and "filter" in plan_entry(r)
    r = await post(client, "se", path, {"query": "nothing-matches-this"})
    assert r["hits"] == [] and plan_entry(r)["lanes"]["bm25"] == {"ran": True}


async def test_search_questions_count_as_paragraph_terms(client: Client) -> None:
    await make_context(client, "sq")
    await post(
        client,
        "sq",
        "sources",
        {"passages": {"d": "first\n\nsecond"}, "questions": {"d": [{"paragraph": 1, "question": "what about zebras"}]}},
    )
    r = await post(client, "sq", "sources/search", {"query": "zebras"})
    assert [(h["source"], h["paragraph"], h["text"]) for h in r["hits"]] == [("d", 1, "second")]
    # replacing the passage drops its questions from the index
    await post(client, "sq", "sources", {"passages": {"d": "first\n\nsecond"}})
    assert (await post(client, "sq", "sources/search", {"query": "zebras"}))["hits"] == []


# ----- write semantics: aliases, revisions, paragraphs (§2) ---------------------------------------------


async def test_aliases_fold_at_write_time(client: Client) -> None:
    await graph(client, "fold", [a("alpha", "rel", "beta", 1.0, source="s1")])
    # applied in sorted order, so 'al' → 'Alpha' lands after 'Alpha' and points at the true record
    await post(client, "fold", "aliases", {"concepts": {"al": "Alpha", "Alpha": "alpha"}, "labels": {"R": "rel"}})
    before = await entry(client, "fold")
    await post(
        client, "fold", "associations", [a("al", "R", "beta", 3.0, source="s1"), a("Alpha", "rel", "gamma", 1.0)]
    )
    after = await entry(client, "fold")
    assert after["stats"]["concepts"] == before["stats"]["concepts"] + 1  # only gamma is new
    assert after["stats"]["labels"] == before["stats"]["labels"]
    result = await post(client, "fold", "query", {"subject": "alpha"})
    assert triples(result["matches"]) == [("alpha", "rel", "beta", 2.0, 2), ("alpha", "rel", "gamma", 1.0, 1)]
    assert result["matches"][0]["attributions"] == [
        {"source": "s1", "weight": 4.0, "count": 2, "paragraph": None, "section": None, "locator": None}
    ]
    # retraction folds too; removing the alias makes the spelling unknown again
    assert await post(client, "fold", "associations/retract", {"subject": "al", "label": "R", "object": "gamma"}) == {
        "retracted": True,
        "attributions_removed": 0,
    }
    assert_ok(await client.call("DELETE", ctx_path("fold", "aliases"), {"concepts": ["al"]}))
    assert (await post(client, "fold", "query", {"subject": "al"}))["total"] == 0
    assert (await post(client, "fold", "query", {"subject": "Alpha"}))["total"] == 2


async def test_revision_counters(client: Client) -> None:
    await make_context(client, "rev")

    async def rev() -> tuple[int, int, int]:
        r = (await entry(client, "rev"))["revision"]
        return r["graph"], r["passages"], r["config"]

    assert await rev() == (0, 0, 0)
    await post(
        client, "rev", "associations", [a("a", "r", "b", 1, source="s"), a("a", "r", "b", 1), a("c", "r", "d", 1)]
    )
    assert await rev() == (3, 0, 0)
    await post(client, "rev", "aliases", {"concepts": {"A": "a", "C": "c"}})
    assert await rev() == (5, 0, 0)
    await post(client, "rev", "aliases", {"concepts": {"A": "a"}})  # a no-op pair still counts
    assert await rev() == (6, 0, 0)
    assert_ok(await client.call("DELETE", ctx_path("rev", "aliases"), {"concepts": ["A", "C"]}))
    assert await rev() == (8, 0, 0)
    await post(client, "rev", "associations/retract", {"subject": "c", "label": "r", "object": "d"})
    assert await rev() == (9, 0, 0)
    await post(client, "rev", "associations/retract", {"subject": "c", "label": "r", "object": "d"})  # dead
    await post(client, "rev", "associations/retract", {"subject": "x", "label": "r", "object": "d"})  # unknown
    assert await rev() == (9, 0, 0)
    await post(client, "rev", "sources", {"passages": {"s": "text", "t": "more"}})
    assert await rev() == (9, 2, 0)
    await post(client, "rev", "sources/retract", {"source": "s"})  # known to the graph, with a passage
    assert await rev() == (10, 3, 0)
    await post(client, "rev", "sources/retract", {"source": "t"})  # passage only
    assert await rev() == (10, 4, 0)
    await post(client, "rev", "sources/retract?dry_run=true", {"source": "t"})
    await post(client, "rev", "sources/retract", {"source": "unknown"})
    assert await rev() == (10, 4, 0)
    assert_ok(await client.call("PATCH", ctx_path("rev"), {"description": "d"}))
    assert await rev() == (10, 4, 1)
    # reads never move a revision
    for tail, body in (
        ("query", {"subject": "a"}),
        ("recall", {"cue": "a"}),
        ("activate", {"origins": ["a"]}),
        ("resolve", {"cue": "a"}),
        ("describe", {"concept": "a"}),
        ("sources/search", {"query": "text"}),
    ):
        await post(client, "rev", tail, body)
    assert await rev() == (10, 4, 1)


async def test_stats_fields(client: Client) -> None:
    await make_context(client, "st")
    await post(
        client,
        "st",
        "associations",
        [
            a("a", "r", "b", 2.0, source="s1"),
            a("a", "r", "b", -5.0),  # unsourced residual -5
            a("a", "q", "c", 1.0, source="s1"),
            a("c", "q", "d", 1.0, source="s2"),
            a("x", "r", "y", 1.0, source="export:unsourced"),  # counts as unsourced
        ],
    )
    await post(client, "st", "associations/retract", {"subject": "c", "label": "q", "object": "d"})
    stats = (await entry(client, "st"))["stats"]
    assert stats["associations"] == 4 and stats["dead_edges"] == 1 and stats["dead_attributions"] == 1
    assert stats["concepts"] == 6 and stats["labels"] == 2 and stats["sources"] == 3
    assert stats["unsourced_edges"] == 2 and stats["unsourced_weight"] == 6.0
    assert stats["top_concepts"][:3] == [
        {"label": "a", "count": 2},
        {"label": "b", "count": 1},
        {"label": "c", "count": 1},
    ]
    assert {"label": "d", "count": 0} in stats["top_concepts"]
    assert stats["label_sample"] == ["r", "q"]
    assert isinstance(stats["footprint_bytes"], int) and isinstance(stats["arena_slack"], int)


@pytest.mark.parametrize(
    "text,paragraphs",
    [
        ("\nA\nB\n\n \t \nC\n\n", ["A\nB", "C"]),
        ("a\r\nb\r\n\r\nc\r\n", ["a\r\nb", "c"]),
        ("single line", ["single line"]),
        ("no blank\nline between", ["no blank\nline between"]),
        ("", []),
        ("\n \n\t\r\n\u3000\n", []),
        ("a\rb\n\nc", ["a\rb", "c"]),  # only \n splits lines
        ("a\u2028b\u2029c\x85d", ["a\u2028b\u2029c\x85d"]),  # none of these split
        ("a\n\u2028\nb", ["a", "b"]),  # but a line of them is blank
        ("a\n\x1c\nb", ["a\n\x1c\nb"]),  # \x1c is not White_Space
        ("a\n\u00a0\u1680\u200a\u202f\u205f\nb", ["a", "b"]),
        ("x\r\r\n\ny", ["x\r", "y"]),  # only one trailing \r is cut
        ("  lead\n\ntrail  ", ["  lead", "trail  "]),
        ("日本語\n\n\n\n段落", ["日本語", "段落"]),
    ],
)
async def test_paragraph_split(client: Client, text: str, paragraphs: list[str]) -> None:
    await make_context(client, "ps")
    await post(client, "ps", "sources", {"passages": {"d": text}})
    for i, expected in enumerate(paragraphs):
        got = await post(client, "ps", "citations", {"source": "d", "paragraph": i})
        assert got["text"] == expected
    assert_error(
        await client.call("POST", ctx_path("ps", "citations"), {"source": "d", "paragraph": len(paragraphs)}),
        404,
        "no_paragraph",
        f"paragraph {len(paragraphs)} out of range for source 'd' in context 'ps'",
    )
    # lookup returns the full text untouched
    assert (await post(client, "ps", "sources/lookup", {"sources": ["d"]}))["passages"] == {"d": text}


async def test_marker_rules_against_the_split(client: Client) -> None:
    await make_context(client, "mk")
    result = await post(
        client,
        "mk",
        "sources",
        {
            "passages": {"d": "p0\n\np1\n\np2\n\np3"},
            "sections": {
                "d": [
                    {"paragraph": 1, "section": "One"},
                    {"paragraph": 3, "section": "Three"},
                    {"paragraph": 4, "section": "Out"},
                ]
            },
            "locators": {
                "d": [
                    {"paragraph": 2, "locator": {"kind": "line", "value": "40"}},
                    {"paragraph": 9, "locator": {"kind": "line", "value": "90"}},
                ]
            },
        },
    )
    assert result == {
        "stored": 1,
        "questions_stored": 0,
        "questions_dropped": 0,
        "sections_stored": 2,
        "sections_dropped": 1,
        "locators_stored": 1,
        "locators_dropped": 1,
    }
    cites = [await post(client, "mk", "citations", {"source": "d", "paragraph": i}) for i in range(4)]
    assert [(c["section"], c["locator"]) for c in cites] == [
        (None, None),
        ("One", None),
        ("One", {"kind": "line", "value": "40"}),
        ("Three", None),
    ]


async def test_reasserting_revives_dead_edges_with_fresh_records(client: Client) -> None:
    await graph(client, "rv", [a("a", "r", "b", 1.0, source="s1", paragraph=0), a("a", "r", "b", 3.0, source="s2")])
    await post(client, "rv", "sources/retract", {"source": "s1"})
    await post(client, "rv", "associations", [a("a", "r", "b", 5.0, source="s1", paragraph=4)])
    (m,) = (await post(client, "rv", "query", {"subject": "a"}))["matches"]
    assert (m["weight"], m["count"]) == (4.0, 2)
    assert [(x["source"], x["weight"], x["count"], x["paragraph"]) for x in m["attributions"]] == [
        ("s2", 3.0, 1, None),
        ("s1", 5.0, 1, 4),
    ]
    await post(client, "rv", "associations/retract", {"subject": "a", "label": "r", "object": "b"})
    (m,) = (await post(client, "rv", "query", {"subject": "a"}))["matches"]
    assert (m["weight"], m["count"], m["attributions"]) == (0.0, 0, [])
    await post(client, "rv", "associations", [a("a", "r", "b", -2.0, source="s2")])
    (m,) = (await post(client, "rv", "query", {"subject": "a"}))["matches"]
    assert (m["weight"], m["count"], [(x["source"], x["weight"]) for x in m["attributions"]]) == (
        -2.0,
        1,
        [("s2", -2.0)],
    )
    stats = (await entry(client, "rv"))["stats"]
    assert stats["associations"] == 1 and stats["dead_edges"] == 0 and stats["dead_attributions"] == 3
