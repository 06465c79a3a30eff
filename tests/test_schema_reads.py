"""The read side of context schemas over HTTP: once a schema is installed (any mode) the `schema:type` edges
are hidden from activate, explore, paths, unreachable_from, the evidence activation stage and the labels
listing, type-name concept pairs leave the twin sweeps, the consolidation merge evidence drops the type
assertions and gains `types_a`/`types_b`, and describe and resolve carry a concept's asserted `types`.
Without a schema every one of these answers as before; an install changes them at once (no cache keeps
the old answer)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Client

from taguru_server.store.derive.twins import Twins, TypeNames
from taguru_server.store.model.context import CONCEPT, LABEL

pytestmark = pytest.mark.anyio

OFF0: dict[str, Any] = {"schema": 1, "mode": "off", "closed_labels": False, "types": {}, "relations": {}}
SEED_SCHEMA: dict[str, Any] = {
    "schema": 1,
    "mode": "warn",
    "closed_labels": False,
    "types": {"Organization": {"is_a": []}, "Brewery": {"is_a": ["Organization"]}, "Person": {"is_a": []}},
    "relations": {},
}


def assoc(s: str, label: str, o: str, weight: float = 1.0) -> dict[str, Any]:
    return {"subject": s, "label": label, "object": o, "weight": weight, "source": "a.md"}


async def context(client: Client, *facts: tuple[str, str, str], name: str = "sake") -> None:
    await client.ok("PUT", f"/contexts/{name}", {"description": "d"})
    if facts:
        await client.ok("POST", f"/contexts/{name}/associations", [assoc(*f) for f in facts])


async def install(client: Client, schema: dict[str, Any], name: str = "sake") -> None:
    await client.ok("PUT", f"/contexts/{name}/schema", schema)


async def result(client: Client, method: str, path: str, body: Any = None) -> Any:
    return (await client.ok(method, path, body))["result"]


async def raw_result(client: Client, method: str, path: str, body: Any = None) -> str:
    """The response text from `"result":` up to the status (the bytes as sent, key order included)."""
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
    async with client.session.request(
        method, client.base + path, data=data, headers={"Content-Type": "application/json"}
    ) as resp:
        text = (await resp.read()).decode("utf-8")
    assert text.startswith('{"result":'), text
    return text[len('{"result":') : text.rindex(',"status":"ok"')]


def triples(matches: list[dict[str, Any]], key: str | None = "association") -> list[tuple[str, str, str]]:
    rows = [m[key] if key else m for m in matches]
    return [(a["subject"], a["label"], a["object"]) for a in rows]


TYPED = (("青嶺酒造", "schema:type", "Brewery"), ("旧銘酒造", "schema:type", "Brewery"))


# ----- the reserved label hidden from the walks and the labels listing -------------------------------


async def test_schema_type_is_ordinary_until_a_schema_exists_then_hidden_from_labels_and_traversal(
    client: Client,
) -> None:
    await context(client, *TYPED, ("青嶺酒造", "所在地", "広島"))
    labels = await result(client, "GET", "/contexts/sake/labels")
    assert labels == {"total": 2, "labels": ["schema:type", "所在地"]}
    assert await result(client, "GET", "/contexts/sake/labels?prefix=schema:") == {
        "total": 1,
        "labels": ["schema:type"],
    }
    explore = {"origins": ["青嶺酒造"], "max_depth": 2}
    before = await result(client, "POST", "/contexts/sake/explore", explore)
    assert ("旧銘酒造", "schema:type", "Brewery") in triples(before["matches"])
    assert before["total"] == 3
    await install(client, OFF0)
    assert await result(client, "GET", "/contexts/sake/labels") == {"total": 1, "labels": ["所在地"]}
    assert await result(client, "GET", "/contexts/sake/labels?prefix=schema:") == {"total": 0, "labels": []}
    assert await result(client, "GET", "/contexts/sake/labels?after=schema:type") == {"total": 1, "labels": ["所在地"]}
    after = await result(client, "POST", "/contexts/sake/explore", explore)
    assert after["total"] == 1 and triples(after["matches"]) == [("青嶺酒造", "所在地", "広島")]
    status, body, _ = await client.call("POST", "/contexts/sake/aliases", {"labels": {"種類": "schema:type"}})
    assert status == 400 and "種類" in body["error"] and "rename" in body["error"]


async def test_explore_from_a_typed_concept_alone_reaches_nothing_once_a_schema_exists(client: Client) -> None:
    await context(client, *TYPED)
    explore = {"origins": ["青嶺酒造"], "max_depth": 2}
    before = await result(client, "POST", "/contexts/sake/explore", explore)
    assert before["total"] == 2 and ("旧銘酒造", "schema:type", "Brewery") in triples(before["matches"])
    await install(client, OFF0)
    assert await result(client, "POST", "/contexts/sake/explore", explore) == {"total": 0, "matches": []}


async def test_paths_never_threads_through_schema_type_once_a_schema_exists(client: Client) -> None:
    await context(client, *TYPED)
    body = {"origins": ["青嶺酒造"], "targets": ["旧銘酒造"]}
    before = await result(client, "POST", "/contexts/sake/paths", body)
    assert before["total"] == 1 and before["matches"][0]["path"] == ["青嶺酒造", "Brewery", "旧銘酒造"]
    await install(client, OFF0)
    assert await result(client, "POST", "/contexts/sake/paths", body) == {"total": 0, "capped": False, "matches": []}


async def test_paths_still_finds_trails_over_other_labels(client: Client) -> None:
    await context(client, *TYPED, ("青嶺酒造", "所在地", "広島"), ("旧銘酒造", "所在地", "広島"))
    await install(client, OFF0)
    found = await result(client, "POST", "/contexts/sake/paths", {"origins": ["青嶺酒造"], "targets": ["旧銘酒造"]})
    assert [m["path"] for m in found["matches"]] == [["青嶺酒造", "広島", "旧銘酒造"]]


ACTIVATE_SEED = (*TYPED, ("青嶺酒造", "所在地", "広島"), ("広島", "属する", "中国地方"))


async def test_activate_never_propagates_through_schema_type_once_a_schema_exists(client: Client) -> None:
    await context(client, *ACTIVATE_SEED)
    before = await result(client, "POST", "/contexts/sake/activate", {"origins": ["青嶺酒造"]})
    reached = {t: m["strength"] for t, m in zip(triples(before["matches"]), before["matches"], strict=True)}
    assert ("旧銘酒造", "schema:type", "Brewery") in reached
    assert reached[("広島", "属する", "中国地方")] == 0.125
    await install(client, OFF0)
    after = await result(client, "POST", "/contexts/sake/activate", {"origins": ["青嶺酒造"]})
    got = {t: m["strength"] for t, m in zip(triples(after["matches"]), after["matches"], strict=True)}
    assert set(got) == {("青嶺酒造", "所在地", "広島"), ("広島", "属する", "中国地方")}
    assert got[("広島", "属する", "中国地方")] == 0.25 > reached[("広島", "属する", "中国地方")]
    assert after["total"] == 2


async def test_activate_with_decay_one_takes_the_plain_walk_and_hides_the_label_too(client: Client) -> None:
    await context(client, *ACTIVATE_SEED)
    body = {"origins": ["青嶺酒造"], "decay": 1.0}
    before = await result(client, "POST", "/contexts/sake/activate", body)
    assert ("旧銘酒造", "schema:type", "Brewery") in triples(before["matches"])
    await install(client, OFF0)
    after = await result(client, "POST", "/contexts/sake/activate", body)
    assert all(label != "schema:type" for _s, label, _o in triples(after["matches"]))
    assert after["total"] == 2


async def test_unreachable_from_never_travels_through_schema_type_once_a_schema_exists(client: Client) -> None:
    await context(
        client,
        ("蔵", "銘柄", "青嶺"),
        ("孤島", "l", "先"),
        ("蔵", "schema:type", "Brewery"),
        ("孤島", "schema:type", "Brewery"),
    )
    body = {"origins": ["蔵"]}
    assert (await result(client, "POST", "/contexts/sake/unreachable_from", body))["total"] == 0
    await install(client, OFF0)
    after = await result(client, "POST", "/contexts/sake/unreachable_from", body)
    assert after["total"] == 1 and triples(after["matches"], None) == [("孤島", "l", "先")]


async def test_unreachable_from_never_reports_a_type_assertion_as_an_orphan(client: Client) -> None:
    await context(client, ("蔵", "銘柄", "青嶺"), ("孤島", "schema:type", "Brewery"))
    before = await result(client, "POST", "/contexts/sake/unreachable_from", {"origins": ["蔵"]})
    assert triples(before["matches"], None) == [("孤島", "schema:type", "Brewery")]
    await install(client, OFF0)
    assert await result(client, "POST", "/contexts/sake/unreachable_from", {"origins": ["蔵"]}) == {
        "total": 0,
        "matches": [],
    }


async def test_the_evidence_activation_stage_leaves_the_label_out(client: Client) -> None:
    await context(client, *ACTIVATE_SEED)

    def activated(package: dict[str, Any]) -> list[str]:
        return [
            item["association"]["label"]
            for item in package["items"]
            if item["kind"] == "association" and any(r["lane"] == "graph_activate" for r in item["lane_ranks"])
        ]

    before = await result(client, "POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]})
    assert "schema:type" in activated(before)
    await install(client, OFF0)
    after = await result(client, "POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]})
    assert "schema:type" not in activated(after) and "所在地" in activated(after)


async def test_the_reserved_alias_refusal_fires_in_warn_and_strict_too(client: Client) -> None:
    for name, mode in (("w", "warn"), ("s", "strict")):
        await context(client, name=name)
        await install(client, {**OFF0, "mode": mode}, name=name)
        status, body, _ = await client.call("POST", f"/contexts/{name}/aliases", {"labels": {"型": "schema:type"}})
        assert (status, body["code"]) == (400, "invalid_argument") and "型" in body["error"]


async def test_without_a_schema_the_walks_answer_as_before(client: Client) -> None:
    """A context that never installs a schema keeps its answers across other writes to other contexts."""
    await context(client, *ACTIVATE_SEED)
    await context(client, *ACTIVATE_SEED, name="typed")
    requests = [
        ("POST", "/contexts/{}/activate", {"origins": ["青嶺酒造"]}),
        ("POST", "/contexts/{}/explore", {"origins": ["青嶺酒造"], "max_depth": 3}),
        ("POST", "/contexts/{}/paths", {"origins": ["青嶺酒造"], "targets": ["旧銘酒造"]}),
        ("POST", "/contexts/{}/unreachable_from", {"origins": ["広島"]}),
        ("GET", "/contexts/{}/labels", None),
    ]
    before = [await raw_result(client, m, p.format("sake"), b) for m, p, b in requests]
    assert before == [await raw_result(client, m, p.format("typed"), b) for m, p, b in requests]
    await install(client, OFF0, name="typed")
    assert [await raw_result(client, m, p.format("sake"), b) for m, p, b in requests] == before
    changed = [await raw_result(client, m, p.format("typed"), b) for m, p, b in requests]
    assert [a != b for a, b in zip(before, changed, strict=True)] == [True, True, True, False, True]


async def test_recall_query_stats_and_the_contradiction_check_still_see_the_label(client: Client) -> None:
    await context(client, *TYPED, ("青嶺酒造", "schema:type", "Organization"))
    await install(client, OFF0)
    query = await result(client, "POST", "/contexts/sake/query", {"label": "schema:type"})
    assert query["total"] == 3
    recall = await result(client, "POST", "/contexts/sake/recall", {"cue": "Brewery"})
    assert ("旧銘酒造", "schema:type", "Brewery") in triples(recall["matches"], None)
    stats = (await result(client, "GET", "/contexts/sake"))["stats"]
    assert "schema:type" in stats["label_sample"] and stats["labels"] == 1
    checks = {"checks": ["contradiction"]}
    contradiction = (await result(client, "POST", "/contexts/sake/consolidation/audit", checks))["contradiction"]
    assert [(c["subject"], c["label"]) for c in contradiction["candidates"]] == [("青嶺酒造", "schema:type")]


# ----- the twin sweeps ---------------------------------------------------------------------------------


async def test_type_name_concepts_are_excluded_from_the_vocabulary_twin_audit_once_a_schema_exists(
    client: Client,
) -> None:
    await context(client, ("山田商店", "schema:type", "Organization"), ("山田商会", "schema:type", "Organisation"))

    def pairs(found: dict[str, Any], key: str) -> list[tuple[str, str]]:
        return [(p["a"], p["b"]) for p in found[key]]

    before = await result(client, "POST", "/contexts/sake/vocabulary/audit")
    assert set(pairs(before, "lexical_concepts")) == {("Organization", "Organisation"), ("山田商店", "山田商会")}
    drift = {"include_twins": True}
    assert ("Organization", "Organisation") in pairs(
        (await result(client, "POST", "/contexts/sake/drift/audit", drift))["twins"], "lexical_concepts"
    )
    await install(client, OFF0)
    after = await result(client, "POST", "/contexts/sake/vocabulary/audit")
    assert pairs(after, "lexical_concepts") == [("山田商店", "山田商会")]
    twins = (await result(client, "POST", "/contexts/sake/drift/audit", drift))["twins"]
    assert pairs(twins, "lexical_concepts") == [("山田商店", "山田商会")]


async def test_a_declared_type_name_is_excluded_and_label_twins_are_untouched(client: Client) -> None:
    await context(
        client, ("Brewery", "l", "x"), ("Brewerys", "l", "y"), ("a", "Organization", "b"), ("c", "Organisation", "d")
    )
    await install(client, SEED_SCHEMA)
    found = await result(client, "POST", "/contexts/sake/vocabulary/audit")
    assert found["lexical_concepts"] == []  # `Brewery` is declared, though never asserted
    assert [(p["a"], p["b"]) for p in found["lexical_labels"]] == [("Organization", "Organisation")]


def test_the_semantic_pairs_naming_a_type_name_are_dropped() -> None:
    found = Twins(
        {CONCEPT: [(0, 1, 0.9), (2, 3, 0.8)], LABEL: [(0, 1, 0.7)]},
        {CONCEPT: [(0.9, "Brewery", "醸造所"), (0.8, "酒蔵", "蔵元")], LABEL: [(0.7, "Brewery", "醸造所")]},
        None,
    )
    kept = TypeNames(frozenset({"Brewery"}), frozenset({1})).drop(found)
    assert kept.lexical == {CONCEPT: [(2, 3, 0.8)], LABEL: [(0, 1, 0.7)]}
    assert kept.semantic == {CONCEPT: [(0.8, "酒蔵", "蔵元")], LABEL: [(0.7, "Brewery", "醸造所")]}


async def test_semantic_twin_pairs_naming_a_type_name_are_dropped(settings_factory: Any) -> None:
    from fake_embedder import FRUITY, FakeEmbedder, table
    from semantic_support import serving

    async with serving(settings_factory, FakeEmbedder(table(FRUITY))) as client:
        await context(client, ("りんご", "色", "赤"), ("アップル", "色", "赤"), ("青果", "schema:type", "アップル"))
        await client.ok("POST", "/contexts/sake/embeddings/refresh", raw=b"")

        def semantic(found: dict[str, Any]) -> set[tuple[str, str]]:
            return {(p["a"], p["b"]) for p in found["semantic_concepts"]}

        before = await result(client, "POST", "/contexts/sake/vocabulary/audit")
        assert ("りんご", "アップル") in semantic(before)
        merge = {"checks": ["merge"]}
        candidates = (await result(client, "POST", "/contexts/sake/consolidation/audit", merge))["merge"]["candidates"]
        assert {"りんご", "アップル"} in [{c["a"], c["b"]} for c in candidates]
        await install(client, OFF0)
        after = await result(client, "POST", "/contexts/sake/vocabulary/audit")
        assert semantic(after) == {p for p in semantic(before) if "アップル" not in p}
        candidates = (await result(client, "POST", "/contexts/sake/consolidation/audit", merge))["merge"]["candidates"]
        assert {"りんご", "アップル"} not in [{c["a"], c["b"]} for c in candidates]


# ----- the consolidation merge --------------------------------------------------------------------------


async def test_consolidation_merge_drops_type_assertions_from_the_evidence_and_attaches_types(
    client: Client,
) -> None:
    await context(
        client,
        ("山田商店", "schema:type", "Organization"),
        ("山田商会", "schema:type", "Organization"),
        ("山田商会", "schema:type", "Brewery"),
        ("山田商店", "所在", "東京"),
        ("山田商会", "所在", "東京"),
        ("山田商会", "創業", "1900"),
    )
    audit = {"checks": ["merge"]}
    before = (await result(client, "POST", "/contexts/sake/consolidation/audit", audit))["merge"]
    (pair,) = before["candidates"]
    assert "types_a" not in pair and "types_b" not in pair
    assert (pair["shared_total"], pair["only_a_total"], pair["only_b_total"]) == (2, 0, 2)
    await install(client, OFF0)
    text = await raw_result(client, "POST", "/contexts/sake/consolidation/audit", audit)
    assert (
        '"name_score":0.6666666666666666,"types_a":["Organization"],"types_b":["Brewery","Organization"],"overlap":0.5'
        in text
    )
    (after,) = json.loads(text)["merge"]["candidates"]
    assert (after["a"], after["b"]) == ("山田商店", "山田商会")
    assert after["shared"] == [{"direction": "out", "label": "所在", "other": "東京"}]
    assert after["only_b"] == [{"direction": "out", "label": "創業", "other": "1900"}]
    assert (after["shared_total"], after["only_a_total"], after["only_b_total"]) == (1, 0, 1)
    assert after["fingerprint"] != pair["fingerprint"]


async def test_consolidation_merge_omits_an_empty_side_and_drops_type_name_pairs(client: Client) -> None:
    await context(
        client,
        ("山田商店", "schema:type", "Organization"),
        ("山田商会", "所在", "東京"),
        ("x", "schema:type", "Organisation"),
    )
    await install(client, OFF0)
    merge = (await result(client, "POST", "/contexts/sake/consolidation/audit", {"checks": ["merge"]}))["merge"]
    assert [(c["a"], c["b"]) for c in merge["candidates"]] == [("山田商店", "山田商会")]
    (pair,) = merge["candidates"]
    assert pair["types_a"] == ["Organization"] and "types_b" not in pair
    assert merge["total"] == 1


async def test_the_promote_landing_audit_sees_the_destinations_schema(client: Client) -> None:
    await context(
        client, ("山田商店", "schema:type", "Organization"), ("山田商会", "schema:type", "Organization"), name="scratch"
    )
    await context(client, name="dest")
    await install(client, OFF0, name="dest")
    found = await result(client, "POST", "/contexts/scratch/promote", {"into": "dest", "sources": ["a.md"]})
    (pair,) = found["audit"]["merge"]["candidates"]
    assert (pair["types_a"], pair["types_b"], pair["shared"], pair["overlap"]) == (
        ["Organization"],
        ["Organization"],
        [],
        0.0,
    )


# ----- describe and resolve ---------------------------------------------------------------------------

SEED = (
    ("青嶺酒造", "schema:type", "Brewery"),
    ("青嶺酒造", "杜氏", "高瀬"),
    ("高瀬", "schema:type", "Person"),
    ("霧沢町", "所在", "雲居県"),
)


async def test_describe_reports_types_only_once_a_schema_is_installed(client: Client) -> None:
    await context(client, *SEED)
    before = await result(client, "POST", "/contexts/sake/describe", {"concept": "青嶺酒造"})
    assert "types" not in before and {"label": "schema:type", "count": 1} in before["as_subject"]
    await install(client, SEED_SCHEMA)
    text = await raw_result(client, "POST", "/contexts/sake/describe", {"concept": "青嶺酒造"})
    assert text == (
        '{"concept":"青嶺酒造","as_subject":[{"label":"schema:type","count":1},{"label":"杜氏","count":1}],'
        '"as_object":[],"types":["Brewery"]}'
    )
    assert "types" not in await result(client, "POST", "/contexts/sake/describe", {"concept": "霧沢町"})
    assert (await result(client, "POST", "/contexts/sake/describe", {"concept": "Brewery"})).keys() == {
        "concept",
        "as_subject",
        "as_object",
    }


async def test_read_side_types_are_gated_by_document_existence_not_by_mode(client: Client) -> None:
    await context(client, *SEED)
    await install(client, {**SEED_SCHEMA, "mode": "off"})
    assert (await result(client, "POST", "/contexts/sake/describe", {"concept": "青嶺酒造"}))["types"] == ["Brewery"]
    found = await result(client, "POST", "/contexts/sake/resolve", {"cue": "青嶺酒造"})
    assert found[0]["types"] == ["Brewery"]


async def test_resolve_attaches_types_to_top_candidates_but_resolve_label_never_does(client: Client) -> None:
    await context(client, *SEED)
    before = await result(client, "POST", "/contexts/sake/resolve", {"cue": "青嶺酒造"})
    assert "types" not in before[0]
    await install(client, SEED_SCHEMA)
    text = await raw_result(client, "POST", "/contexts/sake/resolve", {"cue": "青嶺酒造"})
    assert text == (
        '[{"name":"青嶺酒造","score":1.0,"tier":"lexical","kind":"exact",'
        '"gloss":"青嶺酒造。schema:typeはBrewery。杜氏は高瀬。","types":["Brewery"]}]'
    )
    found = await result(client, "POST", "/contexts/sake/resolve", {"cue": "霧沢町"})
    assert found[0]["name"] == "霧沢町" and "types" not in found[0]
    labels = await result(client, "POST", "/contexts/sake/resolve_label", {"cue": "杜氏"})
    assert labels[0]["name"] == "杜氏" and "types" not in labels[0]
    typed = await result(client, "POST", "/contexts/sake/resolve_label", {"cue": "schema:type"})
    assert typed[0]["name"] == "schema:type" and "types" not in typed[0]


async def test_resolve_types_only_on_the_glossed_candidates(client: Client) -> None:
    names = [f"酒造{i:02d}" for i in range(10)]
    await context(client, *[(n, "schema:type", "Brewery") for n in names])
    await install(client, OFF0)
    found = await result(client, "POST", "/contexts/sake/resolve", {"cue": "酒造", "dice_floor": 0.1})
    assert len(found) == 10
    assert [("gloss" in c, "types" in c) for c in found] == [(True, True)] * 8 + [(False, False)] * 2
    assert all(c["types"] == ["Brewery"] for c in found[:8])
