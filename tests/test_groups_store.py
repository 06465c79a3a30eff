"""Groups in the store (both backends): durable writes, the sweeps a context delete or rename needs, followers."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pg_support import database_url_for

from taguru_server.store.model.context import Meta
from taguru_server.store.persist.backend import open_store
from taguru_server.store.persist.groups import GroupRecord
from taguru_server.store.persist.registry import Registry


def _registry(data: Path, shared: bool = False) -> Registry:
    return Registry(open_store(str(data), database_url_for(data)), shared=shared)


def _contexts(reg: Registry, *names: str) -> None:
    for name in names:
        reg.commit([reg.create(name, Meta())])


def test_group_writes_are_durable_and_swept_by_context_delete_and_rename(tmp_path: Path) -> None:
    data = tmp_path / "data"
    reg = _registry(data)
    _contexts(reg, "a", "b", "c")
    reg.write_groups(
        {
            "g": GroupRecord.of("d", ["a", "b"], ["h"]),
            "h": GroupRecord.of("", ["b", "c"], []),
            "other": GroupRecord.of("", ["c"], []),
        }
    )
    reg.delete("b")
    assert reg.groups["g"].contexts == ("a",) and reg.groups["h"].contexts == ("c",)
    reg.rename_context_in_groups("c", "0c")
    assert reg.groups["h"].contexts == ("0c",) and reg.groups["other"].contexts == ("0c",)
    assert reg.persistence.rename_context_in_groups("nobody", "x") is None
    reg.write_groups({}, ["other"])
    seen = dict(reg.groups)
    reg.close()
    again = _registry(data)
    try:
        assert again.groups == seen
        assert again.groups == {"g": GroupRecord.of("d", ["a"], ["h"]), "h": GroupRecord.of("", ["0c"], [])}
        assert again.persistence.remove_context_from_groups("a") is not None
        assert again.persistence.remove_context_from_groups("a") is None
        assert again.persistence.list_groups()["g"].contexts == ()
    finally:
        again.close()


def test_rename_in_groups_runs_inside_a_callers_transaction(tmp_path: Path) -> None:
    """The hook a context rename uses: the membership rewrite commits (or rolls back) with the rename."""
    from taguru_server.store.persist.row_writes import rename_in_groups

    data = tmp_path / "data"
    reg = _registry(data)
    try:
        _contexts(reg, "old")
        reg.write_groups({"g": GroupRecord.of("", ["old"], [])})
        store = reg.persistence
        try:
            with store._tx() as db:  # type: ignore[attr-defined]
                assert rename_in_groups(db, "old", "new") is not None
                raise RuntimeError("the rename failed later in its transaction")
        except RuntimeError:
            pass
        assert store.list_groups()["g"].contexts == ("old",)
        with store._tx() as db:  # type: ignore[attr-defined]
            assert rename_in_groups(db, "old", "new") is not None
        reg.note_groups_changed()
        assert reg.groups["g"].contexts == ("new",)
    finally:
        reg.close()


def test_a_second_registry_follows_group_writes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    a = _registry(data, shared=True)
    b = _registry(data, shared=True)

    async def scenario() -> None:
        async with a.write_section(deadline=float("inf")):
            _contexts(a, "x", "y")
            a.write_groups({"g": GroupRecord.of("one", ["x", "y"], [])})
        b.catch_up()
        assert b.groups == {"g": GroupRecord.of("one", ["x", "y"], [])}
        assert b.exists("x")
        async with b.write_section(deadline=float("inf")):
            b.delete("x")  # swept by the other process
        a.catch_up()
        assert a.groups["g"].contexts == ("y",)
        async with a.write_section(deadline=float("inf")):
            a.write_groups({"g2": GroupRecord.of("", [], ["g"])}, ["nothing"])
        async with b.write_section(deadline=float("inf")):  # a write section catches up first
            assert set(b.groups) == {"g", "g2"}
            b.write_groups({}, ["g2"])
        a.catch_up()
        assert set(a.groups) == {"g"}

    try:
        asyncio.run(scenario())
    finally:
        a.close()
        b.close()


def test_a_refused_group_write_changes_nothing_in_memory(tmp_path: Path) -> None:
    import pytest

    from taguru_server.store.errors import StorageFailed
    from taguru_server.store.persist.registry import CommitFailed

    reg = _registry(tmp_path / "data")
    try:
        _contexts(reg, "a")
        reg.write_groups({"g": GroupRecord.of("", ["a"], [])})

        def refusing(*args: object, **kw: object) -> int:
            raise StorageFailed("storage_full", "the disk is full")

        reg.persistence.write_groups = refusing  # type: ignore[method-assign]
        with pytest.raises(CommitFailed) as failed:
            reg.write_groups({"h": GroupRecord()}, ["g"])
        assert failed.value.kind == "storage_full" and reg.write_failing
        assert reg.groups == {"g": GroupRecord.of("", ["a"], [])}
    finally:
        reg.close()


def test_offline_import_restores_group_records(tmp_path: Path) -> None:
    import json

    from process_support import base_env, cli

    data = tmp_path / "data"
    stream = tmp_path / "in.jsonl"
    lines = [
        {"taguru_group": 1, "name": "kura", "description": "蔵元一式", "contexts": ["t-sake"]},
        {"taguru_batch": 1, "context": "t-sake", "source": "s", "create": {}},
        {"subject": "a", "label": "b", "object": "c", "weight": 1.0},
    ]
    stream.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    done = cli("import", "--no-embed", str(stream), env=base_env(data))
    assert done.returncode == 0, done.stderr
    reg = _registry(data)
    try:
        assert reg.groups == {"kura": GroupRecord.of("蔵元一式", ["t-sake"], [])}
    finally:
        reg.close()
