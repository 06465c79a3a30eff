"""The evidence endpoint over real HTTP: explain, Server-Timing, failures, privacy, the checklist."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import attrs
import pytest
import structlog
from conftest import Client
from multidict import CIMultiDict

import taguru_server.server.evidence as evidence_module
from taguru_server.pipeline import Graph, Key, Outcome, StageContext
from taguru_server.server.auth import OPEN
from taguru_server.server.call import Call
from taguru_server.server.errors import status_of
from taguru_server.stages.model import GROUPS, INPUTS, RANKED
from taguru_server.stages.wiring import STAGES
from taguru_server.store.errors import ApiError

KURA = "青嶺酒造は雲居県霧沢町の蔵元である。杜氏は高瀬である。"


async def seed_sake(client: Client, extra: list[dict[str, Any]] | None = None) -> None:
    await client.ok("PUT", "/contexts/sake", {"description": "evidence corpus"})
    await client.ok(
        "POST",
        "/contexts/sake/sources",
        {
            "locators": {"docs/kura.md": [{"locator": {"kind": "page", "value": "1"}, "paragraph": 0}]},
            "passages": {"docs/kura.md": KURA},
        },
    )
    await client.ok(
        "POST",
        "/contexts/sake/associations",
        [
            {
                "label": "杜氏",
                "object": "高瀬",
                "paragraph": 0,
                "source": "docs/kura.md",
                "subject": "青嶺酒造",
                "weight": 1.0,
            },
            *(extra or []),
        ],
    )


async def evidence(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    return (await client.ok("POST", "/contexts/sake/evidence", body))["result"]


@pytest.mark.anyio
async def test_explain_adds_deterministic_stage_entries(client: Client) -> None:
    await seed_sake(client)
    plain = await evidence(client, {"origins": ["青嶺酒造"]})
    explained = await evidence(client, {"origins": ["青嶺酒造"], "explain": True})
    stages = explained["plan"].pop("stages")
    anchors = explained["plan"].pop("anchors")
    assert anchors == [{"origin": "青嶺酒造", "anchor": {"name": "青嶺酒造", "tier": "exact", "score": 1.0}}]
    assert explained == plain
    assert [s["stage"] for s in stages] == [
        "communities",
        "passages",
        "resolve",
        "activate",
        "query",
        "cite",
        "dedup",
        "fuse",
        "near-dup",
        "rerank",
        "contradict",
        "diversify",
        "budget",
    ]
    by_name = {s["stage"]: s for s in stages}
    assert by_name["query"] == {"stage": "query", "status": "skipped", "reason": "labels_absent"}
    assert by_name["budget"]["status"] == "ran" and by_name["budget"]["out"] == 2
    assert all("dur" not in str(s) for s in stages)
    again = await evidence(client, {"origins": ["青嶺酒造"], "explain": True})
    assert again["plan"]["stages"] == stages


@pytest.mark.anyio
async def test_server_timing_names_every_stage(client: Client) -> None:
    await seed_sake(client)
    status, _body, headers = await client.call("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]})
    assert status == 200
    names = [part.split(";")[0].strip() for part in headers["Server-Timing"].split(",")]
    assert names[-1] == "total"  # the whole request, since it arrived
    assert sorted(names[:-1]) == sorted(s.name for s in STAGES)
    assert all(";dur=" in part for part in headers["Server-Timing"].split(","))


@attrs.frozen
class Exploding:
    name: ClassVar[str] = "fuse"
    requires: ClassVar[tuple[Key[Any], ...]] = (GROUPS,)
    provides: ClassVar[tuple[Key[Any], ...]] = (RANKED,)

    async def run(self, ctx: StageContext) -> Outcome:
        raise ZeroDivisionError("secret internal detail")


@pytest.mark.anyio
async def test_a_stage_that_raises_is_a_500_without_traceback(client: Client, monkeypatch) -> None:
    await seed_sake(client)
    graph = Graph([Exploding() if s.name == "fuse" else s for s in STAGES], INPUTS)
    monkeypatch.setattr(evidence_module, "GRAPH", graph)
    with structlog.testing.capture_logs() as logs:
        status, body, _h = await client.call("POST", "/contexts/sake/evidence", {"origins": ["青嶺酒造"]})
    assert status == 500
    assert body == {
        "status": "error",
        "code": "internal",
        "error": "evidence assembly failed in stage 'fuse'; the server log has details",
        "time": body["time"],
    }
    finished = {e["stage"]: e["status"] for e in logs if e["event"] == "stage.finished"}
    assert finished["fuse"] == "failed"
    assert "budget" not in finished or finished["budget"] == "skipped"
    assert "secret internal detail" not in repr(logs) and "Traceback" not in repr(body)


@pytest.mark.anyio
async def test_expected_degrades_never_become_errors(client: Client) -> None:
    await seed_sake(client)
    result = await evidence(
        client,
        {
            "origins": [],
            "include_communities": True,
            "search_limit": 0,
            "rerank": {"model": "x"},
            "budget": {"max_items": 0},
        },
    )
    lanes = result["plan"]["lanes"]
    assert lanes["resolve"]["reason"] == "origins was empty"
    assert lanes["passages"] == {"ran": False, "reason": "the requested limit is 0"}
    assert lanes["communities"]["ran"] is False
    assert result["plan"]["reranker"] == {"configured": False, "ran": False, "reason": "not_configured"}


@pytest.mark.anyio
async def test_no_private_text_in_logs_or_metrics(client: Client) -> None:
    secret = "ZQXJPRIVATE翠嶺秘密"
    await client.ok("PUT", "/contexts/priv", content_type=None)
    await client.ok("POST", "/contexts/priv/sources", {"passages": {"doc.md": f"{secret} は蔵の名前である。"}})
    await client.ok(
        "POST",
        "/contexts/priv/associations",
        [
            {
                "subject": secret,
                "label": "rel",
                "object": f"{secret}2",
                "weight": 1.0,
                "source": "doc.md",
                "paragraph": 0,
            }
        ],
    )
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        await client.ok(
            "POST",
            "/contexts/priv/evidence",
            {
                "origins": [secret],
                "text_fallback_query": secret,
                "include_communities": True,
                "rerank": {},
                "explain": True,
            },
        )
        await client.call("POST", "/contexts/priv/evidence", {"origins": [secret], "budget": secret})
    _s, metrics, _h = await client.call("GET", "/metrics")
    assert logs and any(e["event"] == "pipeline.finished" for e in logs)
    assert all("request_id" in e for e in logs if e["event"] in ("stage.finished", "pipeline.finished"))
    assert secret not in repr(logs)
    assert secret not in str(metrics)
    assert 'taguru_evidence_stage_outcomes_total{reason="labels_absent",stage="query",status="skipped"}' in str(metrics)
    assert "taguru_http_requests_total" in str(metrics)


@pytest.mark.anyio
async def test_checklist_basic_package(client: Client) -> None:
    await seed_sake(client)
    result = await evidence(client, {"origins": ["青嶺酒造"]})
    assert [i["kind"] for i in result["items"]] == ["association", "passage"]
    assert result["plan"]["reranker"] == {"configured": False, "ran": False}
    assert all(isinstance(v["ran"], bool) for v in result["plan"]["lanes"].values())
    zero = await evidence(client, {"origins": ["青嶺酒造"], "budget": {"max_items": 0}})
    assert zero["items"] == [] and zero["omitted_by_reason"]["budget_exceeded"] == zero["omitted_total"] == 2
    assert (await evidence(client, {"origins": ["青嶺酒造"]})) == result


@pytest.mark.anyio
async def test_checklist_labels_typos_and_limits(client: Client) -> None:
    await seed_sake(
        client,
        [
            {"label": "所在地", "object": "雲居県", "subject": "青嶺酒造", "weight": 1.0},
            {"label": "杜氏", "object": "某", "subject": "幽霊蔵", "weight": 1.0, "source": "ghost.md", "paragraph": 0},
        ],
    )
    with_labels = await evidence(client, {"origins": ["青嶺酒造"], "labels": ["杜氏"]})
    assert with_labels["plan"]["lanes"]["query"] == {"ran": True}
    assert with_labels["plan"]["selection"]["dedup_dropped"] == 1
    typo = await evidence(client, {"origins": ["青嶺酒蔵"]})
    assert any(i["kind"] == "association" for i in typo["items"])
    strict = await evidence(client, {"origins": ["青嶺酒蔵"], "dice_floor": 0.9})
    assert strict["plan"]["lanes"]["activate"] == {"ran": False, "reason": "no anchors resolved from 'origins'"}
    two = await evidence(client, {"origins": ["青嶺酒造"]})
    assert sum(i["kind"] == "association" for i in two["items"]) >= 2
    one = await evidence(client, {"origins": ["青嶺酒造"], "activate_limit": 1})
    assert sum(i["kind"] == "association" for i in one["items"]) == 1
    ghost = await evidence(client, {"origins": "幽霊蔵"})
    item = next(i for i in ghost["items"] if i["kind"] == "association")
    assert item["citation_refs"] == [] and item["corroboration"]["sources"] == ["ghost.md"]
    assert all(c["source"] != "ghost.md" for c in ghost["citations"])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"origins": ["x"] * 1001}, 400, "over_limit"),
        ({"origins": [], "labels": ["x"] * 1001}, 400, "over_limit"),
        ({"origins": ["x"], "budget": "not-an-object"}, 422, "malformed_request"),
        ({"origins": ["x"], "rerank": 5}, 422, "malformed_request"),
        ({"origins": ["x"], "search_limit": -1}, 422, "malformed_request"),
        ({"origins": ["x"], "search_limit": 2.0}, 422, "malformed_request"),
        ({"origins": ["x"], "search_limit": True}, 422, "malformed_request"),
        ({"origins": ["x"], "include_communities": None}, 422, "malformed_request"),
        ({"origins": ["x"], "include_communities": 1}, 422, "malformed_request"),
        ({"origins": [1]}, 422, "malformed_request"),
        ({"labels": []}, 422, "malformed_request"),
    ],
)
async def test_bad_requests(client: Client, body, status, code) -> None:
    await seed_sake(client)
    got, parsed, _h = await client.call("POST", "/contexts/sake/evidence", body)
    assert (got, parsed["code"]) == (status, code)
    assert set(parsed) == {"status", "code", "error", "time"}


@pytest.mark.anyio
async def test_serde_style_messages(client: Client) -> None:
    await seed_sake(client)
    cases = {
        b'{"origins":["x"],"search_limit":-1}': (
            "search_limit: invalid value: integer `-1`, expected usize at line 1 column 34"
        ),
        b'{"labels":[]}': "missing field `origins` at line 1 column 13",
        b'{"origins":["x"],"rerank":5}': (
            "rerank: invalid type: integer `5`, expected struct RerankRequest at line 1 column 27"
        ),
        b'{"origins":"x","origins":"y"}': "duplicate field `origins`",
    }
    for raw, tail in cases.items():
        status, parsed, _h = await client.call("POST", "/contexts/sake/evidence", raw=raw)
        assert status == 422
        assert parsed["error"].startswith("Failed to deserialize the JSON body into the target type: ")
        assert tail in parsed["error"], parsed["error"]
    for raw, want in ((b'{"origins":', 400), (b'{"origins":[NaN]}', 400)):
        status, parsed, _h = await client.call("POST", "/contexts/sake/evidence", raw=raw)
        assert (status, parsed["code"]) == (want, "malformed_request")
    status, parsed, _h = await client.call("POST", "/contexts/sake/evidence", {"origins": []}, content_type=None)
    assert (status, parsed["code"]) == (415, "malformed_request")


@pytest.mark.anyio
async def test_spent_deadline_wins_over_missing_context(client: Client) -> None:
    call = Call(
        method="POST",
        path="/contexts/nope/evidence",
        name="nope",
        query={},
        headers=CIMultiDict({"Content-Type": "application/json"}),
        body=b'{"origins":["x"]}',
        registry=None,
        settings=None,
        principal=OPEN,
        deadline=time.monotonic() - 1,
    )  # type: ignore[arg-type]
    with pytest.raises(ApiError) as err:
        await evidence_module.evidence(call)
    assert err.value.code == "timeout" and status_of(err.value) == 408
    assert err.value.message == (
        "request exceeded its budget before this operation could start; narrow the query "
        "or raise TAGURU_REQUEST_TIMEOUT_SECS"
    )


@pytest.mark.anyio
async def test_scoped_read_key_and_bare_string(settings_factory) -> None:
    from conftest import start_client

    env = {
        "TAGURU_API_TOKENS": "boss:atok,reader:rtok",
        "TAGURU_KEY_SCOPES": '{"reader": {"role": "read", "contexts": ["sake"]}}',
    }
    server, client, session = await start_client(settings_factory(**env))
    try:
        for method, path, body in (("PUT", "/contexts/sake", {}), ("PUT", "/contexts/other", {})):
            await client.ok(method, path, body, token="atok")
        await client.ok("POST", "/contexts/sake/sources", {"passages": {"k.md": KURA}}, token="atok")
        ok = await client.ok("POST", "/contexts/sake/evidence", {"origins": "蔵"}, token="rtok")
        assert ok["result"]["plan"]["lanes"]["resolve"] == {"ran": True}
        assert await client.ok("POST", "/contexts/sake/activate", {"origins": ["x"]}, token="rtok")
        status, parsed, _h = await client.call("POST", "/contexts/other/evidence", {"origins": []}, token="rtok")
        assert (status, parsed["error"]) == (403, "key 'reader' has no grant on context 'other'")
        status, parsed, _h = await client.call("POST", "/contexts/sake/evidence", {"origins": []})
        assert status == 401
    finally:
        await session.close()
        await server.close()
