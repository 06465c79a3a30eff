"""The unmodified official `taguru` 0.9.7 SDK through context schemas and time windows against a real
`taguru serve`: install and read a document, a strict refusal, warn results, the audit and the dry run,
windowed recall and query, and an import that carries a schema record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from taguru import NotFoundError, Taguru, ValidationError
from taguru.testing import SpawnedServer
from test_official_sdk import server_binary

pytestmark = pytest.mark.slow

DOC = {
    "schema": 1,
    "mode": "strict",
    "closed_labels": False,
    "types": {"Brewery": {"is_a": ["Organization"]}, "Organization": {"is_a": []}, "Person": {"is_a": []}},
    "relations": {"杜氏": {"domain": ["Brewery"], "range": ["Person"]}},
}
BAD = [
    {"subject": "高瀬", "label": "schema:type", "object": "Person", "weight": 1.0, "source": "a.md"},
    {"subject": "高瀬", "label": "杜氏", "object": "個人A", "weight": 1.0, "source": "a.md"},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedServer]:
    tmp = tmp_path_factory.mktemp("sdk-schemas")
    spawned = SpawnedServer(server_binary(tmp), tmp / "data", {})
    try:
        yield spawned
    finally:
        spawned.stop()


def test_schema_methods(server: SpawnedServer) -> None:
    with Taguru(server.base_url, api_key="") as client:
        assert client.contexts.create("sdk-schema", description="d") is True
        ctx = client.context("sdk-schema")
        with pytest.raises(NotFoundError) as missing:
            ctx.get_schema()
        assert missing.value.code == "no_schema"
        report = ctx.validate_schema(DOC)
        assert report.total == 0 and report.reserved_alias_conflicts.total == 0
        installed = ctx.put_schema(DOC)
        assert installed.mode == "strict" and set(installed.types) == {"Brewery", "Organization", "Person"}
        assert ctx.get_schema() == installed
        with pytest.raises(ValidationError) as refused:
            ctx.add_associations(BAD)
        assert "associations[1].subject" in str(refused.value)
        assert ctx.recall("高瀬").total == 0
        warn = ctx.put_schema({**DOC, "mode": "warn"})
        assert warn.mode == "warn"
        result = ctx.add_associations(BAD)
        assert result.applied == 2 and result.schema_violations == 1
        assert [i.path for i in result.issues] == ["associations[1].subject"]
        audit = ctx.audit_schema()
        assert audit.total == 1 and audit.violations[0].issues[0].kind == "domain"
        assert audit.untyped_concepts.names == ["個人A"]
        page = ctx.audit_schema(limit=0)
        assert page.total == 1 and page.violations == []


def test_windows_through_the_sdk(server: SpawnedServer) -> None:
    with Taguru(server.base_url, api_key="") as client:
        assert client.contexts.create("sdk-window", description="窓") is True
        ctx = client.context("sdk-window")
        ctx.add_associations(
            [
                {"subject": "蔵", "label": "杜氏", "object": "高瀬", "weight": 1.0, "source": "doc-2019"},
                {"subject": "蔵", "label": "杜氏", "object": "青山", "weight": 1.0, "source": "doc-2024"},
            ]
        )
        ctx.store_passages(
            {"doc-2019": "杜氏は高瀬。", "doc-2024": "杜氏は青山。"}, dates={"doc-2019": 1000, "doc-2024": 2000}
        )
        assert ctx.recall("蔵").total == 2
        windowed = client._request_json(  # the 0.9.7 SDK has no window arguments: the raw call it makes
            "POST", "/contexts/sdk-window/query", json_body={"subject": "蔵", "label": "杜氏", "until": 1500}
        )
        assert windowed["total"] == 1 and windowed["matches"][0]["object"] == "高瀬"
