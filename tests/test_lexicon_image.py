"""The lexicon image (store/index/lexicon_image.py): a load that takes its indexed spellings from the file
holds exactly what indexing the spellings builds, slot by slot, resolves alike, and a damaged file or one
of other spellings is never taken; a compaction rewrites the file, so an erased spelling leaves it."""

from __future__ import annotations

import random
from array import array
from pathlib import Path
from typing import Any

import pytest
from test_activation_image import load_k, write_k
from test_index_files import index_store

from taguru_server.store.index.lexicon import Lexicon
from taguru_server.store.index.lexicon_image import index_lexicons, lexicon_image_path, save_lexicons
from taguru_server.store.model.context import Context, Meta
from taguru_server.store.persist.registry import Registry

CUES = ["sake", "rice", "alias-koji", "toji", "brewery river", "酒蔵", "山田", "ginjo yeast", "x", "kojii"]


def _load(data: Path, index: bool = True) -> Context:
    return load_k(data, index)


def _write(data: Path, rnd: random.Random, n: int) -> None:
    write_k(data, rnd, n)


def _slots(lex: Lexicon) -> tuple[Any, ...]:
    def plain(value: Any) -> Any:
        if isinstance(value, array):
            return (value.typecode, value.tolist())
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return [(k, plain(v)) for k, v in value.items()]  # insertion order included
        return value

    lex._views()
    return tuple(plain(getattr(lex, slot)) for slot in Lexicon.__slots__ if slot != "_view")


def _names(ctx: Context) -> Any:
    return (list(ctx.concepts), list(ctx.labels), [list(a.items()) for a in ctx.aliases])


def _lookups(ctx: Context) -> list[Any]:
    return [sorted(lex.lookup(cue, 0.3)) for lex in ctx.lexicons for cue in CUES]


@pytest.mark.parametrize("seed", range(5))
def test_a_load_from_the_file_equals_indexing_the_spellings(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    data = tmp_path / "store"
    _write(data, rnd, 80)
    assert _load(data).lexicons_restored == ("built", "missing")
    for _ in range(3):
        taken = _load(data)
        assert taken.lexicons_restored == ("image", None)
        plain = _load(data, index=False)
        assert plain.lexicons_restored is None
        assert [_slots(lex) for lex in taken.lexicons] == [_slots(lex) for lex in plain.lexicons]
        assert _lookups(taken) == _lookups(plain)
        names = _names(taken)
        _write(data, rnd, rnd.randrange(1, 30))
        later = _load(data)
        # new names or aliases: the file no longer matches, and the load indexes them itself (and rewrites it)
        assert later.lexicons_restored == (("image", None) if _names(later) == names else ("built", "other spellings"))
        assert [_slots(lex) for lex in later.lexicons] == [_slots(lex) for lex in _load(data, index=False).lexicons]


@pytest.mark.parametrize("where", [0, 30, -7])
def test_a_damaged_file_is_not_taken_and_is_rewritten(tmp_path: Path, where: int) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(11), 90)
    ctx = _load(data)
    path = lexicon_image_path(data / "indexes", ctx.cid)
    raw = bytearray(path.read_bytes())
    raw[where] ^= 0x41
    path.write_bytes(bytes(raw))
    damaged = _load(data)
    assert damaged.lexicons_restored is not None and damaged.lexicons_restored[0] == "built"
    assert [_slots(lex) for lex in damaged.lexicons] == [_slots(lex) for lex in _load(data, index=False).lexicons]
    assert _load(data).lexicons_restored == ("image", None)


def test_other_spellings_or_a_used_lexicon_do_not_take_the_file(tmp_path: Path) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(12), 40)
    ctx = _load(data)
    index_dir = data / "indexes"
    other = ctx.fresh_lexicons()
    other[0].add("a spelling the file does not hold", 0)
    before = [_slots(lex) for lex in ctx.fresh_lexicons()]
    assert index_lexicons(other, index_dir, ctx.cid)[1] == "other spellings"
    used = ctx.fresh_lexicons()
    used[0].lookup("sake", 0.3)  # indexed already
    assert index_lexicons(used, index_dir, ctx.cid) == ("built", "not a fresh load")
    assert save_lexicons(used, index_dir, ctx.cid) is False
    fresh = ctx.fresh_lexicons()
    assert index_lexicons(fresh, index_dir, ctx.cid) == ("built", "other spellings")  # `other` rewrote it
    assert index_lexicons(ctx.fresh_lexicons(), index_dir, ctx.cid) == ("image", None)
    assert [_slots(lex) for lex in ctx.fresh_lexicons()] == before


def test_the_fresh_lexicons_of_a_loaded_context_are_in_the_loads_order(tmp_path: Path) -> None:
    data = tmp_path / "store"
    _write(data, random.Random(13), 70)
    ctx = _load(data, index=False)
    assert [_slots(lex) for lex in ctx.fresh_lexicons()] == [_slots(lex) for lex in ctx.lexicons]


def test_a_compaction_rewrites_the_file_without_the_erased_spellings(tmp_path: Path) -> None:
    from taguru_server.store.derive.maintenance import rebuild

    data = tmp_path / "store"
    store = index_store(data)
    try:
        reg = Registry(store)
        ctx = reg.create("k", Meta())
        ctx.assert_association("Kurobane Brewery", "uses", "Omachi", 1.0, "doc/1", 0)
        ctx.assert_association("Aoba", "uses", "Omachi", 1.0, "doc/2", 0)
        reg.commit([ctx])
    finally:
        store.close()
    loaded = _load(data)
    path = lexicon_image_path(data / "indexes", loaded.cid)
    assert b"kurobane brewery" in path.read_bytes()
    store = index_store(data)
    try:
        reg = Registry(store)
        ctx = reg.get("k")
        assert ctx is not None
        ctx.retract_source("doc/1")
        reg.commit([ctx])
        reg.replace(rebuild(ctx, deadline=float("inf")).context)
    finally:
        store.close()
    assert b"kurobane brewery" not in path.read_bytes()
    after = _load(data)
    assert after.lexicons_restored == ("image", None)
    assert [_slots(lex) for lex in after.lexicons] == [_slots(lex) for lex in _load(data, index=False).lexicons]
