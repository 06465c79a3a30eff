"""Audits and promote (groups-audits §4-§5): the reference fixtures replayed on their set-ups, check order,
error texts, scoped keys, and the sweeps against plain transcriptions on seeded random contexts."""

from __future__ import annotations

import json

import pytest
from conftest import Client, exact, load_fixture, normalize, start_client
from reference_setups import AUDIT_SETUPS

from taguru_server.server.state import HEAVY_OPS_KEY

AUDIT_FIXTURES = ["vocabulary_audit", "drift_audit", "consolidation_audit", "promote_dry_run", "promote"]


async def _setup(client: Client, steps) -> None:
    for method, path, body in steps:
        status, parsed, _h = await client.call(method, path, body)
        assert status == 200, (method, path, parsed)


@pytest.mark.anyio
@pytest.mark.parametrize("name", AUDIT_FIXTURES)
async def test_reference_fixture(client: Client, name: str) -> None:
    fixture = load_fixture("http", name)
    steps, context = AUDIT_SETUPS[name]
    await _setup(client, steps)
    path = fixture["route"].replace("{name}", context)
    status, parsed, _h = await client.call(fixture["method"], path, fixture["request"])
    assert status == fixture["status"], parsed
    assert exact(normalize(parsed)) == exact(normalize(fixture["response"]))


@pytest.mark.anyio
async def test_mcp_tool_schema_fixture_and_routed_audits(client: Client) -> None:
    fixture = load_fixture("mcp", "audit_consolidation_tool_schema")
    status, body, _h = await client.call(
        "POST", "/mcp", {"id": 1, "jsonrpc": "2.0", "method": "tools/list", "params": {}}
    )
    assert status == 200
    tools = body["result"]["tools"]
    assert exact({"tools": [t for t in tools if t["name"] == "audit_consolidation"]}) == exact(fixture["response"])
    names = {t["name"] for t in tools}
    assert {"audit_vocabulary", "audit_drift", "audit_consolidation", "promote"} <= names
    steps, context = AUDIT_SETUPS["consolidation_audit"]
    await _setup(client, steps)
    direct = await client.ok("POST", f"/contexts/{context}/consolidation/audit", {"checks": ["staleness", "merge"]})
    for tool, args, route, body_ in (
        ("audit_consolidation", {"checks": ["staleness", "merge"]}, "consolidation/audit", None),
        ("audit_vocabulary", {}, "vocabulary/audit", {}),
        ("audit_drift", {"include_twins": True, "limit": 1}, "drift/audit", {"include_twins": True, "limit": 1}),
    ):
        status, reply, _h = await client.call(
            "POST",
            "/mcp",
            {
                "id": 1,
                "jsonrpc": "2.0",
                "method": "tools/call",
                "params": {"name": tool, "arguments": {"context": context, **args}},
            },
        )
        assert status == 200 and not reply["result"].get("isError"), reply
        got = json.loads(reply["result"]["content"][0]["text"])["result"]
        want = (
            direct["result"]
            if body_ is None
            else (await client.ok("POST", f"/contexts/{context}/{route}", body_))["result"]
        )
        assert got == want
    status, reply, _h = await client.call(
        "POST",
        "/mcp",
        {
            "id": 1,
            "jsonrpc": "2.0",
            "method": "tools/call",
            "params": {"name": "audit_consolidation", "arguments": {"context": context, "checks": []}},
        },
    )
    assert reply["result"]["isError"] and reply["result"]["content"][0]["text"].startswith("HTTP 400: ")


# ----- vocabulary -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_vocabulary_optional_body_and_errors(client: Client) -> None:
    await _setup(client, AUDIT_SETUPS["vocabulary_audit"][0])
    want = load_fixture("http", "vocabulary_audit")["response"]["result"]
    path = "/contexts/corpus-j/vocabulary/audit"
    for kw in (
        {"raw": b"", "content_type": None},
        {"raw": b"", "content_type": "text/plain"},
        {"raw": b"{}", "content_type": None},
    ):
        status, body, _h = await client.call("POST", path, **kw)
        assert status == 200 and body["result"] == want, (kw, body)
    # unknown top-level keys are ignored; any content type is read as JSON
    status, body, _h = await client.call("POST", path, raw=b'{"dice_floor":0.5,"zzz":1}', content_type="text/plain")
    assert status == 200
    assert [(p["a"], p["b"], p["score"]) for p in body["result"]["lexical_concepts"]] == [
        ("青嶺酒造", "青嶺酒蔵", 0.6666666666666666),
        ("青嶺酒造", "青嶺", 0.5),  # `a` is the earlier-interned record, not the one that sorts first
        ("青嶺", "青嶺酒蔵", 0.5),
    ]
    for raw in (b"{", b'{"dice_floor":"x"}', b'{"dice_floor":[]}', b'{"cosine_floor":null}', b"[]", b"null"):
        status, body, _h = await client.call("POST", path, raw=raw)
        assert status == 400 and body["code"] == "malformed_request", raw
        assert body["error"].startswith("the request body is not valid JSON: "), body
    status, body, _h = await client.call("POST", "/contexts/nowhere/vocabulary/audit", raw=b"")
    assert (status, body["error"]) == (404, "context 'nowhere' not found")
    status, body, _h = await client.call("POST", "/contexts/nowhere/vocabulary/audit", raw=b"{")
    assert status == 400  # the body is read before the context


@pytest.mark.anyio
async def test_vocabulary_illustrative_pair_and_alias_targets(client: Client) -> None:
    await client.ok("PUT", "/contexts/v", content_type=None)
    await client.ok(
        "POST",
        "/contexts/v/associations",
        [
            {"label": "kind", "object": "会社", "subject": "株式会社青嶺", "weight": 1.0},
            {"label": "kind", "object": "会社", "subject": "青嶺株式会社", "weight": 1.0},
        ],
    )
    body = await client.ok("POST", "/contexts/v/vocabulary/audit", {"dice_floor": 0.4})
    assert body["result"]["lexical_concepts"] == [{"a": "株式会社青嶺", "b": "青嶺株式会社", "score": 0.8}]
    # an alias and its own canonical never pair; an alias pairs for its canonical against another record
    await client.ok("POST", "/contexts/v/aliases", {"concepts": {"株式会社青嶺X": "株式会社青嶺"}})
    body = await client.ok("POST", "/contexts/v/vocabulary/audit", {"dice_floor": 0.4})
    assert body["result"]["lexical_concepts"] == [{"a": "株式会社青嶺", "b": "青嶺株式会社", "score": 0.8}]
    body = await client.ok("POST", "/contexts/v/vocabulary/audit", {"dice_floor": 7})  # clamped to 1.0
    assert body["result"]["lexical_concepts"] == []


# ----- drift ------------------------------------------------------------------------------------


async def _drift_corpus(client: Client) -> None:
    await client.ok("PUT", "/contexts/d", content_type=None)
    await client.ok(
        "POST", "/contexts/d/associations", [{"label": "kind", "object": "会社", "subject": "青嶺酒造", "weight": 1.0}]
    )
    await client.ok(
        "POST",
        "/contexts/d/associations",
        [{"label": "kind", "object": "杜氏", "source": "docs/a.md", "subject": "高瀬", "weight": 1.0}],
    )
    await client.ok("POST", "/contexts/d/associations/retract", {"label": "kind", "object": "杜氏", "subject": "高瀬"})
    assert (await client.ok("POST", "/contexts/d/aliases", {"concepts": {"タカセ": "高瀬"}}))["result"] == 1


@pytest.mark.anyio
async def test_drift_illustrative_and_errors(client: Client) -> None:
    await client.ok("PUT", "/contexts/empty", content_type=None)
    body = await client.ok("POST", "/contexts/empty/drift/audit", raw=b"")
    assert body["result"] == {
        "total": 0,
        "unsourced": [],
        "dead_concept_aliases": {},
        "dead_label_aliases": {},
        "twins": None,
    }
    await _drift_corpus(client)
    body = await client.ok("POST", "/contexts/d/drift/audit", {"include_twins": False})
    r = body["result"]
    assert r["total"] == 1 and r["twins"] is None
    assert r["unsourced"][0]["unsourced_weight"] == 1.0 and r["unsourced"][0]["unsourced_count"] == 1
    assert r["unsourced"][0]["association"]["subject"] == "青嶺酒造"
    assert r["dead_concept_aliases"] == {"タカセ": "高瀬"} and r["dead_label_aliases"] == {}
    body = await client.ok("POST", "/contexts/d/drift/audit", {"unsourced_floor": 10.0, "include_twins": False})
    assert body["result"]["total"] == 0 and body["result"]["unsourced"] == []
    body = await client.ok("POST", "/contexts/d/drift/audit", {"include_twins": True, "dice_floor": 0.4})
    assert isinstance(body["result"]["twins"], dict)
    for raw in (
        b'{"include_twins":null}',
        b'{"limit":-1}',
        b'{"limit":1.5}',
        b'{"after":{"weight":1.0,"subject":"a","label":"b","object":"c","extra":1}}',
        b'{"after":{"weight":1.0,"subject":"a"}}',
    ):
        status, body, _h = await client.call("POST", "/contexts/d/drift/audit", raw=raw)
        assert status == 400 and body["code"] == "malformed_request", raw
        assert body["error"].startswith("the request body is not valid JSON: ")
    status, body, _h = await client.call("POST", "/contexts/nowhere/drift/audit", raw=b"")
    assert status == 404


@pytest.mark.anyio
async def test_drift_pages_like_recall_on_unsourced_weight(client: Client) -> None:
    await client.ok("PUT", "/contexts/p", content_type=None)
    rows = [{"label": "r", "object": f"o{i}", "subject": f"s{i % 3}", "weight": float((i % 5) - 2)} for i in range(20)]
    await client.ok("POST", "/contexts/p/associations", rows)
    # a sourced share on some edges: their unsourced weight is the rest
    await client.ok(
        "POST",
        "/contexts/p/associations",
        [{"label": "r", "object": "o1", "subject": "s1", "source": "x", "weight": 5.0}],
    )
    everything = (await client.ok("POST", "/contexts/p/drift/audit", {"limit": 1000}))["result"]
    assert everything["total"] == 20 and len(everything["unsourced"]) == 20
    keys = [
        (
            -abs(u["unsourced_weight"]),
            u["association"]["subject"],
            u["association"]["label"],
            u["association"]["object"],
        )
        for u in everything["unsourced"]
    ]
    assert keys == sorted(keys)
    o1 = next(u for u in everything["unsourced"] if u["association"]["object"] == "o1")
    assert o1["unsourced_weight"] == -1.0 and o1["unsourced_count"] == 1 and o1["association"]["count"] == 2
    pages, after = [], None
    while True:
        body = {"limit": 3, **({"after": after} if after else {})}
        page = (await client.ok("POST", "/contexts/p/drift/audit", body))["result"]
        assert page["total"] == 20
        if not page["unsourced"]:
            break
        pages.extend(page["unsourced"])
        last = page["unsourced"][-1]
        a = last["association"]
        after = {
            "weight": last["unsourced_weight"],
            "subject": a["subject"],
            "label": a["label"],
            "object": a["object"],
        }
    assert pages == everything["unsourced"]
    floored = (await client.ok("POST", "/contexts/p/drift/audit", {"unsourced_floor": -2.0}))["result"]
    assert floored["total"] == sum(1 for u in everything["unsourced"] if abs(u["unsourced_weight"]) >= 2.0)


# ----- consolidation ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_consolidation_checks_in_order(client: Client) -> None:
    await _setup(client, AUDIT_SETUPS["consolidation_audit"][0])
    path = "/contexts/fix/consolidation/audit"
    cases = [
        ({}, 422, "malformed_request", None),
        ({"checks": []}, 400, "invalid_argument", EMPTY_CHECKS),
        (
            {"checks": ["typo", "merge"]},
            400,
            "invalid_argument",
            "unknown check 'typo' — merge, contradiction, and staleness exist",
        ),
        (
            {"checks": ["merge", "staleness"] * 500 + ["x"]},
            400,
            "over_limit",
            "checks carries 1001 items, past the per-request limit of 1000; split the request",
        ),
        ({"checks": ["merge"], "limit": -1}, 422, "malformed_request", None),
    ]
    for body, status_, code, text in cases:
        status, got, _h = await client.call("POST", path, body)
        assert (status, got["code"]) == (status_, code), (body, got)
        if text is not None:
            assert got["error"] == text
    status, got, _h = await client.call("POST", path, raw=b'{"checks":["merge"]}', content_type=None)
    assert status == 415
    status, got, _h = await client.call("POST", "/contexts/nowhere/consolidation/audit", {"checks": ["merge"]})
    assert (status, got["error"]) == (404, "context 'nowhere' not found")
    status, got, _h = await client.call("POST", "/contexts/nowhere/consolidation/audit", {"checks": ["nope"]})
    assert status == 400  # the checks are judged before the context
    only = (await client.ok("POST", path, {"checks": ["merge", "merge"]}))["result"]
    assert set(only) == {"detector", "merge"}
    full = load_fixture("http", "consolidation_audit")["response"]["result"]
    again = (await client.ok("POST", path, {"checks": ["staleness", "contradiction", "merge"]}))["result"]
    assert again == full  # the order of checks does not matter, and fingerprints hold still
    cut = (await client.ok("POST", path, {"checks": ["contradiction", "staleness"], "limit": 1}))["result"]
    assert cut["contradiction"]["total"] == 2 and len(cut["contradiction"]["candidates"]) == 1
    assert cut["staleness"]["total"] == 2 and len(cut["staleness"]["candidates"]) == 1
    assert (await client.ok("POST", path, {"checks": ["staleness"], "floor_secs": 1000}))["result"]["staleness"][
        "total"
    ] == 2
    assert (await client.ok("POST", path, {"checks": ["staleness"], "floor_secs": 1001}))["result"]["staleness"][
        "total"
    ] == 0
    capped = (await client.ok("POST", path, {"checks": ["merge"], "evidence_cap": 0}))["result"]["merge"]["candidates"][
        0
    ]
    assert capped["shared"] == [] and capped["shared_total"] == 1 and capped["fingerprint"] == "007bfc502e69af48"
    # the fingerprint moves when its evidence moves
    await client.ok(
        "POST",
        "/contexts/fix/associations",
        [{"label": "杜氏", "object": "青山", "source": "doc-c", "subject": "蔵", "weight": 1.0}],
    )
    moved = (await client.ok("POST", path, {"checks": ["contradiction"]}))["result"]["contradiction"]["candidates"][0]
    assert moved["kind"] == "objects" and moved["fingerprint"] != "3f483a6c555bef85"


EMPTY_CHECKS = (
    "'checks' must name at least one of merge, contradiction, staleness — every section is a full-graph pass, "
    "so the caller names what it pays for"
)


# ----- the heavy-operation permit -------------------------------------------------------------------


@pytest.mark.anyio
async def test_heavy_permit_refusals(settings_factory, monkeypatch) -> None:
    monkeypatch.setenv("TAGURU_MAX_CONCURRENT_HEAVY_OPS", "1")
    server, client, session = await start_client(settings_factory())
    try:
        await _setup(client, AUDIT_SETUPS["promote"][0][:-1])
        ops = server.app[HEAVY_OPS_KEY]
        ops.count = 1  # another heavy operation is running
        text = (
            "server is at its heavy-operation ceiling (1 concurrent calls) — retry shortly "
            "(TAGURU_MAX_CONCURRENT_HEAVY_OPS tunes this)"
        )
        for path, raw in (
            ("/contexts/nowhere/vocabulary/audit", b"{"),  # before the body and the context
            ("/contexts/nowhere/consolidation/audit", b"not json"),
            ("/contexts/scratch-w/drift/audit", b'{"include_twins":true}'),
        ):
            status, body, headers = await client.call("POST", path, raw=raw)
            assert (status, body["code"], body["error"], headers.get("Retry-After")) == (503, "overloaded", text, "1")
        body = await client.ok("POST", "/contexts/scratch-w/drift/audit", {"include_twins": False})
        assert body["result"]["twins"] is None
        promoted = await client.ok(
            "POST", "/contexts/scratch-w/promote", {"into": "corpus-p", "sources": ["session:w:a"]}
        )
        assert promoted["result"]["audit_skipped"] == "overloaded" and "audit" not in promoted["result"]
        ops.count = 0
        await client.ok("POST", "/contexts/scratch-w/vocabulary/audit", raw=b"")
        await client.ok("POST", "/contexts/scratch-w/consolidation/audit", {"checks": ["merge"]})
        await client.ok("POST", "/contexts/scratch-w/drift/audit", {"include_twins": True})
        await client.call("POST", "/contexts/scratch-w/vocabulary/audit", raw=b"{")
        assert ops.count == 0  # every permit went back, refusals included
    finally:
        await session.close()
        await server.close()


# ----- promote -----------------------------------------------------------------------------------

PROMOTE_BODY = {"into": "corpus-p", "sources": ["session:w:a"]}


@pytest.mark.anyio
async def test_promote_checks_in_order(client: Client) -> None:
    await _setup(client, AUDIT_SETUPS["promote_dry_run"][0])
    path = "/contexts/scratch-w/promote"
    status, got, _h = await client.call("POST", path + "?dry_run=1", PROMOTE_BODY)
    assert (status, got["code"]) == (400, "malformed_request")
    status, got, _h = await client.call("POST", path, {"sources": ["a"]})
    assert (status, got["code"]) == (422, "malformed_request")
    status, got, _h = await client.call("POST", path, raw=b'{"into":"corpus-p","sources":["a"]}', content_type=None)
    assert status == 415
    cases = [
        (
            {"into": "corpus-p", "sources": []},
            400,
            "invalid_argument",
            "'sources' must name at least one source id to promote — choosing which sources are the keepers is the "
            "caller's judgment, never a default",
        ),
        (
            {"into": "corpus-p", "sources": ["s"] * 1001},
            400,
            "over_limit",
            "sources carries 1001 items, past the per-request limit of 1000; split the request",
        ),
        (
            {"into": "scratch-w", "sources": ["session:w:a"]},
            400,
            "invalid_argument",
            "'into' names the promoting context 'scratch-w' itself — promotion moves sources into a DIFFERENT, "
            "established context",
        ),
        (
            {"into": "corpus-p", "sources": ["export:empty", "export:unsourced"]},
            400,
            "invalid_argument",
            "source id 'export:unsourced' is reserved by export — promotion moves named sources' own shares; "
            "sourceless weight cannot travel",
        ),
        (
            {"into": "corpus-p", "sources": ["export:empty"]},
            400,
            "invalid_argument",
            "source id 'export:empty' is reserved by export — promotion moves named sources' own shares; "
            "sourceless weight cannot travel",
        ),
        (
            {"into": "nowhere", "sources": ["session:w:a"]},
            404,
            "no_context",
            "context 'nowhere' ('into') does not exist — promotion lands in an established context and never "
            "creates one; create it first",
        ),
    ]
    for body, status_, code, text in cases:
        status, got, _h = await client.call("POST", path, body)
        assert (status, got["code"], got["error"]) == (status_, code, text), body
    status, got, _h = await client.call("POST", "/contexts/nowhere/promote", {"into": "also-nowhere", "sources": ["a"]})
    assert "('into')" in got["error"]  # `into` is checked before the scratch
    assert got["integrity"] == "nothing_written" and got["retryable_after_correction"] is True
    status, got, _h = await client.call("POST", "/contexts/nowhere/promote", PROMOTE_BODY)
    assert (status, got["error"]) == (404, "context 'nowhere' not found")
    status, got, _h = await client.call(
        "POST", path, {"into": "corpus-p", "sources": ["session:w:a", "session:w:typo", "session:w:typo"]}
    )
    assert status == 404
    assert got == {
        "status": "error",
        "code": "no_source",
        "error": "2 of the named source id(s) exist(s) nowhere in context 'scratch-w' — under retract-then-apply a "
        "mistyped id would no-op silently, so the whole request refuses instead; nothing was applied",
        "time": got["time"],
        "issues": [
            {
                "path": f"sources[{i}]",
                "kind": "unknown_reference",
                "expected": "'session:w:typo' stored in context 'scratch-w' as a passage or a live attribution",
                "actual": "not present in this request",
            }
            for i in (1, 2)
        ],
        "issues_total": 2,
        "integrity": "nothing_written",
        "retryable_after_correction": True,
    }
    many = [f"typo{i}" for i in range(25)]
    status, got, _h = await client.call("POST", path, {"into": "corpus-p", "sources": many})
    assert len(got["issues"]) == 20 and got["issues_total"] == 25 and got["error"].startswith("25 of ")
    # a fully retracted source no longer exists
    await client.ok("POST", "/contexts/scratch-w/sources/retract", {"source": "session:w:stay"})
    status, got, _h = await client.call("POST", path, {"into": "corpus-p", "sources": ["session:w:stay"]})
    assert got["code"] == "no_source"
    assert (await client.ok("GET", "/contexts/corpus-p"))["result"]["stats"]["associations"] == 0  # nothing written


@pytest.mark.anyio
async def test_promote_moves_own_shares_and_is_idempotent(client: Client) -> None:
    await _setup(client, AUDIT_SETUPS["promote_dry_run"][0])
    tails = {n: (await client.ok("GET", f"/contexts/{n}/changes"))["result"]["next"] for n in ("corpus-p", "scratch-w")}
    first = (await client.ok("POST", "/contexts/scratch-w/promote", PROMOTE_BODY))["result"]
    assert first["batches"][0]["retracted"] == 0 and first["audit"]["detector"] == "consolidation/1"
    listed = (await client.ok("GET", "/contexts/corpus-p/sources"))["result"]
    row = next(s for s in listed["entries"] if s["name"] == "session:w:a")
    assert row["date"] == 1000 and row["tags"] == ["酒"]
    resolved = (await client.ok("POST", "/contexts/corpus-p/resolve", {"cue": "たかせ"}))["result"]
    assert resolved[0]["name"] == "高瀬" and resolved[0]["kind"] == "alias"
    assert (await client.ok("GET", "/contexts/corpus-p/aliases"))["result"]["concepts"] == {"たかせ": "高瀬"}
    scratch = (await client.ok("POST", "/contexts/scratch-w/recall", {"cue": "蔵"}))["result"]["matches"]
    assert {a["source"] for m in scratch for a in m["attributions"]} == {"session:w:a", "session:w:stay"}
    matches = (await client.ok("POST", "/contexts/corpus-p/recall", {"cue": "蔵"}))["result"]["matches"]
    assert [(m["label"], m["object"], m["weight"], m["count"]) for m in matches] == [("杜氏", "高瀬", 1.0, 1)]
    assert matches[0]["attributions"][0]["paragraph"] == 0
    # the preview of a re-promotion counts what it would retract; the re-promotion is exact
    preview = (await client.ok("POST", "/contexts/scratch-w/promote?dry_run=true", PROMOTE_BODY))["result"]
    assert preview["batches"][0]["retracted"] == 1 and set(preview) == {"batches", "aliases_dropped"}
    again = (await client.ok("POST", "/contexts/scratch-w/promote", {**PROMOTE_BODY, "audit": False}))["result"]
    assert again["batches"][0]["retracted"] == 1 and set(again) == {"batches", "aliases_dropped"}
    assert (await client.ok("POST", "/contexts/corpus-p/recall", {"cue": "蔵"}))["result"]["matches"] == matches
    # the change feed of the destination names each write; the scratch's is untouched
    feed = (await client.ok("GET", f"/contexts/corpus-p/changes?since={tails['corpus-p']}"))["result"]["events"]
    kinds = [c["kind"] for c in feed]
    assert kinds == ["source_stored", "associations_added", "aliases_added"] * 1 + [
        "source_retracted",
        "source_stored",
        "associations_added",
        "aliases_added",
    ], kinds
    scratch_feed = await client.ok("GET", f"/contexts/scratch-w/changes?since={tails['scratch-w']}")
    assert scratch_feed["result"]["events"] == []


@pytest.mark.anyio
async def test_promote_several_sources_refusal_keeps_the_durable_prefix(client: Client) -> None:
    await client.ok("PUT", "/contexts/s", content_type=None)
    await client.ok("PUT", "/contexts/t", content_type=None)
    await client.ok(
        "POST",
        "/contexts/s/associations",
        [
            {"label": "r", "object": "b", "source": "a-src", "subject": "a", "weight": 2.0},
            {"label": "r", "object": "b", "source": "a-src", "subject": "a", "weight": 1.0},
            {"label": "r", "object": "b", "source": "z-src", "subject": "a", "weight": -1.0},
            {"label": "r", "object": "c", "subject": "a", "weight": 4.0},
        ],
    )
    await client.ok("POST", "/contexts/s/aliases", {"concepts": {"bee": "b", "cee": "c"}})
    # `bee` already names another record in the destination: the last batch (which carries the aliases) refuses
    await client.ok(
        "POST", "/contexts/t/associations", [{"label": "q", "object": "bee", "subject": "x", "weight": 1.0}]
    )
    body = {"into": "t", "sources": ["z-src", "a-src"]}
    status, got, _h = await client.call("POST", "/contexts/s/promote?dry_run=true", body)
    assert status == 409
    assert got["error"] == (
        "batch 2 of 2 (context 't', source 'z-src') would be refused — the 1 batch(es) before it previewed clean "
        "(dry_run=true; nothing is written); fixing the scratch (or the destination) and re-running the preview is "
        "exact: concept alias 'bee' → 'b': the alias already resolves to a different record; nothing was applied"
    )
    assert got["integrity"] == "nothing_written" and got["issues"][0]["path"] == "batches[1].concepts['bee']"
    status, got, _h = await client.call("POST", "/contexts/s/promote", body)
    assert status == 409 and got["integrity"] == "durable_prefix" and got["durable_batches"] == 1
    assert got["error"].startswith(
        "batch 2 of 2 (context 't', source 'z-src') refused — the 1 batch(es) before it landed durably; fixing the "
        "scratch (or the destination) and re-calling promote is exact (each batch replaces its own source): "
    )
    matches = (await client.ok("POST", "/contexts/t/recall", {"cue": "a"}))["result"]["matches"]
    # a-src's own share only (two lines of its average 1.5); z-src's share and the sourceless edge stay behind
    assert [(m["object"], m["weight"], m["count"]) for m in matches] == [("b", 1.5, 2)]
    # without the conflict both land, and the dropped alias is counted
    await client.ok("POST", "/contexts/t/associations/retract", {"label": "q", "object": "bee", "subject": "x"})
    await client.ok("DELETE", "/contexts/t", content_type=None)
    await client.ok("PUT", "/contexts/t", content_type=None)
    result = (await client.ok("POST", "/contexts/s/promote", body))["result"]
    assert [b["source"] for b in result["batches"]] == ["a-src", "z-src"]
    assert [b["aliases"] for b in result["batches"]] == [0, 1] and result["aliases_dropped"] == 1
    matches = (await client.ok("POST", "/contexts/t/recall", {"cue": "a"}))["result"]["matches"]
    assert [(m["object"], m["weight"], m["count"]) for m in matches] == [("b", 2.0 / 3.0, 3)]


# ----- scoped keys ------------------------------------------------------------------------------------

TOKENS = {"boss": "btok", "scratcher": "stok", "reader": "rtok"}
SCOPES = {
    "scratcher": {"role": "write", "contexts": ["scratch-w"]},
    "reader": {"role": "read", "contexts": ["scratch-w"]},
}


@pytest.mark.anyio
async def test_scoped_keys(settings_factory) -> None:
    server, client, session = await start_client(
        settings_factory(
            TAGURU_API_TOKENS=",".join(f"{k}:{v}" for k, v in TOKENS.items()),
            TAGURU_KEY_SCOPES=json.dumps(SCOPES),
        )
    )
    try:
        for method, path, body in AUDIT_SETUPS["promote_dry_run"][0]:
            status, got, _h = await client.call(method, path, body, token="btok")
            assert status == 200, got
        # the promoting key has no grant on `into`: refused before anything else is looked at
        for into in ("corpus-p", "does-not-exist"):
            status, got, _h = await client.call(
                "POST", "/contexts/scratch-w/promote", {"into": into, "sources": ["session:w:typo"]}, token="stok"
            )
            assert (status, got["code"], got["error"], got["integrity"]) == (
                403,
                "forbidden",
                f"key 'scratcher' has no grant on context '{into}' ('into'); nothing was applied",
                "nothing_written",
            )
        status, got, _h = await client.call("POST", "/contexts/scratch-w/promote", PROMOTE_BODY, token="rtok")
        assert (status, got["error"]) == (
            403,
            "key 'reader' has role 'read', but POST /contexts/{name}/promote needs 'write'",
        )
        # audits outside the grant are refused (the same answer whether or not the context exists)
        for path in ("vocabulary/audit", "drift/audit", "consolidation/audit"):
            for name in ("corpus-p", "does-not-exist"):
                status, got, _h = await client.call(
                    "POST", f"/contexts/{name}/{path}", {"checks": ["merge"]}, token="rtok"
                )
                assert (status, got["error"]) == (403, f"key 'reader' has no grant on context '{name}'")
            await client.ok("POST", f"/contexts/scratch-w/{path}", {"checks": ["merge"]}, token="rtok")
        # through MCP: the routed call keeps the caller's role and grants
        for token, args, text in (
            ("rtok", {"context": "scratch-w", **PROMOTE_BODY}, "needs 'write'"),
            ("stok", {"context": "scratch-w", **PROMOTE_BODY}, "('into'); nothing was applied"),
            ("rtok", {"context": "corpus-p", "checks": ["merge"]}, "has no grant on context 'corpus-p'"),
        ):
            tool = "promote" if "into" in args else "audit_consolidation"
            status, reply, _h = await client.call(
                "POST",
                "/mcp",
                {"id": 1, "jsonrpc": "2.0", "method": "tools/call", "params": {"name": tool, "arguments": args}},
                token=token,
            )
            assert reply["result"]["isError"] and text in reply["result"]["content"][0]["text"], reply
        assert (await client.ok("GET", "/contexts/corpus-p", token="btok"))["result"]["stats"]["associations"] == 0
        promoted = await client.ok("POST", "/contexts/scratch-w/promote", PROMOTE_BODY, token="btok")
        assert promoted["result"]["audit"]["detector"] == "consolidation/1"
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
async def test_the_semantic_half_with_gloss_vectors(settings_factory) -> None:
    from fake_embedder import FRUITY, FakeEmbedder, table
    from test_semantic_lanes import serving

    async with serving(settings_factory, FakeEmbedder(table(FRUITY))) as client:
        await client.ok("PUT", "/contexts/fruit", content_type=None)
        await client.ok(
            "POST",
            "/contexts/fruit/associations",
            [
                {"subject": "りんご", "label": "色", "object": "赤", "weight": 1.0},
                {"subject": "アップル", "label": "色", "object": "赤", "weight": 1.0},
                {"subject": "みかん", "label": "色", "object": "橙", "weight": 1.0},
            ],
        )
        before = (await client.ok("POST", "/contexts/fruit/vocabulary/audit", raw=b""))["result"]
        assert (
            before["semantic_note"] == load_fixture("http", "vocabulary_audit")["response"]["result"]["semantic_note"]
        )
        await client.ok("POST", "/contexts/fruit/embeddings/refresh", raw=b"")
        after = (await client.ok("POST", "/contexts/fruit/vocabulary/audit", raw=b""))["result"]
        assert after["semantic_note"] is None
        pairs = {(p["a"], p["b"]): p["score"] for p in after["semantic_concepts"]}
        assert pairs[("りんご", "アップル")] == pytest.approx(0.96, abs=1e-6)
        merge = (await client.ok("POST", "/contexts/fruit/consolidation/audit", {"checks": ["merge"]}))["result"][
            "merge"
        ]
        assert "semantic_note" not in merge
        apple = next(c for c in merge["candidates"] if {c["a"], c["b"]} == {"りんご", "アップル"})
        assert apple["tier"] == "semantic" and apple["overlap"] == 1.0


@pytest.mark.anyio
async def test_a_sweep_past_the_budget(client: Client, monkeypatch) -> None:
    from taguru_server.store.derive import audits, twins

    await _setup(client, AUDIT_SETUPS["promote"][0][:-1])

    def expired(*_a: object, **_k: object) -> None:
        raise audits.Expired

    monkeypatch.setattr(twins.SpellingIndex, "twins", expired)
    mid_scan = "request exceeded its budget; narrow the query (TAGURU_REQUEST_TIMEOUT_SECS tunes this)"
    for path, body in (
        ("vocabulary/audit", {}),
        ("drift/audit", {"include_twins": True}),
        ("consolidation/audit", {"checks": ["merge"]}),
    ):
        status, got, _h = await client.call("POST", f"/contexts/scratch-w/{path}", body)
        assert (status, got["code"], got["error"]) == (408, "timeout", mid_scan), path
    await client.ok("POST", "/contexts/scratch-w/drift/audit", {"include_twins": False})
    await client.ok("POST", "/contexts/scratch-w/consolidation/audit", {"checks": ["staleness", "contradiction"]})
    # the batches are durable before the closing audit: a spent budget there only skips it
    promoted = (await client.ok("POST", "/contexts/scratch-w/promote", PROMOTE_BODY))["result"]
    assert promoted["audit_skipped"] == "deadline_exceeded" and "audit" not in promoted
    assert promoted["batches"][0]["associations"] == 1
