"""The unmodified official `taguru` 0.9.7 SDK calling the graph walks against a real `taguru serve`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from taguru import AsyncTaguru, NotFoundError, Taguru, ValidationError
from taguru.testing import SpawnedServer
from test_official_sdk import server_binary

pytestmark = pytest.mark.slow

CORPUS = "walks sdk/道"  # needs percent-encoding


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedServer]:
    tmp: Path = tmp_path_factory.mktemp("sdk-walks")
    spawned = SpawnedServer(server_binary(tmp), tmp / "data", {})
    try:
        yield spawned
    finally:
        spawned.stop()


@pytest.fixture(scope="module")
def corpus(server: SpawnedServer) -> str:
    with Taguru(server.base_url, api_key="") as client:
        client.contexts.create(CORPUS)
        ctx = client.context(CORPUS)
        ctx.store_passages(
            {"kura.md": "青嶺酒造は霧沢町にある。"},
            locators={"kura.md": [{"paragraph": 0, "locator": {"kind": "page", "value": "3"}}]},
        )
        rows = [
            ("青嶺酒造", "所在地", "霧沢町", 2.0),
            ("霧沢町", "所属", "雲居県", 1.0),
            ("青嶺酒造", "杜氏", "高瀬", 1.0),
        ]
        rows += [("高瀬", "出身", "雲居県", 0.5), ("孤島", "関係", "小島", 3.0), ("離れ", "関係", "小島", 1.0)]
        ctx.add_associations(
            [
                {"subject": s, "label": lab, "object": o, "weight": w, "source": "kura.md", "paragraph": 0}
                for s, lab, o, w in rows
            ]
        )
        ctx.add_aliases(concepts={"Aomine": "青嶺酒造"})
    return CORPUS


def test_explore_paths_and_coverage(server: SpawnedServer, corpus: str) -> None:
    with Taguru(server.base_url, api_key="") as client:
        ctx = client.context(corpus)
        page = ctx.explore("Aomine", limit=2)
        assert page.total == 4 and [m.distance for m in page.matches] == [1, 1]
        assert page.matches[0].path == ["青嶺酒造"] and page.matches[0].association.subject == "青嶺酒造"
        assert page.matches[0].association.attributions[0].locator.value == "3"  # type: ignore[union-attr]
        last = page.matches[-1]
        cursor = {
            "distance": last.distance,
            "subject": last.association.subject,
            "label": last.association.label,
            "object": last.association.object,
        }
        rest = ctx.explore(["青嶺酒造"], after=cursor)  # type: ignore[arg-type]
        assert rest.total == 4 and [m.distance for m in rest.matches] == [2, 2]
        assert {tuple(m.path) for m in rest.matches} == {("青嶺酒造", "霧沢町"), ("青嶺酒造", "高瀬")}
        assert ctx.explore("青嶺酒造", max_depth=1).total == 2

        trails = ctx.paths("青嶺酒造", "雲居県")
        assert trails.total == 2 and trails.capped is False
        assert [t.path for t in trails.matches] == [["青嶺酒造", "霧沢町", "雲居県"], ["青嶺酒造", "高瀬", "雲居県"]]
        assert [t.strength for t in trails.matches] == [1.0, 0.5]
        assert [a.label for a in trails.matches[0].associations] == ["所在地", "所属"]
        assert ctx.paths(["青嶺酒造"], ["雲居県"], limit=0).total == 0

        orphans = ctx.unreachable_from("青嶺酒造", limit=1)
        assert orphans.total == 2 and orphans.matches[0].subject == "孤島"
        top = orphans.matches[0]
        after = {"weight": top.weight, "subject": top.subject, "label": top.label, "object": top.object}
        tail = ctx.unreachable_from(["青嶺酒造"], after=after)  # type: ignore[arg-type]
        assert [m.subject for m in tail.matches] == ["離れ"] and tail.total == 2
        with pytest.raises(ValidationError) as bad:
            ctx.explore("青嶺酒造", after={"bogus": 1})  # type: ignore[typeddict-unknown-key]
        assert bad.value.status == 422
        with pytest.raises(NotFoundError):
            client.context("nope").paths("a", "b")


@pytest.mark.anyio
async def test_walks_async(server: SpawnedServer, corpus: str) -> None:
    async with AsyncTaguru(server.base_url, api_key="") as client:
        ctx = client.context(corpus)
        assert (await ctx.explore("孤島")).total == 2
        assert (await ctx.paths("孤島", "離れ")).matches[0].path == ["孤島", "小島", "離れ"]
        assert (await ctx.unreachable_from([])).total == 6
