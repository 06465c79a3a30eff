"""The unmodified official `taguru` 0.9.7 SDK (sync and async) end to end against a real `taguru serve`.

The server runs as a child process started by the SDK's own harness, `taguru.testing.SpawnedServer`
(hermetic env, `TAGURU_ADDR=127.0.0.1:0`, the address read from the `listening on …` stdout line).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import taguru
from taguru import (
    AsyncTaguru,
    AuthenticationError,
    ConflictError,
    EvidencePackage,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    Taguru,
    TransportError,
    ValidationError,
)
from taguru._decode import decode
from taguru.testing import SpawnedServer

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PY) if VENV_PY.exists() else sys.executable

pytestmark = pytest.mark.slow

CORPUS = "sake sdk/酒"  # a name that needs percent-encoding (space, slash, non-ASCII)
KURA = "青嶺酒造は雲居県霧沢町の蔵元である。\n\n杜氏は高瀬である。創業は1890年。"
NOTES = "高瀬は南部杜氏の流れをくむ。\n\n霧沢町は雪深い。"


def server_binary(tmp: Path) -> Path:
    """A one-line launcher so the SDK harness (one binary) starts `python -m taguru_server.cli serve`."""
    script = tmp / "taguru-serve"
    script.write_text(f'#!/bin/sh\ncd "{ROOT}"\nexec "{PYTHON}" -m taguru_server.cli serve "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedServer]:
    tmp = tmp_path_factory.mktemp("sdk")
    spawned = SpawnedServer(server_binary(tmp), tmp / "data", {})
    try:
        yield spawned
    finally:
        spawned.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedServer]:
    tmp = tmp_path_factory.mktemp("sdk-auth")
    spawned = SpawnedServer(
        server_binary(tmp),
        tmp / "data",
        {
            "TAGURU_API_TOKENS": "boss:atok,reader:rtok",
            "TAGURU_KEY_SCOPES": json.dumps({"reader": {"role": "read", "contexts": ["shared"]}}),
            "TAGURU_MAX_BODY_BYTES": "4096",
        },
    )
    try:
        yield spawned
    finally:
        spawned.stop()


@pytest.fixture(scope="module")
def corpus(server: SpawnedServer) -> str:
    """One context written entirely through the SDK: associations, passages with markers, aliases."""
    with Taguru(server.base_url, api_key="") as client:
        assert client.contexts.create(CORPUS, description="SDK corpus") is True
        ctx = client.context(CORPUS)
        stored = ctx.store_passages(
            {"docs/kura.md": KURA, "docs/notes.md": NOTES},
            questions={"docs/kura.md": [{"paragraph": 1, "question": "杜氏は誰か"}]},
            sections={"docs/kura.md": [{"paragraph": 0, "section": "概要"}]},
            locators={"docs/kura.md": [{"paragraph": 0, "locator": {"kind": "page", "value": "1"}}]},
            tags={"docs/kura.md": ["brewery"], "docs/notes.md": ["people"]},
            dates={"docs/kura.md": 1_000_000, "docs/notes.md": 2_000_000},
        )
        assert (stored.stored, stored.questions_stored, stored.sections_stored, stored.locators_stored) == (2, 1, 1, 1)
        applied = ctx.add_associations(
            [
                {
                    "subject": "青嶺酒造",
                    "label": "杜氏",
                    "object": "高瀬",
                    "weight": 1.0,
                    "source": "docs/kura.md",
                    "paragraph": 1,
                },
                {
                    "subject": "青嶺酒造",
                    "label": "所在地",
                    "object": "霧沢町",
                    "weight": 1.0,
                    "source": "docs/kura.md",
                    "paragraph": 0,
                },
                {
                    "subject": "高瀬",
                    "label": "流派",
                    "object": "南部杜氏",
                    "weight": 0.5,
                    "source": "docs/notes.md",
                    "paragraph": 0,
                },
            ]
        )
        assert applied.applied == 3 and applied.issues == [] and applied.schema_violations == 0
        assert ctx.add_aliases(concepts={"Aomine": "青嶺酒造"}, labels={"brewer": "杜氏"}) == 2
    return CORPUS


# ----- sync client ----------------------------------------------------------------------------


def test_probes_and_directory(server: SpawnedServer, corpus: str) -> None:
    with Taguru(server.base_url, api_key="") as client:
        client.wait_until_ready(timeout=10)
        client.health()
        client.live()
        assert "taguru_http_requests" in client.metrics()
        manual = client.protocol()
        assert "\n---\n\n## This server\n\n" in manual
        fence = "Contract versions (also `GET /version`, ADR 0005 §6) — discovery only, not negotiation:\n\n```json\n"
        version = httpx.get(server.base_url + "/version").json()
        assert json.loads(manual.split(fence, 1)[1].removesuffix("```\n")) == version
        assert client.contexts.exists(corpus) and not client.contexts.exists("nope")
        entry = client.contexts.get(corpus)
        assert entry.name == corpus and entry.description == "SDK corpus" and entry.loaded
        assert entry.stats.associations == 3 and entry.stats.sources == 2
        assert entry.revision is not None and entry.revision.graph > 0
        page = client.contexts.list()
        assert corpus in [c.name for c in page.contexts] and page.total >= 1
        assert [c.name for c in client.contexts.iter(limit=1)] == [c.name for c in page.contexts]
        meta = client.contexts.update(corpus, pinned=True)
        assert meta.pinned and meta.description == "SDK corpus"
        assert client.contexts.list(pinned=True).contexts[0].name == corpus
        with pytest.raises(ConflictError) as dup:
            client.contexts.create(corpus)
        assert dup.value.status == 409 and dup.value.code == "already_exists"
        assert dup.value.message == f"context '{corpus}' already exists"
        with pytest.raises(NotFoundError) as missing:
            client.contexts.get("nope")
        assert missing.value.code == "no_context" and missing.value.message == "context 'nope' not found"


def test_graph_reads(server: SpawnedServer, corpus: str) -> None:
    with Taguru(server.base_url, api_key="") as client:
        ctx = client.context(corpus)
        top = ctx.resolve("Aomine")
        assert top[0].name == "青嶺酒造" and top[0].tier
        assert ctx.resolve_label("brewer")[0].name == "杜氏"
        assert ctx.resolve("まったく無関係な語", dice_floor=0.99) == []

        page = ctx.query(subject="青嶺酒造", label=["杜氏", "所在地"])
        assert page.total == 2
        match = {m.label: m for m in page.matches}["杜氏"]
        assert (match.object, match.weight, match.count) == ("高瀬", 1.0, 1)
        assert match.attributions[0].source == "docs/kura.md" and match.attributions[0].paragraph == 1
        assert ctx.query(label="流派", limit=1).matches[0].subject == "高瀬"
        assert ctx.recall("高瀬").total == 2

        activation = ctx.activate("青嶺酒造", decay=0.5, limit=10)
        assert activation.total >= 2
        assert activation.matches[0].path[0] == "青嶺酒造" and activation.matches[0].strength > 0

        outline = ctx.describe("青嶺酒造")
        assert outline is not None and outline.concept == "青嶺酒造"
        assert sorted(u.label for u in outline.as_subject) == ["所在地", "杜氏"] and outline.as_object == []
        assert ctx.describe("unknown concept") is None

        assert ctx.list_labels().labels == sorted(["杜氏", "所在地", "流派"])
        aliases = ctx.get_aliases()
        assert aliases.concepts == {"Aomine": "青嶺酒造"} and aliases.labels == {"brewer": "杜氏"}


def test_passages_and_citations(server: SpawnedServer, corpus: str) -> None:
    with Taguru(server.base_url, api_key="") as client:
        ctx = client.context(corpus)
        page = ctx.search_passages("杜氏", limit=5)
        assert page.hits and {h.source for h in page.hits} <= {"docs/kura.md", "docs/notes.md"}
        assert page.plan.contexts[0].lanes.vector.ran is False
        assert all(h.text and h.score > 0 for h in page.hits)
        tagged = ctx.search_passages("杜氏", tags=["people"])
        assert {h.source for h in tagged.hits} == {"docs/notes.md"}
        assert tagged.plan.contexts[0].filter is not None and tagged.plan.contexts[0].filter.eligible_sources == 1
        windowed = ctx.search_passages("杜氏", since=0, until=1_500_000)
        assert {h.source for h in windowed.hits} == {"docs/kura.md"}

        cite = ctx.cite_passage("docs/kura.md", 0)
        assert cite.text == "青嶺酒造は雲居県霧沢町の蔵元である。" and cite.source == "docs/kura.md"
        assert cite.section == "概要" and cite.locator is not None and cite.locator.kind == "page"
        with pytest.raises(NotFoundError) as no_source:
            ctx.cite_passage("docs/none.md", 0)
        assert no_source.value.code == "no_source"
        with pytest.raises(NotFoundError) as no_paragraph:
            ctx.cite_passage("docs/kura.md", 99)
        assert no_paragraph.value.code == "no_paragraph"

        lookup = ctx.lookup_passages(["docs/notes.md", "docs/none.md"])
        assert lookup.passages == {"docs/notes.md": NOTES} and lookup.missing == ["docs/none.md"]
        sources = ctx.list_sources()
        assert sources.sources == ["docs/kura.md", "docs/notes.md"]
        assert sources.entries[0].date == 1_000_000 and sources.entries[0].tags == ["brewery"]
        assert list(ctx.iter_sources(limit=1)) == ["docs/kura.md", "docs/notes.md"]


def test_retrieve_loop(server: SpawnedServer, corpus: str) -> None:
    with Taguru(server.base_url, api_key="") as client:
        result = client.context(corpus).retrieve(
            ["Aomine"], labels=["杜氏"], text_fallback_query="杜氏は高瀬", text_fallback_only_if_empty=False
        )
        assert result.resolved["Aomine"][0].name == "青嶺酒造"
        assert ("青嶺酒造", "杜氏", "高瀬") in {(a.subject, a.label, a.object) for a in result.associations}
        assert result.citations[("docs/kura.md", 1)].text.startswith("杜氏は高瀬である。")
        assert result.passage_hits and result.search_plan is not None


def test_writes_and_removals(server: SpawnedServer) -> None:
    with Taguru(server.base_url, api_key="") as client:
        assert client.contexts.create("scratch", pinned=False, dice_floor=0.4) is True
        ctx = client.context("scratch")
        batched = ctx.add_associations_batched(
            [{"subject": f"s{i}", "label": "rel", "object": "o", "weight": 1.0} for i in range(5)], chunk_size=2
        )
        assert (batched.applied, batched.chunks) == (5, 3)
        assert ctx.add_aliases(concepts={"first": "s0", "second": "s1"}) == 2
        assert ctx.add_aliases(concepts={"first": "s0"}) == 1  # an identical re-registration is a no-op success
        assert [e.alias for e in ctx.iter_aliases()] == ["first", "second"]
        assert ctx.remove_aliases(concepts=["first"]) == 1
        assert ctx.get_aliases().concepts == {"second": "s1"}
        with pytest.raises(ConflictError):
            ctx.add_aliases(concepts={"second": "s2"})
        gone = ctx.retract_association("s4", "rel", "o")
        assert gone.retracted and gone.attributions_removed == 0
        ctx.store_passages({"a.md": "text"})
        outcome = ctx.retract_source("a.md", dry_run=True)
        assert outcome.passage_removed
        assert ctx.retract_source("a.md").passage_removed and ctx.list_sources().sources == []
        with pytest.raises(ValidationError) as bad:
            ctx.add_associations([{"subject": "", "label": "rel", "object": "o", "weight": 1.0}])
        assert bad.value.status == 400 and bad.value.code == "invalid_argument"
        assert bad.value.body["issues"][0]["path"] == "associations[0].subject"
        with pytest.raises(ValidationError) as limit:
            ctx.query(subject=[f"c{i}" for i in range(1001)])
        assert limit.value.code == "over_limit"
        assert client.contexts.delete("scratch") is True
        with pytest.raises(NotFoundError):
            client.contexts.delete("scratch")


def test_import_and_pagination(server: SpawnedServer) -> None:
    from conftest import load_fixture

    with Taguru(server.base_url, api_key="") as client:
        imported = client.import_batches(load_fixture("http", "import")["request"])
        assert [(b.context, b.source, b.created, b.associations, b.locators_stored) for b in imported.batches] == [
            ("corpus-f", "doc.md", True, 1, 1)
        ]
        assert imported.groups == [] and imported.issues == []
        reimport = client.import_batches(
            '{"taguru_batch": 1, "context": "corpus-f", "source": "doc.md"}\n'
            '{"subject": "alpha", "label": "connects_to", "object": "gamma", "weight": 1.0}\n'
        )
        assert reimport.batches[0].retracted == 1 and not reimport.batches[0].created  # retract-then-apply
        with pytest.raises(ValidationError) as refused:
            client.import_batches("not json\n")
        assert refused.value.code == "malformed_request"

        ctx = client.context("corpus-f")
        ctx.add_associations(
            [{"subject": "alpha", "label": f"rel{i}", "object": "beta", "weight": float(i + 1)} for i in range(3)]
        )
        everything = ctx.recall("alpha")
        assert everything.total >= 4 and len(everything.matches) == everything.total
        first = ctx.recall("alpha", limit=2)
        assert first.total == everything.total and first.matches == everything.matches[:2]
        last = first.matches[-1]
        rest = ctx.recall(
            "alpha",
            limit=1000,
            after={"weight": last.weight, "subject": last.subject, "label": last.label, "object": last.object},
        )
        assert rest.total == everything.total and first.matches + rest.matches == everything.matches
        assert list(ctx.iter_labels(limit=2)) == ["connects_to", "rel0", "rel1", "rel2"]
        assert ctx.list_labels(prefix="rel", limit=1).total == 3
        analysis = ctx.analyze_communities()
        assert analysis.splitlines()[0].startswith("{") and json.loads(analysis.splitlines()[0])


def seed_communities(client: Taguru) -> None:
    """SETUPS.md group E through the SDK: corpus-d and a hand-built corpus-d::communities artifact."""
    from reference_setups import manifest_text

    client.contexts.create("corpus-d")
    client.context("corpus-d").add_associations([{"label": "近い", "object": "a2", "subject": "a1", "weight": 2.0}])
    revision = client.contexts.get("corpus-d").revision
    assert revision is not None
    client.contexts.create("corpus-d::communities")
    artifact = client.context("corpus-d::communities")
    artifact.store_passages(
        {
            "communities:manifest": manifest_text(dataclasses.asdict(revision)),
            "community:L0-0": "この共同体のテーマは酒造りの歴史です。",
        }
    )
    artifact.add_associations(
        [
            {"label": "contains", "object": "a1", "subject": "community:L0-0", "weight": 6.0},
            {"label": "contains", "object": "a2", "subject": "community:L0-0", "weight": 4.0},
        ]
    )


def test_search_communities(server: SpawnedServer) -> None:
    with Taguru(server.base_url, api_key="") as client:
        seed_communities(client)
        page = client.context("corpus-d").search_communities("酒造りの歴史", limit=5)
        assert page.derived == "corpus-d::communities" and page.algorithm == "louvain-cc/1"
        assert page.stale is False and page.revision.recorded_graph == page.revision.current_graph
        hit = page.hits[0]
        assert hit.community == "L0-0" and hit.text == "この共同体のテーマは酒造りの歴史です。"
        assert hit.level == 0 and hit.concept_count == 2
        assert [(m.name, m.strength) for m in hit.members][0][0] == "a1"
        again = client.context("corpus-d").search_communities("酒造り", derived="corpus-d::communities")
        assert again.hits[0].community == "L0-0"
        with pytest.raises(NotFoundError) as missing:
            client.context(CORPUS).search_communities("anything")
        assert missing.value.code == "no_context"
        package = client.context("corpus-d").assemble_evidence(
            "a1", include_communities=True, text_fallback_query="酒造りの歴史"
        )
        assert package.plan.lanes.communities.ran is True
        assert "community" in {item.kind for item in package.items}


def raw_evidence(server: SpawnedServer, context: str, body: dict[str, Any]) -> dict[str, Any]:
    from urllib.parse import quote

    response = httpx.post(f"{server.base_url}/contexts/{quote(context, safe='')}/evidence", json=body)
    assert response.status_code == 200
    return response.json()["result"]


def test_assemble_evidence_sync(server: SpawnedServer, corpus: str) -> None:
    with Taguru(server.base_url, api_key="") as client:
        ctx = client.context(corpus)
        package = ctx.assemble_evidence(["Aomine"], labels="杜氏", text_fallback_query="霧沢町は雪深い")
        assert isinstance(package, EvidencePackage)
        assert package == decode(
            EvidencePackage,
            raw_evidence(
                server, corpus, {"origins": ["Aomine"], "labels": ["杜氏"], "text_fallback_query": "霧沢町は雪深い"}
            ),
        )
        assert package.items and package.citations
        assert package.budget.limits.max_items == 40 and package.budget.limits.max_bytes == 65536
        assert package.budget.items_used == len(package.items)
        kinds = {item.kind for item in package.items}
        assert "association" in kinds and "passage" in kinds
        for item in package.items:
            assert item.fused_rank >= 1 and item.bytes > 0 and item.lane_ranks
        cited = {(c.source, c.paragraph) for c in package.citations}
        assert all((r.source, r.paragraph) in cited for item in package.items for r in item.citation_refs)
        assert package.plan.lanes.resolve.ran and package.plan.lanes.query.ran
        assert package.plan.reranker.configured is False and package.plan.reranker.ran is False

        # no labels: the query lane does not run, and the plan says why
        no_labels = ctx.assemble_evidence("青嶺酒造", text_fallback_query="高瀬", search_limit=2)
        assert no_labels.plan.lanes.query.ran is False and no_labels.plan.lanes.query.reason

        # budgets: tiny ceilings still answer 200, with every candidate accounted for
        one = ctx.assemble_evidence("青嶺酒造", budget={"max_items": 1})
        assert len(one.items) == 1 and one.budget.limits.max_items == 1
        assert one.omitted_total >= 1 and sum(one.omitted_by_reason.values()) == one.omitted_total
        empty = ctx.assemble_evidence("青嶺酒造", budget={"max_bytes": 0, "max_tokens": 0})
        assert empty.items == [] and empty.citations == [] and empty.omitted_total > 0
        assert empty.budget.bytes_used == 4 and all(o.reason for o in empty.omitted)  # 4: the empty package framing
        capped = ctx.assemble_evidence("青嶺酒造", budget={"max_items": 5000, "max_bytes": 10**9})
        assert capped.budget.limits.max_items == 1000 and capped.budget.limits.max_bytes == 1048576

        # rerank requests degrade deterministically with a reason (no reranker configured)
        reranked = ctx.assemble_evidence("青嶺酒造", rerank={"model": "any-model"})
        assert reranked.plan.reranker.ran is False and reranked.plan.reranker.reason == "not_configured"
        assert [i.candidate_id for i in reranked.items] == [
            i.candidate_id for i in ctx.assemble_evidence("青嶺酒造").items
        ]
        assert ctx.assemble_evidence("青嶺酒造", rerank={}).plan.reranker.reason == "not_configured"

        # communities requested with no artifact: a degrade, never a refusal
        degraded = ctx.assemble_evidence("青嶺酒造", include_communities=True)
        assert degraded.plan.lanes.communities.ran is False and degraded.plan.lanes.communities.reason


def test_assemble_evidence_contradictions(server: SpawnedServer) -> None:
    """The evidence_contradiction_group corpus (SETUPS.md) through the SDK: `contradicts` decodes."""
    with Taguru(server.base_url, api_key="") as client:
        client.contexts.create("contradiction-corpus")
        ctx = client.context("contradiction-corpus")
        ctx.store_passages(
            {"s1.md": "猫は哺乳類である。", "s2.md": "猫は爬虫類だと主張する文献もある。"},
            locators={"s1.md": [{"paragraph": 0, "locator": {"kind": "page", "value": "1"}}]},
        )
        ctx.add_associations(
            [
                {
                    "label": "is_a",
                    "object": "哺乳類",
                    "paragraph": 0,
                    "source": "s1.md",
                    "subject": "猫",
                    "weight": 1.0,
                },
                {
                    "label": "is_a",
                    "object": "爬虫類",
                    "paragraph": 0,
                    "source": "s2.md",
                    "subject": "猫",
                    "weight": 1.0,
                },
            ]
        )
        package = ctx.assemble_evidence("猫", labels="is_a")
        assert package == decode(
            EvidencePackage, raw_evidence(server, "contradiction-corpus", {"origins": ["猫"], "labels": ["is_a"]})
        )
        grouped = [item for item in package.items if item.contradicts]
        assert len(grouped) == 2 and package.plan.selection.contradiction_groups == 1
        ids = {item.candidate_id for item in grouped}
        assert all(set(item.contradicts) == ids - {item.candidate_id} for item in grouped)
        by_source = {c.source: c for c in package.citations}
        assert by_source["s1.md"].citation.locator is not None and by_source["s1.md"].citation.locator.value == "1"


def test_assemble_evidence_errors(server: SpawnedServer, corpus: str) -> None:
    with Taguru(server.base_url, api_key="", retries=0) as client:
        with pytest.raises(NotFoundError) as missing:
            client.context("does-not-exist").assemble_evidence("a")
        assert missing.value.code == "no_context" and missing.value.status == 404
        assert missing.value.message == "context 'does-not-exist' not found" and missing.value.time is not None
        ctx = client.context(corpus)
        with pytest.raises(ValidationError) as over:
            ctx.assemble_evidence([f"o{i}" for i in range(1001)])
        assert over.value.status == 400 and over.value.code == "over_limit"
        assert over.value.message == (
            "origins carries 1001 items, past the per-request limit of 1000; split the request"
        )
        with pytest.raises(ValidationError) as labels:
            ctx.assemble_evidence("a", labels=[f"l{i}" for i in range(1001)])
        assert labels.value.code == "over_limit"
        # the SDK does no validation: a mistyped budget or rerank reaches the server's 422
        for kwargs in (
            {"budget": {"max_items": -1}},
            {"budget": {"max_bytes": "big"}},
            {"rerank": {"model": 7}},
            {"search_limit": 1.5},
            {"activate_decay": "fast"},
        ):
            with pytest.raises(ValidationError) as bad:
                ctx.assemble_evidence("a", **kwargs)
            assert bad.value.status == 422 and bad.value.code == "malformed_request"
            assert bad.value.message.startswith("Failed to deserialize the JSON body into the target type: ")
    with pytest.raises(TransportError):
        Taguru("http://127.0.0.1:9", api_key="", retries=0).context("x").assemble_evidence("a")


def test_auth_scope_and_body_cap(secured: SpawnedServer) -> None:
    with Taguru(secured.base_url, api_key="atok") as admin:
        admin.contexts.create("shared")
        admin.context("shared").add_associations([{"subject": "a", "label": "rel", "object": "b", "weight": 1.0}])
        admin.contexts.create("private")
    with Taguru(secured.base_url, api_key="") as anonymous:
        anonymous.health()  # probes skip auth
        with pytest.raises(AuthenticationError) as unauthorized:
            anonymous.context("shared").assemble_evidence("a")
        assert unauthorized.value.code == "unauthorized"
    with Taguru(secured.base_url, api_key="rtok") as reader:
        assert reader.context("shared").assemble_evidence("a").items
        with pytest.raises(PermissionDeniedError) as no_grant:
            reader.context("private").assemble_evidence("a")
        assert no_grant.value.message == "key 'reader' has no grant on context 'private'"
        with pytest.raises(PermissionDeniedError) as artifact:
            reader.context("shared").assemble_evidence("a", include_communities=True)
        assert artifact.value.message == (
            "this key's scope does not extend to the artifact context "
            "'shared::communities' — grant it alongside 'shared'"
        )
        with pytest.raises(PermissionDeniedError) as role:
            reader.context("shared").add_associations([{"subject": "x", "label": "r", "object": "y", "weight": 1}])
        assert role.value.code == "forbidden"
    with Taguru(secured.base_url, api_key="atok", retries=0) as admin:
        with pytest.raises(PayloadTooLargeError) as too_large:
            admin.context("shared").store_passages({"big.md": "x" * 8192})
        assert too_large.value.status == 413 and too_large.value.code == "payload_too_large"


def test_export(server: SpawnedServer, corpus: str, tmp_path: Path) -> None:
    """`export` and `export_to_file` read GET /contexts/{name}/export; the stream re-imports idempotently."""
    with Taguru(server.base_url, api_key="") as client:
        ctx = client.context(corpus)
        text = ctx.export()
        lines = [json.loads(line) for line in text.splitlines()]
        assert lines[0]["taguru_batch"] == 1 and lines[0]["context"] == corpus
        assert lines[0]["source"] == "docs/kura.md" and lines[0]["create"]["description"] == "SDK corpus"
        assert {"alias": "Aomine", "canonical": "青嶺酒造", "kind": "concept"} in lines
        target = tmp_path / "corpus.jsonl"
        ctx.export_to_file(target)
        assert target.read_text(encoding="utf-8") == text
        result = client.import_batches(text)
        assert [b.source for b in result.batches] == ["docs/kura.md", "docs/notes.md"]
        assert ctx.export() == text
        with pytest.raises(NotFoundError) as missing:
            client.context("nope").export_to_file(tmp_path / "nope.jsonl")
        assert missing.value.message == "context 'nope' not found"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]


# ----- async client ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_assemble_evidence_async(server: SpawnedServer, corpus: str) -> None:
    async with AsyncTaguru(server.base_url, api_key="") as client:
        ctx = client.context(corpus)
        # a fresh client's concurrent first calls share one contract probe
        package, one, top = await asyncio.gather(
            ctx.assemble_evidence(["Aomine"], labels="杜氏"),
            ctx.assemble_evidence("青嶺酒造", budget={"max_items": 1}, rerank={"model": "m"}),
            ctx.resolve("Aomine"),
        )
        assert package == decode(
            EvidencePackage, raw_evidence(server, corpus, {"origins": ["Aomine"], "labels": ["杜氏"]})
        )
        assert len(one.items) == 1 and one.omitted_total >= 1 and one.plan.reranker.reason
        assert top[0].name == "青嶺酒造"
        hits = await ctx.search_passages("杜氏")
        assert hits.hits
        cite = await ctx.cite_passage("docs/kura.md", 1)
        assert cite.text.startswith("杜氏は高瀬である。")
        with pytest.raises(NotFoundError):
            await client.context("does-not-exist").assemble_evidence("a")
        with pytest.raises(ValidationError) as bad:
            await ctx.assemble_evidence("a", budget={"max_tokens": -5})
        assert bad.value.status == 422
        assert (await client.contexts.get(corpus)).name == corpus
        assert (await ctx.describe("高瀬")) is not None


@pytest.mark.anyio
async def test_export_async(server: SpawnedServer, corpus: str, tmp_path: Path) -> None:
    async with AsyncTaguru(server.base_url, api_key="") as client:
        ctx = client.context(corpus)
        text = await ctx.export()
        await ctx.export_to_file(tmp_path / "a.jsonl")
        assert (tmp_path / "a.jsonl").read_text(encoding="utf-8") == text
        streamed = b"".join([chunk async for chunk in ctx.export_stream()])
        assert streamed.decode("utf-8") == text


def test_sdk_version() -> None:
    assert taguru.__version__ == "0.9.7" and taguru.SUPPORTED_HTTP_CONTRACTS == (1,)


def test_the_change_feed(server: SpawnedServer) -> None:
    with Taguru(server.base_url, api_key="") as client:
        client.contexts.create("sdk-feed", description="feed")
        ctx = client.context("sdk-feed")
        tail = ctx.changes()
        assert tail.events == [] and tail.more is False and tail.next.startswith("cf1-")
        ctx.add_associations([{"subject": "a", "label": "r", "object": "b", "weight": 1.0}])
        ctx.store_passages({"doc.md": "alpha."})
        page = ctx.changes(since=tail.next, limit=1)
        assert [(e.seq, e.kind) for e in page.events] == [(1, "associations_added")] and page.more is True
        page = ctx.changes(since=page.next)
        assert [(e.seq, e.kind) for e in page.events] == [(2, "source_stored")] and page.more is False
        with pytest.raises(taguru.TaguruError) as stale:
            ctx.changes(since="cf1-0000000000000000-9")
        assert stale.value.status == 410 and stale.value.code == "stale_cursor"


def test_operator_verbs(server: SpawnedServer) -> None:
    with Taguru(server.base_url, api_key="") as client:
        client.flush()  # drains what the module wrote before
        assert client.flush() == []
        client.contexts.create("sdk-ops", description="ops")
        ctx = client.context("sdk-ops")
        ctx.add_associations(
            [
                {"subject": "蔵", "label": "杜氏", "object": "高瀬", "weight": 1.0, "source": "keep.md"},
                {"subject": "蔵", "label": "廃止銘柄", "object": "旧銘", "weight": 1.0, "source": "gone.md"},
            ]
        )
        ctx.retract_source("gone.md")
        tail = ctx.changes()
        outcome = ctx.compact()
        assert (outcome.dead_edges, outcome.aliases_dropped) == (1, 0)
        assert outcome.bytes_after < outcome.bytes_before
        assert ctx.query(subject="蔵").total == 1
        assert client.contexts.rename("sdk-ops", "sdk-ops-renamed") is True
        moved = client.context("sdk-ops-renamed")
        assert [m.object for m in moved.query(subject="蔵").matches] == ["高瀬"]
        assert not client.contexts.exists("sdk-ops")
        with pytest.raises(taguru.TaguruError) as stale:
            moved.changes(since=tail.next)
        assert stale.value.status == 410
        assert client.contexts.rename("sdk-ops-renamed", "sdk-ops-renamed") is True
        client.contexts.create("sdk-ops-other")
        with pytest.raises(ConflictError):
            client.contexts.rename("sdk-ops-renamed", "sdk-ops-other")
