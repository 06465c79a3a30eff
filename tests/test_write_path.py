"""The one write path (`store/model/operations.py`): the same data written by the HTTP routes, by an import and by
promote leaves the same model, the same revisions and the same change-feed events; and only that module
records feed events and usage marks or calls the model's mutating primitives."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Client, start_client
from substrate_support import assert_error
from test_architecture import modules

from taguru_server.server.state import REGISTRY_KEY
from taguru_server.store.model.context import Context

TEXT = "Alpha is a brewery.\n\nBeta is a town."
SOURCE = "doc.md"
ASSOCIATIONS = [
    {"subject": "alpha", "label": "in", "object": "beta", "weight": 1.0, "paragraph": 0},
    {"subject": "beta", "label": "near", "object": "gamma", "weight": 0.5},
    {"subject": "alpha", "label": "in", "object": "beta", "weight": 2.0, "paragraph": 1},
]
QUESTIONS = [{"paragraph": 0, "question": "What is Alpha?"}]
SECTIONS = [{"paragraph": 1, "section": "Places"}]


async def _http_write(client: Client, name: str) -> None:
    """The source's truth through the write routes: passage, associations, alias."""
    body = {
        "passages": {SOURCE: TEXT},
        "questions": {SOURCE: QUESTIONS},
        "sections": {SOURCE: SECTIONS},
        "tags": {SOURCE: ["t"]},
        "dates": {SOURCE: 1000},
    }
    await client.ok("POST", f"/contexts/{name}/sources", body)
    await client.ok("POST", f"/contexts/{name}/associations", [{**a, "source": SOURCE} for a in ASSOCIATIONS])
    await client.ok("POST", f"/contexts/{name}/aliases", {"concepts": {"Alpha": "alpha"}})


def _stream(name: str) -> str:
    """The same truth as one import batch."""
    lines: list[dict[str, Any]] = [
        {"taguru_batch": 1, "context": name, "source": SOURCE, "create": {"description": ""}},
        {"passage": TEXT, "date": 1000, "tags": ["t"]},
        *QUESTIONS,
        *SECTIONS,
        *ASSOCIATIONS,
        {"alias": "Alpha", "canonical": "alpha", "kind": "concept"},
    ]
    return "\n".join(json.dumps(line) for line in lines)


def _state(ctx: Context) -> dict[str, Any]:
    """What a context holds, apart from usage counters and storage times."""
    passages = {
        ctx.sources[sid]: (p.text, p.questions, p.sections, p.locators, p.tags, p.date)
        for sid, p in ctx.passages.items()
    }
    edges = [
        (
            ctx.concepts[ctx.edges.subject[e]],
            ctx.labels[ctx.edges.label[e]],
            ctx.concepts[ctx.edges.object[e]],
            ctx.edges.weight[e],
            ctx.edges.count[e],
        )
        for e in range(len(ctx.edges.subject))
    ]
    attributions = [[(ctx.sources[r[0]], *r[1:]) for r in records] for records in ctx.edges.attributions]
    return {
        "concepts": ctx.concepts,
        "labels": ctx.labels,
        "aliases": ctx.aliases,
        "edges": edges,
        "attributions": attributions,
        "passages": passages,
        "dead_attributions": ctx.meta.dead_attributions,
    }


async def _events(client: Client, name: str, since: str) -> list[dict[str, Any]]:
    events = (await client.ok("GET", f"/contexts/{name}/changes?since={since}"))["result"]["events"]
    return [{k: v for k, v in e.items() if k != "seq"} for e in events]


@pytest.mark.anyio
async def test_http_import_and_promote_write_the_same(settings_factory) -> None:
    server, client, session = await start_client(settings_factory())
    try:
        names = ("by-http", "by-import", "by-promote")
        await client.ok("PUT", "/contexts/by-http", {"description": ""})
        await client.ok("PUT", "/contexts/by-promote", {"description": ""})
        tails = {"by-http": "", "by-promote": ""}
        for name in tails:
            tails[name] = (await client.ok("GET", f"/contexts/{name}/changes"))["result"]["next"]
        stream = _stream("by-import")
        for round_ in (1, 2):  # the second round replaces the source's truth
            if round_ == 2:
                await client.ok("POST", "/contexts/by-http/sources/retract", {"source": SOURCE})
            await _http_write(client, "by-http")
            await client.ok("POST", "/import", raw=stream, content_type="application/x-ndjson")
            promote = {"into": "by-promote", "sources": [SOURCE], "audit": False}
            await client.ok("POST", "/contexts/by-http/promote", promote)
        epoch = (await client.ok("GET", "/contexts/by-import/changes"))["result"]["next"].split("-")[1]
        tails["by-import"] = f"cf1-{epoch}-0"
        feeds = [await _events(client, name, tails[name]) for name in names]
        once = [
            {"kind": "source_stored", "source": SOURCE},
            {"kind": "associations_added", "count": len(ASSOCIATIONS)},
            {"kind": "aliases_added", "count": 1},
        ]
        assert feeds[0] == once + [{"kind": "source_retracted", "source": SOURCE}, *once]
        assert feeds[1] == feeds[0] and feeds[2] == feeds[0]
        revisions = [(await client.ok("GET", f"/contexts/{name}"))["result"]["revision"] for name in names]
        assert revisions[0]["graph"] > 0 and revisions[0]["passages"] == 3
        assert revisions[1] == revisions[0] and revisions[2] == revisions[0]
        registry = server.app[REGISTRY_KEY]
        states = [_state(registry.get(name)) for name in names]
        assert states[0]["passages"][SOURCE][1] == [(0, "What is Alpha?")]
        assert states[1] == states[0] and states[2] == states[0]
    finally:
        await session.close()
        await server.close()


WRITE_PATH = "taguru_server.store.model.operations"
MODEL = "taguru_server.store.model.context"
BOOKKEEPING = {"emit", "record_write"}
MUTATORS = {
    "assert_association",
    "assert_many",
    "retract_association",
    "retract_source",
    "retract_source_graph",
    "add_alias",
    "remove_alias",
    "store_passage",
    "remove_passage",
}
REVISIONS = {"rev_graph", "rev_passages", "rev_config"}


def _called(path: Path, names: set[str]) -> set[str]:
    """The method names out of `names` that the module calls on a model (`x.name(...)`, `operations.name` aside)."""
    tree = ast.parse(path.read_text(), str(path))
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "operations")
    }


def test_only_the_write_path_records_events_and_usage() -> None:
    callers = {name for name, path in modules().items() if _called(path, BOOKKEEPING)}
    assert callers == {WRITE_PATH}


def test_only_the_write_path_calls_the_models_mutators() -> None:
    callers = {name for name, path in modules().items() if _called(path, MUTATORS)}
    assert callers <= {WRITE_PATH, MODEL} and WRITE_PATH in callers


def test_no_module_outside_the_store_moves_a_revision() -> None:
    for name, path in modules().items():
        if name.startswith("taguru_server.store."):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign):
                targets = [node.target]
            else:
                continue
            moved = {a for t in targets for a in _attribute_chain(t)} & (REVISIONS | {"dirty"})
            assert not moved, f"{name} writes {sorted(moved)}"


def _attribute_chain(node: ast.expr) -> set[str]:
    """The attribute names along an assignment target (`ctx.dirty.meta` -> dirty, meta)."""
    names = set()
    while isinstance(node, ast.Attribute):
        names.add(node.attr)
        node = node.value
    return names


@pytest.mark.anyio
async def test_an_alias_batch_refused_partway_keeps_and_records_what_landed(client: Client) -> None:
    await client.ok("PUT", "/contexts/k", {"description": ""})
    tail = (await client.ok("GET", "/contexts/k/changes"))["result"]["next"]
    await client.ok("POST", "/contexts/k/associations", [{"subject": "a", "label": "r", "object": "b", "weight": 1.0}])
    added = await client.call("POST", "/contexts/k/aliases", {"concepts": {"A": "a", "B": "nowhere"}})
    assert_error(added, 409, "conflict", prefix="applied 1 aliases, then concept alias 'B' → 'nowhere': ")
    removed = await client.call("DELETE", "/contexts/k/aliases", {"concepts": ["A", "a"]})
    assert_error(removed, 409, "conflict", prefix="removed 1 aliases, then 'a' is not a concept alias")
    assert await _events(client, "k", tail) == [
        {"kind": "associations_added", "count": 1},
        {"kind": "aliases_added", "count": 1},
        {"kind": "aliases_removed", "count": 1},
    ]
    assert (await client.ok("GET", "/contexts/k"))["result"]["usage"]["writes"] == 3
