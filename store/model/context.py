"""One knowledge context in memory: interned records, edges, aliases, passages and indexes.

Every mutation records what it touched in ``self.dirty`` so the persistence layer can
write exactly that in one transaction; when a commit fails, exactly those records are
read back from the store (``store.model.sync``), so memory never runs ahead of what is durable.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from taguru_server.store.index.bm25 import Bm25Index
from taguru_server.store.index.lexicon import Lexicon
from taguru_server.store.index.vectors import ContextVectors
from taguru_server.store.model.adjacency import Adjacency
from taguru_server.store.model.attributions import SourceEdges, source_csr
from taguru_server.store.model.edges import EdgeTable
from taguru_server.store.model.passage import Passage, StoreCounts
from taguru_server.store.model.schema import Schema, stored

F64_MAX = sys.float_info.max
CONCEPT, LABEL = 0, 1
UNSOURCED_EXPORT = "export:unsourced"


@attrs.define
class Meta:
    """Context metadata and counters."""

    description: str = ""
    pinned: bool = False
    dice_floor: float | None = None
    semantic_floor: float | None = None
    rev_graph: int = 0
    rev_passages: int = 0
    rev_config: int = 0
    reads: int = 0
    empty_reads: int = 0
    writes: int = 0
    dead_attributions: int = 0
    last_read_epoch: int = 0
    last_write_epoch: int = 0
    schema: str | None = None  # the installed schema document, normalized (`store.model.schema`), or None

    def record_read(self, empty: bool = False) -> None:
        """Advisory usage: one retrieval (and whether it found nothing)."""
        self.reads += 1
        if empty:
            self.empty_reads += 1
        self.last_read_epoch = int(time.time())

    def record_write(self) -> None:
        """Advisory usage: one mutation."""
        self.writes += 1
        self.last_write_epoch = int(time.time())


@attrs.define
class Dirty:
    """What changed since the last commit."""

    concepts_from: int = 0
    labels_from: int = 0
    sources_from: int = 0
    edges_from: int = 0
    edges: set[int] = attrs.field(factory=set)
    aliases: dict[tuple[int, str], int | None] = attrs.field(factory=dict)
    passages: set[int] = attrs.field(factory=set)
    meta: bool = False
    # vector stores a refresh replaced ("glosses", "passages"): each is rewritten whole by the commit
    vectors: set[str] = attrs.field(factory=set)
    # change-feed events of the uncommitted writes, in order: (kind, fields) — see `GET …/changes`
    events: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)

    def any(self) -> bool:
        return bool(self.edges or self.aliases or self.passages or self.meta or self.events or self.vectors)


class AliasRefused(Exception):
    """An alias pair the context cannot take; the message is the reason phrase."""


@attrs.frozen
class ContextStats:
    """A context's sizes, its dead and unsourced edges, its best-connected concepts and first labels."""

    associations: int
    concepts: int
    labels: int
    sources: int
    footprint_bytes: int
    dead_edges: int
    dead_attributions: int
    unsourced_edges: int
    unsourced_weight: float
    top_concepts: tuple[tuple[str, int], ...]  # (concept, live degree), at most 10: degree desc, id asc
    label_sample: tuple[str, ...]  # the first 50 labels by id


class Context:
    """The in-memory state of one context; the single source for every read lane."""

    def __init__(self, cid: int, name: str, meta: Meta) -> None:
        self.cid = cid
        self.name = name
        self.meta = meta
        self.concepts: list[str] = []
        self.concept_id: dict[str, int] = {}
        self.labels: list[str] = []
        self.label_id: dict[str, int] = {}
        self.sources: list[str] = []
        self.source_id: dict[str, int] = {}
        self.aliases: tuple[dict[str, int], dict[str, int]] = ({}, {})
        # edges, as parallel arrays indexed by edge id
        self.edges = EdgeTable()  # the association rows by edge id
        self.out_edges = Adjacency()  # per concept, the edges it is the subject of
        self.in_edges = Adjacency()  # per concept, the edges it is the object of (self-loops only in out_edges)
        self.label_edges = Adjacency()  # per label, its edges
        self.source_edges = SourceEdges()
        self.passages: dict[int, Passage] = {}
        self.lexicons = (Lexicon(), Lexicon())
        self.bm25 = Bm25Index()
        self.bm25.resolve = self._doc_parts_of
        self._source_rank: Any = None
        self.graph_version = 0  # bumped by every edge change; read caches key on it
        self.read_cache: dict[str, Any] = {}
        self.vectors = ContextVectors()  # embedding vectors (derived; `store/index/vectors.py`)
        self.dirty = Dirty()
        self.created = False
        self.index_restored: Any = None  # what the load took from the persisted index (`store.bm25_snapshot`)
        # where the load took the edges from: ("image" | "rows", why not the image), None without index files
        self.edges_restored: tuple[str, str | None] | None = None
        # (index dir, identity, graph version): the context as it was when its edge image at that identity
        # was read or written, so the read side may map or keep its own images under the same identity
        self.image_state: tuple[Path, dict[str, Any], int] | None = None
        # where the warm-up took the activation graph from: ("image" | "built", why not the image)
        self.activation_restored: tuple[str, str | None] | None = None
        # where the load took the indexed spellings from: ("image" | "built", why not the image)
        self.lexicons_restored: tuple[str, str | None] | None = None

    @property
    def schema(self) -> Schema | None:
        """The installed schema document (any mode), or None when the context never installed one."""
        text = self.meta.schema
        return None if text is None else stored(text)

    def emit(self, kind: str, **fields: Any) -> None:
        """Record a change-feed event; it is written (and numbered) with the commit that makes its write durable."""
        self.dirty.events.append((kind, fields))

    def pack_edges(self) -> None:
        """Hold the attribution records, the adjacency and the source → edges index packed, the delta folded in
        (after a load from the rows or a compaction, which build them as lists)."""
        self.edges.attributions.fold()
        for adjacency in (self.out_edges, self.in_edges, self.label_edges):
            adjacency.fold()
        self.source_edges.take(*source_csr(*self.edges.attributions.record_sources()))

    def mark_clean(self) -> None:
        """Everything in memory is durable: the next dirty set starts here."""
        self.dirty = Dirty(len(self.concepts), len(self.labels), len(self.sources), len(self.edges.subject))
        self.created = False

    def fresh_lexicons(self) -> tuple[Lexicon, Lexicon]:
        """New lexicons holding the context's spellings in the order a load adds them (canonical names by id,
        then aliases in stored order), not yet indexed."""
        out = (Lexicon(), Lexicon())
        for lexicon, names, aliases in (
            (out[CONCEPT], self.concepts, self.aliases[CONCEPT]),
            (out[LABEL], self.labels, self.aliases[LABEL]),
        ):
            for i, name in enumerate(names):
                lexicon.add(name, i)
            for alias, target in aliases.items():
                lexicon.add(alias, target)
        return out

    # ----- interning -------------------------------------------------------------

    def find_concept(self, name: str) -> int | None:
        cid = self.concept_id.get(name)
        return cid if cid is not None else self.aliases[CONCEPT].get(name)

    def find_label(self, name: str) -> int | None:
        lid = self.label_id.get(name)
        return lid if lid is not None else self.aliases[LABEL].get(name)

    def find_source(self, name: str) -> int | None:
        return self.source_id.get(name)

    def intern_concept(self, name: str) -> int:
        cid = self.find_concept(name)
        if cid is None:
            cid = len(self.concepts)
            self.concepts.append(name)
            self.concept_id[name] = cid
            self.out_edges.append([])
            self.in_edges.append([])
            self.lexicons[CONCEPT].add(name, cid)
        return cid

    def intern_label(self, name: str) -> int:
        lid = self.find_label(name)
        if lid is None:
            lid = len(self.labels)
            self.labels.append(name)
            self.label_id[name] = lid
            self.label_edges.append([])
            self.lexicons[LABEL].add(name, lid)
        return lid

    def intern_loaded(self, concepts: list[str], labels: list[str], sources: list[str]) -> None:
        """`intern_concept`, `intern_label` and `intern_source` of a load's names (in id order) into a context
        holding none yet, in one call each where the names are distinct (as a store's are)."""
        if self.concepts or self.labels or self.sources or self.aliases[CONCEPT] or self.aliases[LABEL]:
            raise ValueError("intern_loaded needs a context without names")
        if not _adopt(
            concepts, self.concepts, self.concept_id, (self.out_edges, self.in_edges), self.lexicons[CONCEPT]
        ):
            for name in concepts:
                self.intern_concept(name)
        if not _adopt(labels, self.labels, self.label_id, (self.label_edges,), self.lexicons[LABEL]):
            for name in labels:
                self.intern_label(name)
        if not _adopt(sources, self.sources, self.source_id, (), None):
            for name in sources:
                self.intern_source(name)

    def intern_source(self, name: str) -> int:
        sid = self.source_id.get(name)
        if sid is None:
            sid = len(self.sources)
            self.sources.append(name)
            self.source_id[name] = sid
        return sid

    # ----- graph writes ----------------------------------------------------------

    def assert_association(
        self, subject: str, label: str, obj: str, weight: float, source: str | None, paragraph: int | None
    ) -> bool:
        """Add weight to an edge (and its source record); returns whether the paragraph was nulled."""
        if source is None:
            s = self.intern_concept(subject)
            o = self.intern_concept(obj)
            lab = self.intern_label(label)
            e = self._edge(s, lab, o)
            self.edges.weight[e] = _saturate(self.edges.weight[e] + weight)
            self.edges.count[e] += 1
            self.dirty.edges.add(e)
            self.meta.rev_graph += 1
            self.dirty.meta = True
            self.graph_version += 1
            return False
        return self.assert_many([(subject, label, obj, weight, paragraph)], source) > 0

    def assert_many(self, rows: list[tuple[str, str, str, float, int | None]], source: str) -> int:
        """assert_association for each (subject, label, object, weight, paragraph) of one source,
        in order; returns how many paragraphs were nulled."""
        concept_id, label_id, edge_of = self.concept_id, self.label_id, self.edges.by_triple
        e_sum, e_cnt, e_attr = self.edges.weight, self.edges.count, self.edges.attributions
        dirty_edges = self.dirty.edges
        sid: int | None = None
        passage = None
        n_pars = 0
        source_set: set[int] | None = None
        nulled = 0
        for subject, label, obj, weight, paragraph in rows:
            s = concept_id.get(subject)
            if s is None:
                s = self.intern_concept(subject)
            o = concept_id.get(obj)
            if o is None:
                o = self.intern_concept(obj)
            lab = label_id.get(label)
            if lab is None:
                lab = self.intern_label(label)
            e = edge_of.get((s, lab, o))
            if e is None:
                e = self._edge(s, lab, o)
            v = e_sum[e] + weight
            e_sum[e] = v if -F64_MAX <= v <= F64_MAX else _saturate(v)
            e_cnt[e] += 1
            if sid is None:
                sid = self.intern_source(source)
                passage = self.passages.get(sid)
                n_pars = len(passage.paragraphs) if passage is not None else 0
                source_set = self.source_edges.get(sid)
            records = e_attr.own(e)
            if records and records[-1][0] == sid:
                rec = records[-1]
                rec[1] = _saturate(rec[1] + weight)
                rec[2] += 1
            else:
                for rec in records:
                    if rec[0] == sid:
                        rec[1] = _saturate(rec[1] + weight)
                        rec[2] += 1
                        break
                else:
                    if paragraph is not None and passage is not None and paragraph >= n_pars:
                        paragraph = None
                        nulled += 1
                    records.append([sid, weight, 1, paragraph])
                    if source_set is None:
                        source_set = self.source_edges.setdefault(sid, set())
                    source_set.add(e)
            dirty_edges.add(e)
        if rows:
            self.meta.rev_graph += len(rows)
            self.dirty.meta = True
            self.graph_version += 1
        return nulled

    def _edge(self, s: int, lab: int, o: int) -> int:
        """The edge id of (s, lab, o), created (dead, empty) when new."""
        known = len(self.edges)
        e = self.edges.row(s, lab, o)
        if e == known:
            self.out_edges.own(s).append(e)
            if o != s:
                self.in_edges.own(o).append(e)
            self.label_edges.own(lab).append(e)
        return e

    def retract_association(self, subject: str, label: str, obj: str) -> tuple[bool, int]:
        s, lab, o = self.find_concept(subject), self.find_label(label), self.find_concept(obj)
        if s is None or lab is None or o is None:
            return False, 0
        e = self.edges.by_triple.get((s, lab, o))
        if e is None or self.edges.count[e] == 0:
            return False, 0
        records = self.edges.attributions[e]
        for rec in records:
            self.source_edges[rec[0]].discard(e)
        removed = len(records)
        self.edges.attributions[e] = []
        self.edges.weight[e] = 0.0
        self.edges.count[e] = 0
        self.meta.dead_attributions += removed
        self.meta.rev_graph += 1
        self.dirty.edges.add(e)
        self.dirty.meta = True
        self.graph_version += 1
        return True, removed

    def retract_source_graph(self, sid: int) -> int:
        """Subtract and unlink every record of a source; returns the edges touched."""
        edges = self.source_edges.pop(sid, set())
        for e in edges:
            records = self.edges.attributions.own(e)
            for i, rec in enumerate(records):
                if rec[0] == sid:
                    self.edges.weight[e] = _saturate(self.edges.weight[e] - rec[1])
                    self.edges.count[e] -= rec[2]
                    if self.edges.count[e] <= 0:
                        self.edges.count[e] = 0
                        self.edges.weight[e] = 0.0
                    del records[i]
                    break
            self.dirty.edges.add(e)
        self.meta.dead_attributions += len(edges)
        if edges:
            self.dirty.meta = True
            self.graph_version += 1
        return len(edges)

    # ----- aliases ---------------------------------------------------------------

    def add_alias(self, kind: int, alias: str, canonical: str) -> None:
        """Register alias → canonical, or raise AliasRefused with the reason phrase."""
        find = self.find_concept if kind == CONCEPT else self.find_label
        target = find(canonical)
        if target is None:
            raise AliasRefused("the canonical spelling is not interned")
        current = find(alias)
        if current is not None:
            if current != target:
                raise AliasRefused("the alias already resolves to a different record")
            self.meta.rev_graph += 1
            self.dirty.meta = True
            return
        self.aliases[kind][alias] = target
        self.lexicons[kind].add(alias, target)
        self.dirty.aliases[(kind, alias)] = target
        self.meta.rev_graph += 1
        self.dirty.meta = True

    def remove_alias(self, kind: int, alias: str) -> bool:
        table = self.aliases[kind]
        if alias not in table:
            return False
        del table[alias]
        self.lexicons[kind].remove(alias)
        self.dirty.aliases[(kind, alias)] = None
        self.meta.rev_graph += 1
        self.dirty.meta = True
        return True

    # ----- passages --------------------------------------------------------------

    def store_passage(
        self,
        source: str,
        text: str,
        questions: list[tuple[int, str]],
        sections: list[tuple[int, str]],
        locators: list[tuple[int, str, str]],
        tags: list[str],
        stored_at: int | None,
        date: int | None,
    ) -> StoreCounts:
        """Replace a source's passage wholesale; markers are checked against the new split."""
        sid = self.intern_source(source)
        self._drop_passage_index(sid)
        passage = Passage(text, [], {}, {}, sorted(set(tags)), stored_at, date)
        n = len(passage.paragraphs)
        kept_q = [(p, q) for p, q in questions if p < n]
        sec: dict[int, str] = {}
        sec_dropped = 0
        for p, label in sections:
            if p >= n:
                sec_dropped += 1
            else:
                if p in sec:
                    sec_dropped += 1
                sec[p] = label
        loc: dict[int, tuple[str, str]] = {}
        loc_dropped = 0
        for p, k, v in locators:
            if p >= n:
                loc_dropped += 1
            else:
                if p in loc:
                    loc_dropped += 1
                loc[p] = (k, v)
        passage.questions = kept_q
        passage.sections = sec
        passage.section_keys = sorted(sec)
        passage.locators = loc
        self.passages[sid] = passage
        self._index_passage(sid, passage)
        self.dirty.passages.add(sid)
        self.meta.rev_passages += 1
        self.dirty.meta = True
        return StoreCounts(len(kept_q), len(questions) - len(kept_q), len(sec), sec_dropped, len(loc), loc_dropped)

    def remove_passage(self, sid: int) -> bool:
        if sid not in self.passages:
            return False
        self._drop_passage_index(sid)
        del self.passages[sid]
        self.dirty.passages.add(sid)
        self.meta.rev_passages += 1
        self.dirty.meta = True
        return True

    def _index_passage(self, sid: int, passage: Passage) -> None:
        """Register each paragraph (with its questions) as a BM25 document; tokenized lazily."""
        self._index_passages([(sid, passage)])

    def _index_passages(self, passages: list[tuple[int, Passage]]) -> None:
        """`_index_passage` for each (source id, passage) in order, in one call (a load)."""
        ranges = self.bm25.add_sources([(sid, _doc_parts(passage)) for sid, passage in passages])
        for (_, passage), docs in zip(passages, ranges, strict=True):
            passage.docs.extend(docs)

    def _doc_parts_of(self, doc: int) -> tuple[str, ...]:
        """A live BM25 document's parts, from its source's passage (a live document is always its own)."""
        bm25 = self.bm25
        return _doc_parts(self.passages[bm25.doc_source[doc]])[bm25.doc_par[doc]]

    def _drop_passage_index(self, sid: int) -> None:
        old = self.passages.get(sid)
        if old is None:
            return
        for doc in old.docs:
            self.bm25.remove(doc)
        old.docs = []

    def source_rank(self) -> Any:
        """Each source id's position in name order (the search tie-break), cached."""
        n = len(self.sources)
        if self._source_rank is None or len(self._source_rank) != max(n, 1):
            rank = np.zeros(max(n, 1), dtype=np.int64)
            order = sorted(range(n), key=self.sources.__getitem__)
            rank[order] = np.arange(n, dtype=np.int64)
            self._source_rank = rank
        return self._source_rank

    def retract_source(self, source: str, dry_run: bool = False) -> tuple[int, bool]:
        sid = self.source_id.get(source)
        if sid is None:
            return 0, False
        if dry_run:
            return len(self.source_edges.get(sid, ())), sid in self.passages
        touched = self.retract_source_graph(sid)
        if touched:
            self.meta.rev_graph += 1
        removed = self.remove_passage(sid)
        return touched, removed

    # ----- reads -----------------------------------------------------------------

    def weight(self, e: int) -> float:
        c = self.edges.count[e]
        return self.edges.weight[e] / c if c else 0.0

    def stats(self) -> ContextStats:
        """The context's sizes, dead and unsourced edges, its best-connected concepts and first labels."""
        n_concepts = len(self.concepts)
        dead, unsourced, unsourced_weight = self.edge_sums(0, len(self.edges.subject))
        live = np.asarray(self.edges.count, dtype=np.int64) != 0
        s, o = np.asarray(self.edges.subject, dtype=np.int64), np.asarray(self.edges.object, dtype=np.int64)
        degree = np.bincount(s[live], minlength=n_concepts) + np.bincount(o[live & (o != s)], minlength=n_concepts)
        order = np.lexsort((np.arange(n_concepts), -degree))[:10].tolist()
        live_degree = degree.tolist()
        return ContextStats(
            associations=len(self.edges.subject),
            concepts=len(self.concepts),
            labels=len(self.labels),
            sources=len(self.sources),
            footprint_bytes=self.footprint_bytes(),
            dead_edges=dead,
            dead_attributions=self.meta.dead_attributions,
            unsourced_edges=unsourced,
            unsourced_weight=float(unsourced_weight),
            top_concepts=tuple((self.concepts[c], live_degree[c]) for c in order),
            label_sample=tuple(self.labels[:50]),
        )

    def seal_indexes(self) -> None:
        """Build the context's own index views up front (BM25 segments, lexicon views)."""
        self.bm25.seal()
        for lexicon in self.lexicons:
            lexicon._views()

    def edge_sums(self, start: int, stop: int) -> tuple[int, int, float]:
        """Dead edges, unsourced live edges and their uncovered weight among edge ids [start, stop), as
        `stats` counts them (so a caller can walk a large context in slices)."""
        stop = min(stop, len(self.edges.subject))
        if stop <= start:
            return 0, 0, 0.0
        covered, covered_sum = self.edges.attributions.cover(start, stop, self.source_id.get(UNSOURCED_EXPORT))
        count = np.asarray(self.edges.count[start:stop], dtype=np.int64)
        gaps = covered < count  # live (count > 0) edges whose sources do not cover every assertion
        weights = np.asarray(self.edges.weight[start:stop], dtype=np.float64)
        weight = 0.0
        for gap in np.abs(weights[gaps] - covered_sum[gaps]).tolist():  # summed in edge order, as a loop sums
            weight += gap
        return int((count == 0).sum()), int(gaps.sum()), weight

    def footprint_bytes(self) -> int:
        """An estimate of the bytes the context's own data occupies (names, edges, text)."""
        names = sum(len(n.encode()) for n in self.concepts) + sum(len(n.encode()) for n in self.labels)
        names += sum(len(n.encode()) for n in self.sources)
        text = sum(len(p.text.encode()) for p in self.passages.values())
        records = self.edges.attributions.n_records()
        return 1024 + names + text + 40 * len(self.edges.subject) + 32 * records + 16 * len(self.concepts)


def _saturate(v: float) -> float:
    if v > F64_MAX:
        return F64_MAX
    if v < -F64_MAX:
        return -F64_MAX
    return v


def _adopt(
    names: list[str], into: list[str], ids: dict[str, int], groups: tuple[Adjacency, ...], lexicon: Lexicon | None
) -> bool:
    """Append distinct `names` (ids from 0) to an empty name table, its adjacency and lexicon (if any);
    False when some name repeats (the caller interns them one by one)."""
    if len(set(names)) != len(names):
        return False
    into.extend(names)
    ids.update(zip(names, range(len(names)), strict=True))
    for adjacency in groups:
        adjacency.grow(len(names))
    if lexicon is not None:
        lexicon.add_many(names, 0)
    return True


def _doc_parts(passage: Passage) -> list[tuple[str, ...]]:
    """Each paragraph's BM25 document parts: its text, then its questions in their order."""
    parts: list[tuple[str, ...]] = [(text,) for text in passage.paragraphs]
    for p, q in passage.questions:
        if 0 <= p < len(parts):
            parts[p] = (*parts[p], q)
    return parts
