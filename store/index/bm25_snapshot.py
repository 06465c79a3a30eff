"""The BM25 index of a freshly loaded context, kept on disk and mapped back at the next start.

A load registers every paragraph as a document in source-id order (`Context._index_passage`),
so the document ids of a fresh load are a function of the stored passages alone. The file
holds, for that numbering, the main segment's postings (term id, doc id, tf in the segment's
compressed-row form), every document's length, the term dictionary, and one digest per source
(its name, its paragraphs and their questions) with the number of documents it holds.

A file naming the change-log position the rows are at, with the load's document count for every
source, is the load's numbering as it is (its writer wrote the context at that position, the
trust the edge image rests on too): it is mapped without computing a digest. Otherwise the
digests decide what is reused: a source whose digest is in the file keeps
its postings (document ids shifted to the new numbering), every other source is tokenized
afresh. When every source is reused and the numbering is unchanged, the mapped segment is used
as it is (no copy: processes share its pages); otherwise the kept and the new postings are
merged into a new main segment. Statistics (df, N, total length) are recomputed from the final
postings either way, so a restored index answers bit-identically to one built from the rows —
`tests/test_index_files.py` compares them on seeded corpora with edits, removals and renumbering.

The file names its store and context and the change-log position it was built at; a file of
another store or context, another format or tokenizer, or one that fails a checksum is rebuilt,
never trusted.
"""

from __future__ import annotations

import functools
import hashlib
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from taguru_server.store.index.bm25 import Bm25Index, F, _Segment
from taguru_server.store.index.index_file import (
    IndexFileRejected,
    blob_strings,
    min_max,
    read_arrays,
    release_pages,
    strings_blob,
    write_arrays,
)

KIND = "bm25"
FORMAT = 1
# bump when `store.text`'s tokenizer changes what a paragraph's terms are: older files are then rebuilt
TOKENIZER = 1
DIGEST = 16


@attrs.frozen
class Restored:
    """What a load took from the file: `outcome` is reused, partial, or rebuilt (with `reason`)."""

    outcome: str
    reason: str | None
    reused_docs: int
    tokenized_docs: int
    file_seq: int | None


def source_digests(names: Sequence[str], docs_parts: Sequence[Sequence[Sequence[str]]]) -> np.ndarray:
    """One 16-byte digest per source: its name and each document's parts, unambiguously delimited."""
    out = bytearray()
    blake2b = hashlib.blake2b
    for name, docs in zip(names, docs_parts, strict=True):
        # the name, then per document \x1e and per part \x1f and its UTF-8: one string, encoded and hashed once
        # (both separators are ASCII and surrogatepass encodes code point by code point, so the bytes are
        # those of encoding each piece on its own)
        text = name + "".join(["\x1e\x1f" + "\x1f".join(parts) if parts else "\x1e" for parts in docs])
        out += blake2b(text.encode("utf-8", "surrogatepass"), digest_size=DIGEST).digest()
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(-1, DIGEST)


def save(path: Path, index: Bm25Index, identity: dict[str, Any], digests: np.ndarray, doc_counts: np.ndarray) -> int:
    """Write the sealed index of a fresh load (no removed documents); returns the file's size."""
    index.seal()
    if index._delta is not None:
        index._rebuild_main()
    main = index._main
    terms = sorted(index.term_id, key=index.term_id.__getitem__)
    blob, offsets = strings_blob(terms)
    if main is None:
        main = _Segment(len(terms), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, F))
    count = np.zeros(len(terms), dtype=np.int64)
    count[: len(main.count)] = main.count[: len(terms)]
    start = np.zeros(len(terms), dtype=np.int64)
    if len(terms) > 1:
        np.cumsum(count[:-1], out=start[1:])
    header = {"kind": KIND, "format": FORMAT, "tokenizer": TOKENIZER, **identity, "n_docs": len(index.doc_alive)}
    arrays = {
        "digests": digests,
        "doc_counts": doc_counts.astype(np.int64),
        "doc_len": np.asarray(index.doc_len, dtype=F),
        "terms": blob,
        "term_offsets": offsets,
        "start": start,
        "count": count,
        "docs": np.asarray(main.docs, dtype=np.int32),
        "tfs": np.asarray(main.tfs, dtype=F),
    }
    return write_arrays(path, header, arrays)


def restore(
    path: Path,
    index: Bm25Index,
    identity: dict[str, Any],
    digests_of: Callable[[], np.ndarray],
    doc_counts: np.ndarray,
) -> Restored:
    """Seal `index` (documents registered, nothing tokenized) from the file where it still holds.

    `digests_of()[i]`/`doc_counts[i]` describe the i-th source in document order. Returns what was
    reused; on any doubt about the file the index is sealed from the texts (outcome rebuilt).

    A file naming the change-log position the rows are at (`identity["seq"]`) was written from the
    context as it was at that position (every writer names the position of what it wrote), so when its
    per-source document counts are the load's, its numbering is the load's and the digests are not
    computed (the edge image is trusted on the same identity); any other file is matched source by
    source on its digests."""
    try:
        header, arrays = read_arrays(path)
        _check(header, arrays, identity)
    except IndexFileRejected as exc:
        index.seal()
        return Restored("rebuilt", str(exc), 0, len(index.doc_alive), None)
    seq = int(header.get("seq", 0))
    n_new = len(index.doc_alive)
    old_digests, old_counts = arrays["digests"], arrays["doc_counts"]
    # every source as the file holds it, in its order (the usual restart): the file's numbering is the load's
    in_order = (
        len(old_counts) == len(doc_counts)
        and np.array_equal(old_counts, doc_counts)
        and int(old_counts.sum()) == n_new
        and (seq == identity.get("seq") or np.array_equal(old_digests, digests_of()))
    )
    if not in_order:  # match the sources by digest
        digests = digests_of()
        old_first = np.zeros(len(old_counts) + 1, dtype=np.int64)
        np.cumsum(old_counts, out=old_first[1:])
        n_old = int(old_first[-1])
        position = {bytes(d): i for i, d in enumerate(old_digests)}
        old_to_new = np.full(n_old, -1, dtype=np.int64)
        fresh: list[int] = []
        at = 0
        for digest, k in zip(digests, doc_counts.tolist(), strict=True):
            i = position.get(bytes(digest))
            if i is not None and int(old_counts[i]) == k:
                a = int(old_first[i])
                old_to_new[a : a + k] = np.arange(at, at + k)
            else:
                fresh.extend(range(at, at + k))
            at += k
        in_order = not fresh and n_old == n_new and bool((old_to_new == np.arange(n_old)).all())
    terms = blob_strings(arrays["terms"], arrays["term_offsets"])
    if in_order:
        _install_mapped(index, terms, arrays)
        release_pages(arrays)  # the checks read every posting; requests fault back in the terms they use
        return Restored("reused", None, n_new, 0, seq)
    _install_merged(index, terms, arrays, old_to_new, fresh)
    release_pages(arrays)
    return Restored("partial", None, n_new - len(fresh), len(fresh), seq)


def _check(header: dict[str, Any], arrays: dict[str, np.ndarray], identity: dict[str, Any]) -> None:
    if header.get("kind") != KIND or header.get("format") != FORMAT:
        raise IndexFileRejected("another format")
    if header.get("tokenizer") != TOKENIZER:
        raise IndexFileRejected("built by another tokenizer")
    for key in ("store", "context"):
        if header.get(key) != identity.get(key):
            raise IndexFileRejected(f"built for another {key}")
    n_terms = len(arrays["term_offsets"]) - 1
    ok = (
        arrays["digests"].ndim == 2
        and arrays["digests"].shape[1] == DIGEST
        and len(arrays["digests"]) == len(arrays["doc_counts"])
        and int(arrays["doc_counts"].sum()) == len(arrays["doc_len"]) == int(header.get("n_docs", -1))
        and len(arrays["start"]) == len(arrays["count"]) == n_terms >= 0
        and int(arrays["count"].sum()) == len(arrays["docs"]) == len(arrays["tfs"])
        and (n_terms == 0 or int(arrays["term_offsets"][-1]) == len(arrays["terms"]))
    )
    if ok and len(arrays["docs"]):
        lo, hi = min_max(arrays["docs"])
        ok = lo >= 0 and hi < len(arrays["doc_len"])
    if not ok:
        raise IndexFileRejected("inconsistent arrays")


def _install_mapped(index: Bm25Index, terms: list[str], arrays: dict[str, np.ndarray]) -> None:
    """Every document as the file numbered it: the mapped segment serves reads directly."""
    seg = _Segment.__new__(_Segment)
    seg.start, seg.count, seg.docs, seg.tfs = arrays["start"], arrays["count"], arrays["docs"], arrays["tfs"]
    seg.n_postings = len(seg.docs)
    _finish(index, terms, seg, np.asarray(arrays["doc_len"]), np.asarray(arrays["count"]))


def _install_merged(
    index: Bm25Index, terms: list[str], arrays: dict[str, np.ndarray], old_to_new: np.ndarray, fresh: list[int]
) -> None:
    """The kept sources' postings renumbered, plus the changed sources tokenized, as one new main segment."""
    index.term_id = {t: i for i, t in enumerate(terms)}
    index.df = np.zeros(len(terms), dtype=np.int64)
    pieces = index.tokenize_docs(fresh)
    term = np.repeat(np.arange(len(terms), dtype=np.int64), arrays["count"])
    docs = old_to_new[arrays["docs"]]
    keep = docs >= 0
    pieces.insert(0, (term[keep], docs[keep], np.asarray(arrays["tfs"])[keep]))
    all_term = np.concatenate([p[0] for p in pieces])
    all_doc = np.concatenate([p[1] for p in pieces])
    all_tf = np.concatenate([p[2] for p in pieces])
    n_terms = len(index.term_id)
    seg = _Segment(n_terms, all_term, all_doc, all_tf)
    lens = np.frombuffer(index.doc_len, dtype=F).copy()
    kept = old_to_new >= 0
    lens[old_to_new[kept]] = np.asarray(arrays["doc_len"])[kept]
    _finish(index, None, seg, lens, seg.count)


def _finish(index: Bm25Index, terms: list[str] | None, seg: _Segment, lens: np.ndarray, df: np.ndarray) -> None:
    n_docs = len(index.doc_alive)
    if terms is not None:
        index.term_id = {t: i for i, t in enumerate(terms)}
    index.df = np.array(df, dtype=np.int64)
    index.doc_len = array("f")
    index.doc_len.frombytes(np.asarray(lens, dtype=F).tobytes())
    index.total_len = int(np.asarray(lens, dtype=np.float64).sum())
    index._sealed = n_docs
    index._main = seg
    index._main_upto = n_docs
    index._delta = None
    index._delta_raw = []
    index._delta_postings = 0
    index._dead_in_segments = 0
    index.seal()  # builds the per-document arrays; nothing is left to tokenize


def bm25_path(index_dir: Path, cid: int) -> Path:
    return index_dir / f"ctx-{cid}.{KIND}"


def seal_with_file(ctx: Any, index_dir: Path, identity: dict[str, Any]) -> Restored:
    """Seal a freshly loaded context's BM25 index from its file where it holds, and (re)write the file
    when anything had to be tokenized or it named another change-log position than the rows'. A file
    that cannot be written leaves the index as built."""
    index: Bm25Index = ctx.bm25
    doc_counts = _doc_counts(ctx)
    path = bm25_path(index_dir, ctx.cid)
    digests = functools.cache(lambda: _digests_of(ctx))  # once, and only if the file or the save needs them
    restored = restore(path, index, identity, digests, doc_counts)
    # a file reused by its digests is rewritten at the rows' position too, so the next load maps it unhashed
    if restored.outcome != "reused" or restored.file_seq != identity.get("seq"):
        try:
            save(path, index, identity, digests(), doc_counts)
        except OSError as exc:
            why = restored.reason or _why_saved(restored)
            return attrs.evolve(restored, reason=f"{why}; not saved ({exc.strerror or exc})")
    return restored


def _why_saved(restored: Restored) -> str:
    return "named an older position" if restored.outcome == "reused" else "changed"


def check_file(ctx: Any, index_dir: Path, store_id: str, seq: int) -> Restored | None:
    """What a load would take from a freshly loaded context's BM25 file (None: there is none), the file
    naming store `store_id` at change-log position `seq`, without writing anything: the index is sealed in
    memory from what still holds, as a load seals it."""
    path = index_dir / f"ctx-{ctx.cid}.{KIND}"
    if not path.exists():
        return None
    identity = {"store": store_id, "context": ctx.cid, "seq": seq}
    return restore(path, ctx.bm25, identity, functools.cache(lambda: _digests_of(ctx)), _doc_counts(ctx))


def _sources_of(ctx: Any) -> tuple[np.ndarray, np.ndarray]:
    """The digest and document count of each source with a passage, in the context's passage order."""
    return _digests_of(ctx), _doc_counts(ctx)


def _digests_of(ctx: Any) -> np.ndarray:
    """The digest of each source with a passage, in the context's passage order."""
    index: Bm25Index = ctx.bm25
    held, parts = index.doc_parts, index.parts
    sources = ctx.sources
    names, docs_parts = [], []
    for sid, passage in ctx.passages.items():
        names.append(sources[sid])
        docs_parts.append([held[d] or parts(d) for d in passage.docs])
    return source_digests(names, docs_parts)


def trusted_counts(index_dir: Path, cid: int, identity: dict[str, Any]) -> np.ndarray | None:
    """The per-source document counts of the context's file when it names the rows' change-log position
    (and passes every check): a load may then register its paragraphs by these counts without splitting
    them (`Bm25Index.add_counted`), as `restore` will take the file's numbering unhashed. The file read
    is held for that `restore`. None: the load splits and registers its paragraphs as they are."""
    try:
        header, arrays = read_arrays(bm25_path(index_dir, cid), keep=True)
        _check(header, arrays, identity)
    except IndexFileRejected:
        return None
    if int(header.get("seq", 0)) != identity.get("seq"):
        return None
    return np.asarray(arrays["doc_counts"])


def _doc_counts(ctx: Any) -> np.ndarray:
    """The number of documents of each source with a passage, in the context's passage order."""
    passages = ctx.passages
    return np.fromiter((len(p.docs) for p in passages.values()), dtype=np.int64, count=len(passages))


def write_rebuilt(ctx: Any, index_dir: Path, identity: dict[str, Any]) -> None:
    """Replace a context's file by the index of the context as rebuilt from its live content (a compaction).

    The file a load wrote holds the terms of every paragraph the context had then, and a file a
    partial load rewrote also keeps the terms of sources removed before it; a rebuilt context's
    index holds its live paragraphs only, numbered source after source as a file must be. When
    that does not hold, or the file cannot be written, the old file is removed instead (the next
    load rebuilds it), so no file outlives what the compaction erased.
    """
    index: Bm25Index = ctx.bm25
    path = index_dir / f"ctx-{ctx.cid}.{KIND}"
    in_order = [d for passage in ctx.passages.values() for d in passage.docs]
    try:
        if index.n_dead == 0 and in_order == list(range(len(index.doc_alive))):
            digests, doc_counts = _sources_of(ctx)
            save(path, index, identity, digests, doc_counts)
            return
    except OSError:
        pass
    path.unlink(missing_ok=True)


def in_load_order(ctx: Any) -> bool:
    """Whether the context's BM25 index is numbered as a fresh load of its rows numbers it: no removed
    documents, sources in id order (the load reads them so), each source's documents in turn."""
    index: Bm25Index = ctx.bm25
    sids = list(ctx.passages)
    if index.n_dead or sids != sorted(sids):
        return False
    return [d for passage in ctx.passages.values() for d in passage.docs] == list(range(len(index.doc_alive)))


def save_live(ctx: Any, index_dir: Path, identity: dict[str, Any]) -> bool:
    """Write the file the next load of `ctx` would write, from the context as it is in memory (the offline
    import, after its last commit). False, nothing written, when the index is not `in_load_order`."""
    if not in_load_order(ctx):
        return False
    digests, doc_counts = _sources_of(ctx)
    save(index_dir / f"ctx-{ctx.cid}.{KIND}", ctx.bm25, identity, digests, doc_counts)
    return True
