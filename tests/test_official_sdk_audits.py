"""The unmodified official `taguru` 0.9.7 SDK through the audits and promote against a real `taguru serve`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from taguru import NotFoundError, Taguru, ValidationError
from taguru.testing import SpawnedServer
from test_official_sdk import server_binary

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedServer]:
    tmp = tmp_path_factory.mktemp("sdk-audits")
    spawned = SpawnedServer(server_binary(tmp), tmp / "data", {})
    try:
        yield spawned
    finally:
        spawned.stop()


def test_audits_and_promote(server: SpawnedServer) -> None:
    with Taguru(server.base_url, api_key="") as client:
        assert client.contexts.create("audit-k", description="audits") is True
        ctx = client.context("audit-k")
        ctx.add_associations(
            [
                {"subject": "株式会社青嶺", "label": "kind", "object": "会社", "weight": 1.0, "source": "doc-a"},
                {"subject": "青嶺株式会社", "label": "kind", "object": "会社", "weight": 1.0, "source": "doc-b"},
                {"subject": "青嶺酒造", "label": "kind", "object": "会社", "weight": 1.0},
                {"subject": "高瀬", "label": "kind", "object": "杜氏", "weight": 1.0, "source": "docs/a.md"},
            ]
        )
        ctx.retract_association("高瀬", "kind", "杜氏")
        assert ctx.add_aliases(concepts={"タカセ": "高瀬"}) == 1

        vocabulary = ctx.audit_vocabulary(dice_floor=0.4)
        assert [(p.a, p.b, p.score) for p in vocabulary.lexical_concepts] == [("株式会社青嶺", "青嶺株式会社", 0.8)]
        assert vocabulary.semantic_concepts == [] and vocabulary.semantic_note is not None

        drift = ctx.audit_drift()
        assert drift.total == 1 and drift.twins is None
        assert drift.unsourced[0].unsourced_weight == 1.0 and drift.dead_concept_aliases == {"タカセ": "高瀬"}
        assert ctx.audit_drift(unsourced_floor=10.0).total == 0
        assert ctx.audit_drift(include_twins=True, dice_floor=0.4).twins is not None

        audit = ctx.audit_consolidation(["merge", "contradiction", "staleness"])
        assert audit["detector"] == "consolidation/1" and audit["merge"]["total"] == 1
        with pytest.raises(ValidationError):
            ctx.audit_consolidation([])

        assert client.contexts.create("audit-dest", description="keepers") is True
        preview = ctx.promote("audit-dest", ["doc-a"], dry_run=True)
        assert preview.audit is None and preview.audit_skipped is None
        assert [(b.source, b.associations, b.created) for b in preview.batches] == [("doc-a", 1, False)]
        assert client.context("audit-dest").recall("株式会社青嶺").total == 0  # the preview wrote nothing
        done = ctx.promote("audit-dest", ["doc-a"])
        assert done.audit is not None and done.audit["detector"] == "consolidation/1"
        assert done.aliases_dropped == 1  # タカセ's canonical is not live in doc-a's slice
        moved = client.context("audit-dest").recall("株式会社青嶺")
        assert moved.total == 1 and moved.matches[0].attributions[0].source == "doc-a"
        again = ctx.promote("audit-dest", ["doc-a"], audit=False)
        assert again.batches[0].retracted == 1 and again.audit is None
        with pytest.raises(NotFoundError):
            ctx.promote("audit-dest", ["doc-typo"])
        with pytest.raises(NotFoundError):
            ctx.promote("no-such-context", ["doc-a"])
