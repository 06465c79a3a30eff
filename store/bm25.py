"""BM25 postings over paragraphs, scored in f32 exactly as the reference does."""

from __future__ import annotations

import math
from array import array
from collections import Counter

import numpy as np

F = np.float32
K1 = F(1.2)
B = F(0.75)
K1_PLUS_1 = F(K1 + F(1.0))
ONE_MINUS_B = F(F(1.0) - B)
HALF = F(0.5)
ONE = F(1.0)


class Bm25Index:
    """Append-only postings with tombstoned documents; document frequencies kept exact."""

    __slots__ = ("postings", "df", "doc_len", "doc_alive", "doc_source", "doc_par", "n_live", "total_len", "n_dead")

    def __init__(self) -> None:
        self.postings: dict[str, tuple[array[int], array[float]]] = {}
        self.df: dict[str, int] = {}
        self.doc_len: array[float] = array("f")
        self.doc_alive = bytearray()
        self.doc_source: array[int] = array("i")
        self.doc_par: array[int] = array("i")
        self.n_live = 0
        self.total_len = 0
        self.n_dead = 0

    def add(self, source_id: int, paragraph: int, doc_terms: list[str]) -> int:
        """Index one paragraph; returns its document id."""
        doc = len(self.doc_len)
        self.doc_len.append(float(len(doc_terms)))
        self.doc_alive.append(1)
        self.doc_source.append(source_id)
        self.doc_par.append(paragraph)
        self.n_live += 1
        self.total_len += len(doc_terms)
        postings = self.postings
        df = self.df
        for term, tf in Counter(doc_terms).items():
            entry = postings.get(term)
            if entry is None:
                entry = (array("i"), array("f"))
                postings[term] = entry
                df[term] = 1
            else:
                df[term] += 1
            entry[0].append(doc)
            entry[1].append(float(tf))
        return doc

    def remove(self, doc: int, doc_terms: list[str]) -> None:
        """Tombstone a document and take it out of the exact statistics."""
        if not self.doc_alive[doc]:
            return
        self.doc_alive[doc] = 0
        self.n_live -= 1
        self.n_dead += 1
        self.total_len -= len(doc_terms)
        df = self.df
        for term in set(doc_terms):
            left = df[term] - 1
            if left:
                df[term] = left
            else:
                del df[term]
                del self.postings[term]

    def search(self, query: list[str], allowed_sources: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Return (doc ids, f32 scores) of every live paragraph holding a query term."""
        n = self.n_live
        if n == 0 or not query:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=F)
        big_n = F(n)
        avgdl = F(max(self.total_len / n, 1.0))
        lens = np.frombuffer(self.doc_len, dtype=F) if len(self.doc_len) else np.empty(0, dtype=F)
        scores = np.zeros(len(self.doc_len), dtype=F)
        hit = np.zeros(len(self.doc_len), dtype=bool)
        alive = np.frombuffer(self.doc_alive, dtype=np.uint8) if self.n_dead else None
        any_hit = False
        for term in query:
            entry = self.postings.get(term)
            if entry is None:
                continue
            docs = np.frombuffer(entry[0], dtype=np.int32)
            tfs = np.frombuffer(entry[1], dtype=F)
            if alive is not None:
                keep = alive[docs].astype(bool)
                docs = docs[keep]
                tfs = tfs[keep]
            if docs.size == 0:
                continue
            nt = F(self.df[term])
            idf = F(math.log(float(ONE + (big_n - nt + HALF) / (nt + HALF))))
            dl = lens[docs]
            c = (idf * (tfs * K1_PLUS_1)) / (tfs + K1 * (ONE_MINUS_B + (B * dl) / avgdl))
            scores[docs] += c
            hit[docs] = True
            any_hit = True
        if not any_hit:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=F)
        if allowed_sources is not None:
            src = np.frombuffer(self.doc_source, dtype=np.int32)
            hit &= allowed_sources[src]
        docs = np.flatnonzero(hit)
        return docs, scores[docs]
