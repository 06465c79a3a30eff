"""Persisted BM25 indexes: a restored index answers exactly as one built from the rows.

Seeded random contexts are stored, loaded once (the file is written), changed (passages
replaced, removed, added, sources renumbered by a compaction) and loaded again; every load
with the file is compared with a load that ignores it: the statistics, every term's postings
and contributions, and the top-k of random queries. Damaged, foreign and stale files are
rebuilt, never trusted.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pg_support import database_url_for

from taguru_server.store.derive.maintenance import rebuild
from taguru_server.store.index.index_file import MAGIC, IndexFileRejected, prefetch, read_arrays, write_arrays
from taguru_server.store.model.context import Context, Meta
from taguru_server.store.persist.backend import open_store
from taguru_server.store.persist.registry import Registry

WORDS = [
    "sake", "rice", "koji", "brewery", "river", "toji", "yeast", "polish", "junmai", "ginjo",
    "酒蔵", "杜氏", "山田錦", "雄町", "精米", "吟醸", "川", "水", "麹", "酵母",
]  # fmt: skip


def _text(rnd: random.Random) -> str:
    paragraphs = []
    for _ in range(rnd.randint(1, 4)):
        paragraphs.append(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 12))))
    return "\n\n".join(paragraphs)


def index_store(data: Path, index: bool = True) -> Any:
    store = open_store(str(data), database_url_for(data))
    store.index_dir = data / "indexes" if index else None
    return store


def _fill(ctx: Context, rnd: random.Random, sources: range) -> None:
    for i in sources:
        text = _text(rnd)
        n = text.count("\n\n") + 1
        questions = [(rnd.randrange(n), rnd.choice(WORDS) + "?")] if rnd.random() < 0.3 else []
        ctx.store_passage(f"doc/{i:04d}", text, questions, [], [], [], None, None)


def _load(data: Path, index: bool = True) -> Context:
    return load_context(data, index, "c")


def load_context(data: Path, index: bool, name: str) -> Context:
    """A fresh load of context `name`, with the index directory (both files) or without."""
    store = index_store(data, index)
    try:
        ctx = Registry(store).get(name)
        assert ctx is not None
        return ctx
    finally:
        store.close()


def edge_structures(ctx: Context) -> tuple[Any, ...]:
    t = ctx.edges
    return (
        t.subject,
        t.label,
        t.object,
        [repr(w) for w in t.weight],
        t.count,
        t.attributions,
        sorted(t.by_triple.items()),
        ctx.out_edges,
        ctx.in_edges,
        ctx.label_edges,
        {sid: sorted(es) for sid, es in ctx.source_edges.items() if es},
    )


def _write(data: Path, change: Any) -> None:
    store = index_store(data)
    try:
        reg = Registry(store)
        ctx = reg.get("c") or reg.create("c", Meta())
        change(ctx)
        reg.commit([ctx])
    finally:
        store.close()


def _same(a: Context, b: Context, rnd: random.Random) -> None:
    """Both contexts' BM25 indexes answer alike: statistics, postings, contributions and top-k."""
    x, y = a.bm25, b.bm25
    x.seal()
    y.seal()
    assert (x.n_live, x.total_len, len(x.doc_alive)) == (y.n_live, y.total_len, len(y.doc_alive))
    assert np.array_equal(x._lens, y._lens) and np.array_equal(x._src, y._src) and np.array_equal(x._par, y._par)
    live = {t for t, i in x.term_id.items() if x.df[i] > 0}
    assert live == {t for t, i in y.term_id.items() if y.df[i] > 0}
    for term in live:
        assert x.df[x.term_id[term]] == y.df[y.term_id[term]]
        ex, ey = x._term(term), y._term(term)
        assert ex is not None and ey is not None
        assert np.array_equal(ex[0], ey[0]) and np.array_equal(ex[1], ey[1])
    rank = a.source_rank()
    terms = sorted(live)
    for _ in range(30):
        query = rnd.sample(terms, min(len(terms), rnd.randint(1, 4)))
        limit = rnd.choice([1, 5, 50])
        assert x.top(query, limit, None, rank) == y.top(query, limit, None, rank)
        dx, sx = x.search(query)
        dy, sy = y.search(query)
        assert np.array_equal(dx, dy) and np.array_equal(sx, sy)


@pytest.mark.parametrize("seed", range(6))
def test_a_restored_index_answers_as_one_built_from_the_rows(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    data = tmp_path / "store"
    _write(data, lambda ctx: _fill(ctx, rnd, range(rnd.randint(20, 80))))

    first = _load(data)
    assert first.index_restored.outcome == "rebuilt" and first.index_restored.reason == "missing"
    again = _load(data)
    assert again.index_restored.outcome == "reused" and again.index_restored.tokenized_docs == 0
    _same(again, _load(data, index=False), rnd)

    def edit(ctx: Context) -> None:
        names = sorted(ctx.source_id)
        for name in rnd.sample(names, 5):
            ctx.store_passage(name, _text(rnd), [], [], [], [], None, None)
        for name in rnd.sample(sorted(set(names)), 3):
            ctx.retract_source(name)
        _fill(ctx, rnd, range(500, 500 + rnd.randint(1, 6)))

    _write(data, edit)
    changed = _load(data)
    note = changed.index_restored
    assert note.outcome == "partial" and 0 < note.tokenized_docs < len(changed.bm25.doc_alive) // 2
    _same(changed, _load(data, index=False), rnd)
    assert _load(data).index_restored.outcome == "reused"  # the partial load rewrote the file


def test_a_compaction_renumbering_sources_reuses_every_unchanged_source(tmp_path: Path) -> None:
    rnd = random.Random(11)
    data = tmp_path / "store"
    _write(data, lambda ctx: _fill(ctx, rnd, range(40)))
    _write(data, lambda ctx: [ctx.retract_source(f"doc/{i:04d}") for i in range(0, 40, 3)])
    assert _load(data).index_restored.outcome in ("rebuilt", "partial")
    store = index_store(data)
    try:
        reg = Registry(store)
        old = reg.get("c")
        assert old is not None
        reg.replace(rebuild(old, deadline=float("inf")).context)
    finally:
        store.close()
    after = _load(data)
    assert len(after.sources) < 40  # the retracted sources' names are gone: the others moved down
    assert after.index_restored.outcome in ("reused", "partial") and after.index_restored.tokenized_docs == 0
    _same(after, _load(data, index=False), rnd)


def _file(data: Path) -> Path:
    (path,) = (data / "indexes").glob("ctx-*.bm25")
    return path


@pytest.mark.parametrize("where", ["magic", "header", "array", "truncated", "empty"])
def test_a_damaged_file_is_rebuilt_never_trusted(tmp_path: Path, where: str) -> None:
    rnd = random.Random(3)
    data = tmp_path / "store"
    _write(data, lambda ctx: _fill(ctx, rnd, range(30)))
    _load(data)
    path = _file(data)
    raw = bytearray(path.read_bytes())
    if where == "magic":
        raw[0] ^= 0xFF
    elif where == "header":
        raw[30] ^= 0x01
    elif where == "array":
        raw[-5] ^= 0x01  # the last array's bytes (the term frequencies)
    elif where == "truncated":
        raw = raw[: len(raw) // 2]
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    ctx = _load(data)
    assert ctx.index_restored.outcome == "rebuilt", ctx.index_restored
    assert ctx.index_restored.reason
    _same(ctx, _load(data, index=False), rnd)
    assert _load(data).index_restored.outcome == "reused"  # and the rebuilt file is sound again


def test_a_file_of_another_context_or_store_is_rebuilt(tmp_path: Path) -> None:
    rnd = random.Random(5)
    one, two = tmp_path / "one", tmp_path / "two"
    _write(one, lambda ctx: _fill(ctx, rnd, range(20)))
    _write(two, lambda ctx: _fill(ctx, random.Random(5), range(20)))
    _load(one)
    _load(two)
    shutil.copy(_file(one), _file(two))  # same context id and texts, another store
    ctx = _load(two)
    assert (ctx.index_restored.outcome, ctx.index_restored.reason) == ("rebuilt", "built for another store")
    _same(ctx, _load(two, index=False), rnd)


def test_deleting_a_context_removes_its_file(tmp_path: Path) -> None:
    data = tmp_path / "store"
    _write(data, lambda ctx: _fill(ctx, random.Random(1), range(5)))
    _load(data)
    assert _file(data).exists()
    store = index_store(data)
    try:
        assert Registry(store).delete("c")
    finally:
        store.close()
    assert not list((data / "indexes").glob("ctx-*.bm25"))


def test_the_file_format_round_trips_and_checks_every_array(tmp_path: Path) -> None:
    path = tmp_path / "x.idx"
    arrays = {"a": np.arange(10, dtype=np.int64), "b": np.zeros(0, dtype=np.float32), "c": np.ones((3, 16), np.uint8)}
    write_arrays(path, {"kind": "t", "format": 1}, arrays)
    header, back = read_arrays(path)
    assert header == {"kind": "t", "format": 1}
    for name, arr in arrays.items():
        assert np.array_equal(back[name], arr) and back[name].dtype == arr.dtype
        assert not back[name].flags.writeable or not len(arr)
    assert path.read_bytes()[:8] == MAGIC
    assert not list(tmp_path.glob("*.tmp"))  # the staging file is gone
    with pytest.raises(IndexFileRejected, match="missing"):
        read_arrays(tmp_path / "nope")


def test_a_prefetched_file_is_used_only_while_it_is_the_file_read(tmp_path: Path) -> None:
    """`prefetch` reads and checks files ahead of `read_arrays`; a file replaced, damaged or created since
    is read again, never answered from the prefetch."""
    one, two, later = tmp_path / "one.idx", tmp_path / "two.idx", tmp_path / "later.idx"
    write_arrays(one, {"v": 1}, {"a": np.arange(4, dtype=np.int64)})
    write_arrays(two, {"v": 1}, {"a": np.arange(4, dtype=np.int64)})
    prefetch([one, two, later])
    assert read_arrays(one)[0] == {"v": 1}  # as prefetched
    write_arrays(two, {"v": 2}, {"a": np.arange(9, dtype=np.int64)})  # replaced after the prefetch
    header, back = read_arrays(two)
    assert header == {"v": 2} and len(back["a"]) == 9
    write_arrays(later, {"v": 3}, {"a": np.zeros(2, dtype=np.int64)})  # missing when prefetched
    assert read_arrays(later)[0] == {"v": 3}
    prefetch([one])
    from taguru_server.store.index import index_file

    index_file._PREFETCHED[one][0].wait()  # rewriting a file in place while it is mapped and read is a SIGBUS
    raw = bytearray(one.read_bytes())
    raw[-1] ^= 0xFF
    one.write_bytes(bytes(raw))  # damaged in place after the prefetch
    with pytest.raises(IndexFileRejected):
        read_arrays(one)


def test_an_index_dir_that_cannot_be_written_leaves_the_load_as_it_was(tmp_path: Path) -> None:
    rnd = random.Random(8)
    data = tmp_path / "store"
    _write(data, lambda ctx: _fill(ctx, rnd, range(10)))
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the index directory should be", encoding="utf-8")
    store = open_store(str(data), database_url_for(data))
    store.index_dir = blocked
    try:
        ctx = Registry(store).get("c")
    finally:
        store.close()
    assert ctx is not None and ctx.index_restored.outcome == "rebuilt"
    assert "not saved" in ctx.index_restored.reason
    _same(ctx, _load(data, index=False), rnd)


def test_a_staging_file_left_by_a_killed_writer_is_swept_once_stale(tmp_path: Path) -> None:
    import os
    import time

    path = tmp_path / "ctx-1.bm25"
    old = tmp_path / "ctx-1.bm25.elsewhere.123.tmp"
    fresh = tmp_path / "ctx-1.bm25.elsewhere.456.tmp"  # maybe another host writing right now
    for f in (old, fresh):
        f.write_bytes(b"half a file")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    write_arrays(path, {"kind": "t"}, {"a": np.arange(3)})
    assert not old.exists() and fresh.exists() and read_arrays(path)[0] == {"kind": "t"}


def _stream(path: Path, rnd: random.Random, sources: list[int]) -> Path:
    """An import file: one batch per source of context `c`, each a passage of random words."""
    lines = []
    for i in sources:
        lines.append(json.dumps({"taguru_batch": 1, "context": "c", "source": f"doc/{i:04d}", "create": {}}))
        lines.append(json.dumps({"passage": _text(rnd)}, ensure_ascii=False))
        for _ in range(rnd.randrange(3)):  # some associations too, so the edge image holds rows
            triple = {"subject": rnd.choice(WORDS), "label": rnd.choice(WORDS[:3]), "object": rnd.choice(WORDS)}
            lines.append(json.dumps({**triple, "weight": rnd.choice([1.0, 0.5]), "paragraph": 0}, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _import(data: Path, stream: Path, monkeypatch: pytest.MonkeyPatch, index_dir: bool = True) -> None:
    """`taguru import` offline, in process, on this backend (PostgreSQL keeps indexes when told where)."""
    from taguru_server.cli.main import main

    url = database_url_for(data)
    monkeypatch.delenv("TAGURU_INDEX_DIR", raising=False)
    monkeypatch.delenv("TAGURU_DATABASE_URL", raising=False)
    if url is not None:
        monkeypatch.setenv("TAGURU_DATABASE_URL", url)
        if index_dir:
            monkeypatch.setenv("TAGURU_INDEX_DIR", str(data / "indexes"))
    elif not index_dir:
        monkeypatch.setenv("TAGURU_INDEX_DIR", "off")
    assert main(["import", "--data-dir", str(data), "--no-embed", str(stream)]) == 0


def _file_seq(data: Path) -> tuple[Any, int]:
    """The index file's recorded change-log position, and the store's for the context."""
    header, _arrays = read_arrays(data / "indexes" / "ctx-1.bm25")
    store = index_store(data)
    try:
        return header["seq"], store.index_seq(1)
    finally:
        store.close()


def test_an_offline_import_leaves_the_index_the_next_load_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(5)
    data = tmp_path / "store"
    _import(data, _stream(tmp_path / "a.jsonl", rnd, list(range(60))), monkeypatch)
    assert (data / "indexes" / "ctx-1.bm25").exists()
    seq, position = _file_seq(data)
    assert seq == position > 0  # written at the position after the import's last commit
    loaded = _load(data)
    assert loaded.index_restored.outcome == "reused" and loaded.index_restored.tokenized_docs == 0
    assert loaded.edges_restored == ("image", None) and len(loaded.edges) > 0  # the import wrote it
    _same(loaded, _load(data, index=False), rnd)
    assert edge_structures(loaded) == edge_structures(_load(data, index=False))

    # over the existing context: sources replaced (documents removed) and added; the file still holds
    _import(data, _stream(tmp_path / "b.jsonl", rnd, [3, 7, 11, 40, *range(100, 110)]), monkeypatch)
    seq, position = _file_seq(data)
    assert seq == position
    again = _load(data)
    assert again.index_restored.outcome == "reused" and again.index_restored.tokenized_docs == 0
    assert len(again.passages) == 70 and again.edges_restored == ("image", None)
    _same(again, _load(data, index=False), rnd)
    assert edge_structures(again) == edge_structures(_load(data, index=False))

    # sources added only: the import's own index (merged onto the mapped file) is what is written
    _import(data, _stream(tmp_path / "c.jsonl", rnd, list(range(200, 230))), monkeypatch)
    seq, position = _file_seq(data)
    assert seq == position
    third = _load(data)
    assert third.index_restored.outcome == "reused" and len(third.passages) == 100
    assert third.edges_restored == ("image", None)
    _same(third, _load(data, index=False), rnd)


def test_an_import_without_an_index_dir_writes_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "store"
    _import(data, _stream(tmp_path / "a.jsonl", random.Random(2), list(range(10))), monkeypatch, index_dir=False)
    assert not (data / "indexes").exists()
    assert _load(data).index_restored.reason == "missing"


def test_source_digests_are_the_incremental_hash_of_each_piece() -> None:
    """A file written by an earlier version (which hashed the name, then b"\\x1e" per document and
    b"\\x1f" + UTF-8 per part, piece by piece) is recognised: the digests are byte for byte the same,
    lone surrogates and separator characters inside the text included."""
    import hashlib

    from taguru_server.store.index.bm25_snapshot import DIGEST, source_digests

    rng = random.Random(8)
    alphabet = ["a", "酒", "\ud83d", "\ude00", "\x1e", "\x1f", "😀", " ", ""]

    def word() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))

    names = [word() for _ in range(300)]
    docs = [[tuple(word() for _ in range(rng.randrange(4))) for _ in range(rng.randrange(4))] for _ in names]
    expected = bytearray()
    for name, parts_of in zip(names, docs, strict=True):
        h = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=DIGEST)
        for parts in parts_of:
            h.update(b"\x1e")
            for part in parts:
                h.update(b"\x1f")
                h.update(part.encode("utf-8", "surrogatepass"))
        expected += h.digest()
    assert source_digests(names, docs).tobytes() == bytes(expected)


def test_a_file_at_the_rows_position_is_mapped_without_hashing_and_others_by_their_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taguru_server.store.index import bm25_snapshot

    rnd = random.Random(17)
    data = tmp_path / "store"
    _write(data, lambda ctx: _fill(ctx, rnd, range(30)))
    assert _load(data).index_restored.outcome == "rebuilt"
    hashed: list[int] = []
    real = bm25_snapshot.source_digests

    def counted(names: Any, docs: Any) -> Any:
        hashed.append(len(names))
        return real(names, docs)

    monkeypatch.setattr(bm25_snapshot, "source_digests", counted)
    seq, position = _file_seq(data)
    assert seq == position
    again = _load(data)
    assert again.index_restored.outcome == "reused" and hashed == []
    _same(again, _load(data, index=False), rnd)

    # a write that leaves every passage as it was moves the rows' position past the file's: the digests
    # decide, the file is reused and rewritten at the new position, and the next load hashes nothing
    _write(data, lambda ctx: ctx.assert_association("川", "流れる", "水", 1.0, "doc/0001", None))
    before = _file(data).stat().st_ino
    moved = _load(data)
    assert moved.index_restored.outcome == "reused" and moved.index_restored.tokenized_docs == 0
    assert hashed == [30] and _file(data).stat().st_ino != before
    seq, position = _file_seq(data)
    assert seq == position
    hashed.clear()
    assert _load(data).index_restored.outcome == "reused" and hashed == []

    # the same position but another document count for a source (rows changed under the file): by digest
    store = index_store(data)
    try:
        with store._tx() as db:
            db.execute(
                "UPDATE passages SET text = text || ? WHERE source = (SELECT MIN(source) FROM passages)",
                ("\n\n川 水 麹",),
            )
    finally:
        store.close()
    changed = _load(data)
    assert changed.index_restored.outcome == "partial" and changed.index_restored.tokenized_docs > 0
    assert hashed == [30]
    _same(changed, _load(data, index=False), rnd)


def test_a_load_registering_paragraphs_by_count_edits_and_hashes_like_one_that_split_them(tmp_path: Path) -> None:
    from taguru_server.store.index.bm25_snapshot import _digests_of

    rnd = random.Random(23)
    data = tmp_path / "store"
    _write(data, lambda ctx: _fill(ctx, rnd, range(40)))
    assert _load(data).index_restored.outcome == "rebuilt"  # writes the file at the rows' position
    store = index_store(data)
    try:
        reg = Registry(store)
        ctx = reg.get("c")
        assert ctx is not None and ctx.index_restored.outcome == "reused"
        # registered by count: nothing split, no parts held
        assert all(p._paragraphs is None for p in ctx.passages.values())
        assert ctx.bm25.doc_parts == [None] * len(ctx.bm25.doc_alive)
        plain = _load(data, index=False)
        assert np.array_equal(_digests_of(ctx), _digests_of(plain))
        for name in rnd.sample(sorted(ctx.source_id), 5):
            ctx.store_passage(name, _text(rnd), [], [], [], [], None, None)
        for name in rnd.sample(sorted(ctx.source_id), 3):
            ctx.retract_source(name)
        _fill(ctx, rnd, range(500, 504))
        reg.commit([ctx])
        after = _load(data, index=False)
        x, y = ctx.bm25, after.bm25
        x.seal()
        y.seal()
        assert (x.n_live, x.total_len) == (y.n_live, y.total_len)
        live = sorted(t for t, i in x.term_id.items() if x.df[i] > 0)
        assert live == sorted(t for t, i in y.term_id.items() if y.df[i] > 0)
        assert [x.df[x.term_id[t]] for t in live] == [y.df[y.term_id[t]] for t in live]

        def named(c: Context, hits: list[tuple[int, float]]) -> list[tuple[str, int, float]]:
            return [(c.sources[int(c.bm25._src[d])], int(c.bm25._par[d]), s) for d, s in hits]

        for _ in range(30):
            query = rnd.sample(live, min(len(live), rnd.randint(1, 4)))
            assert named(ctx, x.top(query, 10, None, ctx.source_rank())) == named(
                after, y.top(query, 10, None, after.source_rank())
            )
        assert {sid: p.paragraphs for sid, p in ctx.passages.items()} == {
            sid: p.paragraphs for sid, p in after.passages.items()
        }
    finally:
        store.close()
