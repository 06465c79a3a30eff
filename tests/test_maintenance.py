"""The operator verbs (graph-reads.md §5): flush, rename, compact, the maintenance sweep; their checks in order."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Client, start_client
from substrate_support import assert_error, assert_ok, ctx_path

from taguru_server.stages.model import GATE_MESSAGE

pytestmark = pytest.mark.anyio

TOKENS = {"admin": "tok-admin", "writer": "tok-writer", "botadmin": "tok-botadmin", "wide": "tok-wide"}
SCOPES = {
    "writer": "write",
    "botadmin": {"role": "admin", "contexts": ["sake"]},
    "wide": {"role": "admin", "contexts": ["sake", "renamed", ""]},
}
EDGE = [{"subject": "alpha", "label": "rel", "object": "beta", "weight": 1.0, "source": "doc.md"}]
STALE = (
    "the cursor's history is no longer held (a restart, a recreate, or more changes than the feed retains) — "
    "run a full resync, then tail again from a fresh cursor (GET /changes without since)"
)


@pytest.fixture
async def auth_client(settings_factory) -> AsyncIterator[Client]:
    settings = settings_factory(
        TAGURU_API_TOKENS=",".join(f"{k}:{v}" for k, v in TOKENS.items()),
        TAGURU_KEY_SCOPES=json.dumps(SCOPES),
        TAGURU_AUTH_FAIL_LIMIT_PER_MIN="0",
    )
    server, client, session = await start_client(settings)
    try:
        for name in ("sake", "other"):
            assert_ok(await client.call("PUT", ctx_path(name), token=TOKENS["admin"], content_type=None))
            assert_ok(await client.call("POST", ctx_path(name, "associations"), EDGE, token=TOKENS["admin"]))
        yield client
    finally:
        await session.close()
        await server.close()


async def post(client: Client, path: str, body: Any = None, token: str = "admin") -> tuple[int, Any, dict[str, str]]:
    if body is None:
        return await client.call("POST", path, token=TOKENS[token], content_type=None)
    return await client.call("POST", path, body, token=TOKENS[token])


# ----- flush -------------------------------------------------------------------------------------------------


async def test_flush_answers_an_empty_list_without_a_body_or_content_type(auth_client: Client) -> None:
    assert assert_ok(await post(auth_client, "/flush")) == ["other", "sake"]  # the fixture's contexts
    assert assert_ok(await post(auth_client, "/flush")) == []
    assert assert_ok(await auth_client.call("POST", "/flush", raw=b"junk", token=TOKENS["admin"])) == []


async def test_flush_names_the_contexts_written_since_the_previous_flush(auth_client: Client) -> None:
    assert_ok(await post(auth_client, "/flush"))
    for name in ("zeta", "alpha", "idle"):
        assert_ok(await auth_client.call("PUT", f"/contexts/{name}", {"description": "d"}, token=TOKENS["admin"]))
    assert assert_ok(await post(auth_client, "/flush")) == ["alpha", "idle", "zeta"]  # a create is a write
    assert assert_ok(await post(auth_client, "/flush")) == []
    for name in ("zeta", "alpha"):
        body = [{"subject": "a", "label": "b", "object": "c", "weight": 1.0}]
        assert_ok(await auth_client.call("POST", f"/contexts/{name}/associations", body, token=TOKENS["admin"]))
    assert assert_ok(await post(auth_client, "/flush")) == ["alpha", "zeta"]
    assert assert_ok(await post(auth_client, "/flush")) == []


async def test_flush_refuses_roles_and_scoped_keys(auth_client: Client) -> None:
    assert_error(
        await post(auth_client, "/flush", token="writer"),
        403,
        "forbidden",
        "key 'writer' has role 'write', but POST /flush needs 'admin'",
    )
    assert_error(
        await post(auth_client, "/flush", token="botadmin"),
        403,
        "forbidden",
        "flush is server-wide (it names every flushed context); a context-scoped key cannot call it",
    )


# ----- rename ------------------------------------------------------------------------------------------------


async def test_rename_checks_in_order(auth_client: Client) -> None:
    path = ctx_path("sake", "rename")
    status, body, _h = await auth_client.call("POST", path, raw=b'{"to":"x"}', token=TOKENS["admin"], content_type=None)
    assert status == 415 and body["code"] == "malformed_request"
    status, body, _h = await post(auth_client, path, {"too": "x"})
    assert status == 422 and body["code"] == "malformed_request"
    long = "é" * 33
    # 2: the size cap comes before the grant check
    assert_error(
        await post(auth_client, path, {"to": long}, token="botadmin"),
        400,
        "invalid_argument",
        "the destination name is 66 bytes, over the 64-byte cap; nothing was applied",
    )
    # 3: a scoped key needs a grant on the destination too (even an empty one, before step 5)
    for to in ("elsewhere", ""):
        assert_error(
            await post(auth_client, path, {"to": to}, token="botadmin"),
            403,
            "forbidden",
            f"key 'botadmin' has no grant on context '{to}'; nothing was applied",
        )
    # 5: empty, before existence
    assert_error(
        await post(auth_client, ctx_path("ghost", "rename"), {"to": ""}),
        400,
        "invalid_argument",
        "the destination name must not be empty",
    )
    # 6
    assert_error(
        await post(auth_client, ctx_path("ghost", "rename"), {"to": "x"}),
        404,
        "no_context",
        "context 'ghost' not found",
    )
    # 7: the same name is a no-op
    assert assert_ok(await post(auth_client, path, {"to": "sake", "extra": 1})) is True
    # 8
    assert_error(
        await post(auth_client, path, {"to": "other"}), 409, "already_exists", "context 'other' already exists"
    )
    assert_error(
        await post(auth_client, path, {"to": "x"}, token="writer"),
        403,
        "forbidden",
        "key 'writer' has role 'write', but POST /contexts/{name}/rename needs 'admin'",
    )
    assert assert_ok(await auth_client.call("GET", ctx_path("sake"), token=TOKENS["admin"]))["name"] == "sake"


async def test_rename_moves_everything_and_starts_a_new_feed(auth_client: Client) -> None:
    admin = TOKENS["admin"]
    await auth_client.call("POST", ctx_path("sake", "sources"), {"passages": {"doc.md": "alpha text"}}, token=admin)
    await auth_client.call("POST", ctx_path("sake", "aliases"), {"concepts": {"Alpha": "alpha"}}, token=admin)
    before = assert_ok(await auth_client.call("GET", ctx_path("sake"), token=admin))
    tail = assert_ok(await auth_client.call("GET", ctx_path("sake", "changes"), token=admin, content_type=None))
    assert assert_ok(await post(auth_client, ctx_path("sake", "rename"), {"to": "renamed"}, token="wide")) is True
    assert_error(
        await auth_client.call("GET", ctx_path("sake"), token=admin), 404, "no_context", "context 'sake' not found"
    )
    after = assert_ok(await auth_client.call("GET", ctx_path("renamed"), token=admin))
    assert after["name"] == "renamed"
    assert {k: v for k, v in after.items() if k not in ("name", "usage")} == {
        k: v for k, v in before.items() if k not in ("name", "usage")
    }
    found = assert_ok(await post(auth_client, ctx_path("renamed", "recall"), {"cue": "Alpha"}))
    assert found["matches"][0]["subject"] == "alpha"
    cited = assert_ok(await post(auth_client, ctx_path("renamed", "citations"), {"source": "doc.md", "paragraph": 0}))
    assert cited["text"] == "alpha text"
    status, body, _h = await auth_client.call(
        "GET", ctx_path("renamed", "changes") + "?since=" + tail["next"], token=admin, content_type=None
    )
    assert status == 410 and body["error"] == STALE
    fresh = assert_ok(await auth_client.call("GET", ctx_path("renamed", "changes"), token=admin, content_type=None))
    assert fresh["next"].split("-")[1] != tail["next"].split("-")[1] and fresh["next"].endswith("-0")
    # the old name is free again
    assert_ok(await auth_client.call("PUT", ctx_path("sake"), token=admin, content_type=None))
    assert assert_ok(await auth_client.call("GET", ctx_path("sake"), token=admin))["stats"]["associations"] == 0


async def test_a_refused_rename_changes_nothing(auth_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from taguru_server.store.persist.rows import RowStore

    def refuse(self: Any, cid: int, old: str, new: str) -> int:
        with self._tx() as db:
            db.execute("UPDATE contexts SET name = ? WHERE id = ?", (new, cid))
            raise self._failed(_io_error(self))

    monkeypatch.setattr(RowStore, "rename", refuse)
    status, body, _h = await post(auth_client, ctx_path("sake", "rename"), {"to": "renamed"})
    assert status == 503 and body["error"] == "the rename could not be made durable; nothing was applied"
    monkeypatch.undo()
    assert assert_ok(await auth_client.call("GET", ctx_path("sake"), token=TOKENS["admin"]))["name"] == "sake"
    assert_error(
        await auth_client.call("GET", ctx_path("renamed"), token=TOKENS["admin"]),
        404,
        "no_context",
        "context 'renamed' not found",
    )


def _io_error(store: Any) -> BaseException:
    """An exception of the store's own error class (what its driver raises on an I/O failure)."""
    return store.ERRORS[0]("disk I/O error")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/flush", None),
        (ctx_path("sake", "rename"), {"to": "x"}),
        (ctx_path("ghost", "rename"), {"to": ""}),
        (ctx_path("ghost", "compact"), None),
        ("/maintenance/compact", None),
    ],
)
async def test_a_spent_budget_is_refused_at_entry(
    auth_client: Client, monkeypatch: pytest.MonkeyPatch, path: str, body: Any
) -> None:
    from taguru_server.server.routes import maintenance

    monkeypatch.setattr(maintenance, "_now", lambda: float("inf"))
    assert_error(await post(auth_client, path, body), 408, "timeout", GATE_MESSAGE)


# ----- compact -----------------------------------------------------------------------------------------------


@pytest.fixture
async def app_client(settings_factory) -> AsyncIterator[tuple[Client, Any]]:
    server, client, session = await start_client(settings_factory())
    try:
        yield client, server.app
    finally:
        await session.close()
        await server.close()


async def test_compact_sheds_what_a_retract_left_behind(app_client: tuple[Client, Any]) -> None:
    client, _app = app_client
    assert_ok(await client.call("PUT", ctx_path("蔵元"), content_type=None))
    for source, label, obj in (("keep.md", "杜氏", "高瀬"), ("gone.md", "廃止銘柄", "旧銘")):
        row = [{"subject": "蔵", "label": label, "object": obj, "weight": 1.0, "source": source}]
        assert_ok(await client.call("POST", ctx_path("蔵元", "associations"), row))
    assert_ok(await client.call("POST", ctx_path("蔵元", "sources/retract"), {"source": "gone.md"}))
    query = {"subject": "蔵"}
    assert assert_ok(await client.call("POST", ctx_path("蔵元", "query"), query))["total"] == 2
    revision = assert_ok(await client.call("GET", ctx_path("蔵元")))["revision"]
    tail = assert_ok(await client.call("GET", ctx_path("蔵元", "changes"), content_type=None))
    outcome = assert_ok(await client.call("POST", ctx_path("蔵元", "compact"), content_type=None))
    assert list(outcome) == [
        "bytes_before",
        "bytes_after",
        "dead_edges",
        "aliases_dropped",
        "passages_compacted",
        "image_persisted",
    ]
    assert (outcome["dead_edges"], outcome["aliases_dropped"]) == (1, 0)
    assert outcome["passages_compacted"] is False and outcome["image_persisted"] is True
    assert outcome["bytes_after"] < outcome["bytes_before"]
    assert assert_ok(await client.call("POST", ctx_path("蔵元", "query"), query))["total"] == 1
    assert assert_ok(await client.call("POST", ctx_path("蔵元", "resolve"), {"cue": "旧銘"})) == []
    entry = assert_ok(await client.call("GET", ctx_path("蔵元")))
    assert entry["revision"] == revision  # (h): nothing else changes
    assert entry["stats"]["dead_edges"] == 0 and entry["stats"]["dead_attributions"] == 0
    assert entry["stats"]["footprint_bytes"] == outcome["bytes_after"]
    # no feed event, and the cursor stays valid
    page = assert_ok(
        await client.call("GET", ctx_path("蔵元", "changes") + "?since=" + tail["next"], content_type=None)
    )
    assert page["events"] == [] and page["next"] == tail["next"]


async def test_compact_checks_in_order(auth_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_error(
        await post(auth_client, ctx_path("sake", "compact"), token="writer"),
        403,
        "forbidden",
        "key 'writer' has role 'write', but POST /contexts/{name}/compact needs 'admin'",
    )
    assert_error(
        await post(auth_client, ctx_path("other", "compact"), token="botadmin"),
        403,
        "forbidden",
        "key 'botadmin' has no grant on context 'other'",
    )
    assert_error(await post(auth_client, ctx_path("ghost", "compact")), 404, "no_context", "context 'ghost' not found")
    assert assert_ok(await post(auth_client, ctx_path("sake", "compact"), token="botadmin"))["dead_edges"] == 0


async def test_compact_takes_a_heavy_operation_permit(
    app_client: tuple[Client, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from taguru_server.server.state import HEAVY_OPS_KEY

    client, app = app_client
    monkeypatch.setenv("TAGURU_MAX_CONCURRENT_HEAVY_OPS", "1")
    app[HEAVY_OPS_KEY].count = 1  # the communities stream holds the only permit
    try:
        for name in ("ghost", "sake"):  # taken before the context is looked up
            status, body, headers = await client.call("POST", ctx_path(name, "compact"), content_type=None)
            assert status == 503 and headers.get("Retry-After") == "1"
            assert body["error"] == (
                "server is at its heavy-operation ceiling (1 concurrent calls) — retry shortly "
                "(TAGURU_MAX_CONCURRENT_HEAVY_OPS tunes this)"
            )
        monkeypatch.setenv("TAGURU_MAX_CONCURRENT_HEAVY_OPS", "0")  # 0 disables the ceiling
        assert_error(
            await client.call("POST", ctx_path("ghost", "compact"), content_type=None),
            404,
            "no_context",
            "context 'ghost' not found",
        )
    finally:
        app[HEAVY_OPS_KEY].count = 0
    assert app[HEAVY_OPS_KEY].count == 0


async def test_a_refused_compaction_answers_503_and_changes_nothing(
    app_client: tuple[Client, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from taguru_server.store.persist.rows import RowStore

    client, _app = app_client
    assert_ok(await client.call("PUT", ctx_path("k"), content_type=None))
    assert_ok(await client.call("POST", ctx_path("k", "associations"), EDGE))
    assert_ok(
        await client.call(
            "POST", ctx_path("k", "associations/retract"), {k: EDGE[0][k] for k in ("subject", "label", "object")}
        )
    )
    before = assert_ok(await client.call("GET", ctx_path("k")))

    def refuse(self: Any, ctx: Any) -> int:
        raise self._failed(_io_error(self))

    monkeypatch.setattr(RowStore, "replace", refuse)
    status, body, _h = await client.call("POST", ctx_path("k", "compact"), content_type=None)
    assert status == 503 and body["error"] == "the compaction could not be made durable; nothing was applied"
    monkeypatch.undo()
    after = assert_ok(await client.call("GET", ctx_path("k")))
    assert after["stats"] == before["stats"] and after["stats"]["dead_edges"] == 1


async def test_retract_then_compact_erases_the_passage_text(app_client: tuple[Client, Any], tmp_path: Any) -> None:
    client, app = app_client
    from taguru_server.server.state import REGISTRY_KEY

    secret = "zebrafish-7f3a-unrepeatable passage text " * 40
    assert_ok(await client.call("PUT", ctx_path("k"), content_type=None))
    assert_ok(await client.call("POST", ctx_path("k", "sources"), {"passages": {"doc.md": secret}}))
    assert_ok(await client.call("POST", ctx_path("k", "sources/retract"), {"source": "doc.md"}))
    outcome = assert_ok(await client.call("POST", ctx_path("k", "compact"), content_type=None))
    store = app[REGISTRY_KEY].persistence
    file = getattr(store, "file", None)
    if file is None:  # PostgreSQL: nothing here can promise the freed bytes are gone
        assert outcome["passages_compacted"] is False
        return
    assert outcome["passages_compacted"] is True
    stored = b"".join(p.read_bytes() for p in file.parent.iterdir() if p.name.startswith(file.name))
    assert b"zebrafish-7f3a" not in stored
    # a context that never stored a passage reports false
    assert_ok(await client.call("PUT", ctx_path("bare"), content_type=None))
    bare = assert_ok(await client.call("POST", ctx_path("bare", "compact"), content_type=None))
    assert bare["passages_compacted"] is False


WORDS = ["蔵", "杜氏", "米", "水", "麹", "alpha", "beta", "gamma", "delta", "omega"]


async def _random_http(client: Client, name: str, rnd: random.Random, n: int) -> None:
    path = ctx_path(name)
    for _ in range(n):
        op = rnd.randrange(7)
        source = f"s{rnd.randrange(6)}.md"
        if op <= 2:
            src = None if rnd.random() < 0.2 else source
            rows = [
                {
                    "subject": rnd.choice(WORDS),
                    "label": rnd.choice(["uses", "makes", "near"]),
                    "object": rnd.choice(WORDS),
                    "weight": rnd.choice([1.0, 0.5, 2.0, -0.25]),
                    **({"source": src, "paragraph": rnd.choice([None, 0, 1])} if src else {}),
                }
                for _ in range(rnd.randrange(1, 5))
            ]
            assert_ok(await client.call("POST", path + "/associations", rows))
        elif op == 3:
            triple = {"subject": rnd.choice(WORDS), "label": rnd.choice(["uses", "makes"]), "object": rnd.choice(WORDS)}
            assert_ok(await client.call("POST", path + "/associations/retract", triple))
        elif op == 4:
            text = "\n\n".join(f"{rnd.choice(WORDS)} {rnd.choice(WORDS)} paragraph {i}" for i in range(3))
            assert_ok(await client.call("POST", path + "/sources", {"passages": {source: text}}))
        else:
            assert_ok(await client.call("POST", path + "/sources/retract", {"source": source}))


async def _replay_http(client: Client, name: str, old: Any) -> None:
    """Fill `name` from scratch with `old`'s live content through the API (records as posted rows)."""
    path = ctx_path(name)
    assert_ok(await client.call("PUT", path, {"description": old.meta.description}))
    for e in range(len(old.edges.subject)):
        count = old.edges.count[e]
        if count == 0:
            continue
        triple = {
            "subject": old.concepts[old.edges.subject[e]],
            "label": old.labels[old.edges.label[e]],
            "object": old.concepts[old.edges.object[e]],
        }
        rows: list[dict[str, Any]] = []
        for sid, rsum, rcount, paragraph in old.edges.attributions[e]:
            extra = {"source": old.sources[sid], "paragraph": paragraph}
            rows += [{**triple, "weight": rsum, **extra}] + [
                {**triple, "weight": 0.0, **extra} for _ in range(rcount - 1)
            ]
        unsourced = count - sum(r[2] for r in old.edges.attributions[e])
        rows += [{**triple, "weight": 0.0} for _ in range(unsourced)]
        if unsourced:  # the unsourced share of the sum rides on the first unsourced row
            rows[-unsourced]["weight"] = old.edges.weight[e] - sum(r[1] for r in old.edges.attributions[e])
        assert_ok(await client.call("POST", path + "/associations", rows))
    for sid in sorted(old.passages):
        assert_ok(
            await client.call("POST", path + "/sources", {"passages": {old.sources[sid]: old.passages[sid].text}})
        )
    aliases: dict[str, dict[str, str]] = {"concepts": {}, "labels": {}}
    for key, names, table in (("concepts", old.concepts, old.aliases[0]), ("labels", old.labels, old.aliases[1])):
        for alias, target in table.items():
            aliases[key][alias] = names[target]
    status, _body, _h = await client.call("POST", path + "/aliases", aliases)
    assert status in (200, 400)  # aliases of dropped canonicals are refused as a batch's issues


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items() if k not in ("time", "plan", "stored_at")}
    return value


async def _observed(client: Client, name: str) -> dict[str, Any]:
    path = ctx_path(name)
    out: dict[str, Any] = {}
    out["query"] = assert_ok(await client.call("POST", path + "/query", {"subject": WORDS, "limit": 1000}))
    for word in WORDS + ["uses", "near"]:
        out["recall " + word] = assert_ok(await client.call("POST", path + "/recall", {"cue": word}))
        out["activate " + word] = assert_ok(await client.call("POST", path + "/activate", {"origins": [word]}))
    for cue in ("al", "蔵", "gamm", "deltas", "a0", "us"):
        out["resolve " + cue] = assert_ok(await client.call("POST", path + "/resolve", {"cue": cue}))
        out["resolve_label " + cue] = assert_ok(await client.call("POST", path + "/resolve_label", {"cue": cue}))
    for what in ("labels", "aliases", "sources"):
        out[what] = assert_ok(await client.call("GET", path + "/" + what))
    out["stats"] = assert_ok(await client.call("GET", path))["stats"]
    status, body, _h = await client.call("GET", path + "/export", content_type=None)
    assert status == 200
    text = body if isinstance(body, str) else json.dumps(body)
    out["export"] = [
        _rounded({k: v for k, v in json.loads(line).items() if k not in ("context", "create")})
        for line in text.splitlines()
        if line
    ]
    return _rounded(out)


@pytest.mark.parametrize("seed", range(4))
async def test_compacted_reads_equal_a_fresh_replay(app_client: tuple[Client, Any], seed: int) -> None:
    from taguru_server.server.state import REGISTRY_KEY

    client, app = app_client
    rnd = random.Random(seed)
    assert_ok(await client.call("PUT", ctx_path("a"), {"description": "random"}))
    await _random_http(client, "a", rnd, 40)
    registry = app[REGISTRY_KEY]
    old = registry.get("a")
    for i in range(4):  # aliases (some canonicals will die below)
        kind = "concepts" if i % 2 == 0 or not old.labels else "labels"
        names = old.concepts if kind == "concepts" else old.labels
        if names:
            await client.call("POST", ctx_path("a", "aliases"), {kind: {f"alias{i}": rnd.choice(names)}})
    await _random_http(client, "a", rnd, 15)
    old = registry.get("a")
    await _replay_http(client, "b", old)
    dead = old.edges.count.count(0)
    outcome = assert_ok(await client.call("POST", ctx_path("a", "compact"), content_type=None))
    assert outcome["dead_edges"] == dead
    a, b = registry.get("a"), registry.get("b")
    assert (a.concepts, a.labels, a.sources) == (b.concepts, b.labels, b.sources)
    assert [a.edges.attributions[e] for e in range(len(a.edges.subject))] == [
        b.edges.attributions[e] for e in range(len(b.edges.subject))
    ]
    assert (a.edges.subject, a.edges.label, a.edges.object, a.edges.count) == (
        b.edges.subject,
        b.edges.label,
        b.edges.object,
        b.edges.count,
    )
    assert _rounded(a.edges.weight) == _rounded(b.edges.weight)
    seen_a, seen_b = await _observed(client, "a"), await _observed(client, "b")
    for key in seen_a:
        assert seen_a[key] == seen_b[key], key


# ----- the maintenance sweep ---------------------------------------------------------------------------------


async def test_the_sweep_compacts_the_worst_contexts_first(app_client: tuple[Client, Any]) -> None:
    from taguru_server.server.routes import maintenance
    from taguru_server.server.state import REGISTRY_KEY

    client, app = app_client
    edges = [{"subject": "a", "label": "r", "object": o, "weight": 1.0, "source": f"{o}.md"} for o in ("b", "c")]
    for name, dead in (("half", ["b"]), ("all", ["b", "c"]), ("none", []), ("tie", ["b"])):
        assert_ok(await client.call("PUT", ctx_path(name), content_type=None))
        assert_ok(await client.call("POST", ctx_path(name, "associations"), edges))
        for o in dead:
            assert_ok(await client.call("POST", ctx_path(name, "sources/retract"), {"source": f"{o}.md"}))
    assert_ok(await client.call("PUT", ctx_path("empty"), content_type=None))
    nothing = {"contexts": [], "deadline_exceeded": False, "skipped": []}
    for odd in ("nan", "2", "1"):  # NaN selects nothing; past 1 is clamped to 1, and no ratio is above 1
        got = assert_ok(await client.call("POST", f"/maintenance/compact?min_dead_ratio={odd}", content_type=None))
        assert got == nothing
    swept = assert_ok(await client.call("POST", "/maintenance/compact?min_dead_ratio=0.4", content_type=None))
    assert [c["name"] for c in swept["contexts"]] == ["all", "half", "tie"]
    assert [c["dead_edges"] for c in swept["contexts"]] == [2, 1, 1]
    assert list(swept["contexts"][0]) == [
        "name",
        "bytes_before",
        "bytes_after",
        "dead_edges",
        "aliases_dropped",
        "passages_compacted",
        "image_persisted",
    ]
    assert swept["deadline_exceeded"] is False and swept["skipped"] == []
    again = assert_ok(await client.call("POST", "/maintenance/compact", content_type=None))
    assert again == {"contexts": [], "deadline_exceeded": False, "skipped": []}
    assert_error(
        await client.call("POST", "/maintenance/compact?min_dead_ratio=x", content_type=None),
        400,
        "malformed_request",
        "Failed to deserialize query string: min_dead_ratio: invalid float literal",
    )
    maintenance._SWEEPING.add(app[REGISTRY_KEY])
    try:
        assert_error(
            await client.call("POST", "/maintenance/compact", content_type=None),
            409,
            "conflict",
            "a maintenance compaction sweep is already running",
        )
    finally:
        maintenance._SWEEPING.discard(app[REGISTRY_KEY])


async def test_the_sweep_refuses_roles_and_scoped_keys(auth_client: Client) -> None:
    assert_error(
        await post(auth_client, "/maintenance/compact?min_dead_ratio=1_0", token="botadmin"),
        400,
        "malformed_request",
        "Failed to deserialize query string: min_dead_ratio: invalid float literal",
    )
    assert_error(
        await post(auth_client, "/maintenance/compact", token="writer"),
        403,
        "forbidden",
        "key 'writer' has role 'write', but POST /maintenance/compact needs 'admin'",
    )
    assert_error(
        await post(auth_client, "/maintenance/compact", token="botadmin"),
        403,
        "forbidden",
        "maintenance is server-wide (it may compact any context); a context-scoped key cannot call it",
    )


# ----- MCP ---------------------------------------------------------------------------------------------------


async def _tool(client: Client, name: str, args: dict[str, Any], token: str) -> dict[str, Any]:
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
    status, body, _h = await client.call("POST", "/mcp", rpc, token=TOKENS[token])
    assert status == 200
    return body["result"]


async def test_operator_tools_run_under_the_callers_role(auth_client: Client) -> None:
    refused = await _tool(auth_client, "compact", {"context": "sake"}, "writer")
    assert refused["isError"] is True
    assert refused["structuredContent"]["error"] == (
        "key 'writer' has role 'write', but POST /contexts/{name}/compact needs 'admin'"
    )
    refused = await _tool(auth_client, "flush", {}, "botadmin")
    assert refused["structuredContent"]["code"] == "forbidden"
    refused = await _tool(auth_client, "rename_context", {"name": "other", "to": "x"}, "botadmin")
    assert refused["structuredContent"]["error"] == "key 'botadmin' has no grant on context 'other'"
    flushed = json.loads((await _tool(auth_client, "flush", {}, "admin"))["content"][0]["text"])["result"]
    assert flushed == ["other", "sake"]  # the fixture's writes since boot
    assert json.loads((await _tool(auth_client, "flush", {}, "admin"))["content"][0]["text"])["result"] == []
    outcome = json.loads((await _tool(auth_client, "compact", {"context": "sake"}, "admin"))["content"][0]["text"])
    assert outcome["result"]["dead_edges"] == 0 and outcome["result"]["image_persisted"] is True
    missing = await _tool(auth_client, "rename_context", {"name": "sake"}, "admin")
    assert missing["content"][0]["text"] == "missing required argument 'to'"
    renamed = await _tool(auth_client, "rename_context", {"name": "sake", "to": "renamed"}, "admin")
    assert json.loads(renamed["content"][0]["text"])["result"] is True
    got = await _tool(auth_client, "recall", {"context": "renamed", "cue": "alpha"}, "admin")
    assert json.loads(got["content"][0]["text"])["result"]["total"] == 1
    listed = (
        await auth_client.call(
            "POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, token=TOKENS["admin"]
        )
    )[1]
    assert {"flush", "compact", "rename_context"} <= {t["name"] for t in listed["result"]["tools"]}
