"""The unmodified official `taguru` 0.9.7 SDK through groups and cross-context search against a real `taguru serve`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from taguru import ConflictError, NotFoundError, Taguru, ValidationError
from taguru.testing import SpawnedServer
from test_official_sdk import server_binary

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedServer]:
    tmp = tmp_path_factory.mktemp("sdk-groups")
    spawned = SpawnedServer(server_binary(tmp), tmp / "data", {})
    try:
        yield spawned
    finally:
        spawned.stop()


def test_groups_and_cross_context_search_through_the_sdk(server: SpawnedServer) -> None:
    with Taguru(server.base_url, api_key="") as client:
        for name, tag, text in (
            ("蔵 sake", "酒", "蔵元の燗酒は冬の名物。"),
            ("tea/茶", "茶", "茶の蔵元は静岡にある。"),
        ):
            client.contexts.create(name, description=name)
            ctx = client.context(name)
            ctx.store_passages({"doc.md": text}, tags={"doc.md": [tag]})
            ctx.add_associations(
                [{"subject": "蔵元", "label": "産地", "object": name, "weight": 1.0, "source": "doc.md"}]
            )
        # create / get / update / nest / iter
        assert client.groups.create("drinks", description="飲み物", contexts=["蔵 sake"]) is True
        with pytest.raises(ConflictError):
            client.groups.create("drinks")
        row = client.groups.update("drinks", add_contexts=["tea/茶"], description="飲み物一式")
        assert row.contexts == ["tea/茶", "蔵 sake"] and row.description == "飲み物一式"
        assert client.groups.create("all", groups=["drinks"]) is True
        assert client.groups.get("all").groups == ["drinks"]
        assert client.groups.create("z-top", groups=["all"]) is True
        with pytest.raises(ValidationError):
            client.groups.create("over", groups=["z-top"])
        assert [g.name for g in client.groups.iter(limit=1)] == ["all", "drinks", "z-top"]
        with pytest.raises(NotFoundError):
            client.groups.get("ghost")
        # cross-context search over a group, with tags
        page = client.search_passages("蔵元", groups=["all"], tags=["茶"])
        assert [h.context for h in page.hits] == ["tea/茶"]
        assert [p.context for p in page.plan.contexts] == ["tea/茶", "蔵 sake"]
        recalled = client.recall("蔵元", groups=["drinks"], limit=1)
        assert recalled.total == 2 and len(recalled.matches) == 1
        last = recalled.matches[0]
        cursor = {"weight": last.weight, "context": last.context, "subject": last.subject, "label": last.label}
        rest = client.recall("蔵元", groups=["drinks"], after={**cursor, "object": last.object})  # type: ignore[typeddict-item]
        assert [m.context for m in recalled.matches + rest.matches] == ["tea/茶", "蔵 sake"]
        assert client.query(contexts=["蔵 sake"], label="産地").total == 1
        # rename, export → import, delete
        assert client.groups.rename("drinks", "beverages") is True
        assert client.groups.get("all").groups == ["beverages"]
        line = client.groups.export("beverages")
        assert (
            line == '{"taguru_group":1,"name":"beverages","description":"飲み物一式","contexts":["tea/茶","蔵 sake"]}\n'
        )
        assert client.groups.update("all", remove_groups=["beverages"]).groups == []
        assert client.groups.delete("beverages") is True
        assert not client.groups.exists("beverages")
        restored = client.import_batches(line)
        assert [(g.name, g.outcome, g.contexts) for g in restored.groups] == [("beverages", "created", 2)]
        assert client.groups.get("beverages").contexts == ["tea/茶", "蔵 sake"]
        assert client.groups.delete("z-top") is True
