"""The spelling index behind resolve: exact, containment and bigram-Dice fuzzy matches.

Spellings (canonical and alias) are entries with dense ids in insertion order. Each entry's
distinct bigrams are interned as gram ids; postings (entry ids, ascending) are kept per gram
and per character. Reads build numpy views of these once per lexicon version, so the
fuzzy pass counts shared bigrams and the non-stop bigram totals with array operations
instead of re-deriving every candidate's bigrams.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from taguru_server.store.text import bigrams, normalize

# Substring enumeration of the cue is exact and cheap for ordinary cues; past this
# length the containment pass scans the candidate spellings instead.
MAX_ENUMERATED_CUE = 96


class Lexicon:
    """Normalized spellings (canonical and alias) of one record namespace."""

    __slots__ = (
        "norms",
        "records",
        "alive",
        "by_norm",
        "gram_id",
        "gram_post",
        "gram_df",
        "char_post",
        "n_live",
        "entry_of",
        "entry_grams",
        "entry_ptr",
        "version",
        "_view",
        "_spellings",
        "_indexed",
    )

    def __init__(self) -> None:
        self.norms: list[str] = []
        self.records: list[int] = []
        self.alive: list[bool] = []
        self.by_norm: dict[str, list[int]] = {}
        self.gram_id: dict[str, int] = {}
        self.gram_post: list[array[int]] = []  # per gram id: live entries, ascending
        self.gram_df: array[int] = array("i")  # per gram id: live entries posting it
        self.char_post: dict[str, array[int]] = {}
        self.n_live = 0
        self.entry_of: dict[str, int] = {}
        self.entry_grams: array[int] = array("i")  # every entry's distinct gram ids, flat
        self.entry_ptr: array[int] = array("q", [0])
        self.version = 0
        self._view: Any = None
        self._spellings: list[str] = []  # entries not yet indexed (entry ids from _indexed on)
        self._indexed = 0

    def add(self, spelling: str, record: int) -> None:
        """Add a spelling (canonical or alias) of a record; it is indexed at the next read."""
        self.entry_of[spelling] = len(self.records)
        self.records.append(record)
        self.alive.append(True)
        self._spellings.append(spelling)
        self.n_live += 1
        self.version += 1

    def add_many(self, spellings: list[str], first_record: int) -> None:
        """`add(spelling, first_record + i)` for the i-th spelling, in one call."""
        n = len(self.records)
        self.entry_of.update(zip(spellings, range(n, n + len(spellings)), strict=False))
        self.records.extend(range(first_record, first_record + len(spellings)))
        self.alive.extend([True] * len(spellings))
        self._spellings.extend(spellings)
        self.n_live += len(spellings)
        self.version += len(spellings)

    def _flush(self) -> None:
        """Index the entries added since the last read, in entry order."""
        if not self._spellings:
            return
        pending, self._spellings = self._spellings, []
        for spelling in pending:
            entry = self._indexed
            self._indexed += 1
            if self.alive[entry]:
                self._index(entry, normalize(spelling))
            else:
                self.norms.append("")
                self.entry_ptr.append(len(self.entry_grams))

    def _index(self, entry: int, norm: str) -> None:
        self.norms.append(norm)
        hits = self.by_norm.get(norm)
        if hits is None:
            self.by_norm[norm] = [entry]
        else:
            hits.append(entry)
        gram_id, gram_post, gram_df = self.gram_id, self.gram_post, self.gram_df
        for g in bigrams(norm):
            gid = gram_id.get(g)
            if gid is None:
                gid = gram_id[g] = len(gram_post)
                gram_post.append(array("i", (entry,)))
                gram_df.append(1)
            else:
                gram_post[gid].append(entry)
                gram_df[gid] += 1
            self.entry_grams.append(gid)
        self.entry_ptr.append(len(self.entry_grams))
        char_post = self.char_post
        for ch in dict.fromkeys(norm):
            post = char_post.get(ch)
            if post is None:
                char_post[ch] = array("i", (entry,))
            else:
                post.append(entry)

    def remove(self, spelling: str) -> None:
        """Drop an alias spelling from the index."""
        entry = self.entry_of.pop(spelling, None)
        if entry is None or not self.alive[entry]:
            return
        self.alive[entry] = False
        self.n_live -= 1
        self.version += 1
        if entry >= self._indexed:
            return  # never indexed: the flush skips it
        norm = self.norms[entry]
        self.by_norm[norm].remove(entry)
        for g in bigrams(norm):
            gid = self.gram_id[g]
            self.gram_post[gid].remove(entry)
            self.gram_df[gid] -= 1
        for ch in dict.fromkeys(norm):
            self.char_post[ch].remove(entry)

    # ----- reads -------------------------------------------------------------------------

    def _views(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(non-stop bigram count per entry, entry lengths, gram df, stop threshold) for this version."""
        view = self._view
        if view is not None and view[0] == self.version:
            return view[1]
        self._flush()
        stop = max(self.n_live // 20, 64)
        df = np.frombuffer(self.gram_df, dtype=np.int32).copy() if len(self.gram_df) else np.zeros(0, np.int32)
        grams = (
            np.frombuffer(self.entry_grams, dtype=np.int32).copy() if len(self.entry_grams) else np.zeros(0, np.int32)
        )
        ptr = np.frombuffer(self.entry_ptr, dtype=np.int64).copy()
        n_entries = len(ptr) - 1
        non_stop = (df[grams] <= stop).astype(np.int64)
        csum = np.zeros(len(non_stop) + 1, dtype=np.int64)
        np.cumsum(non_stop, out=csum[1:])
        t_size = csum[ptr[1:]] - csum[ptr[:-1]]
        lengths = np.fromiter(map(len, self.norms), dtype=np.int64, count=n_entries)
        out = (t_size, lengths, df, stop)
        self._view = (self.version, out)
        return out

    def _containment(self, q: str) -> dict[int, float]:
        """Entries equal to, containing, or contained in q, with their ratio score."""
        found = self._spellings_inside(q)
        candidates = self._holding_every_gram(q)
        if candidates:
            self._add_spellings_containing(q, candidates, found)
        return found

    def _spellings_inside(self, q: str) -> dict[int, float]:
        """Entries whose spelling is a substring of q (including equal), scored by their share of q."""
        found: dict[int, float] = {}
        lq = len(q)
        if lq <= MAX_ENUMERATED_CUE:
            by_norm = self.by_norm
            for size in range(lq, 0, -1):
                score = size / lq
                for start in range(lq - size + 1):
                    hits = by_norm.get(q[start : start + size])
                    if hits:
                        for e in hits:
                            found.setdefault(e, score)
        else:
            for e, norm in enumerate(self.norms):
                if self.alive[e] and norm and norm in q:
                    found.setdefault(e, len(norm) / lq)
        return found

    def _holding_every_gram(self, q: str) -> list[int]:
        """Entries posting every bigram of q (or its one character): the candidates for containing q."""
        if len(q) < 2:
            post = self.char_post.get(q)
            return post.tolist() if post is not None else []
        gids = [self.gram_id.get(g) for g in bigrams(q)]
        if any(g is None for g in gids):
            return []
        lists = sorted((self.gram_post[g] for g in gids if g is not None), key=len)
        cand = np.frombuffer(lists[0], dtype=np.int32) if len(lists[0]) else np.zeros(0, np.int32)
        for other in lists[1:]:
            if len(cand) <= 8:
                break
            cand = np.intersect1d(cand, np.frombuffer(other, dtype=np.int32), assume_unique=True)
        out: list[int] = cand.tolist()
        return out

    def _add_spellings_containing(self, q: str, candidates: list[int], found: dict[int, float]) -> None:
        """Score the candidates longer than q that contain it, unless already found."""
        lq = len(q)
        _t, lengths, _df, _stop = self._views()
        longer = (
            [e for e in candidates if lengths[e] > lq]
            if len(candidates) < 64
            else (np.asarray(candidates)[lengths[np.asarray(candidates)] > lq].tolist())
        )
        norms = self.norms
        if lq <= 2:
            # holding q's only bigram (or character) is containing q
            for e in longer:
                if e not in found:
                    found[e] = lq / len(norms[e])
        else:
            for e in longer:
                s = norms[e]
                if q in s and e not in found:
                    found[e] = lq / len(s)

    def lookup(self, cue: str, dice_floor: float) -> list[tuple[int, float, str]]:
        """Best (record, score, kind) per record, unsorted; kind exact/alias/containment/fuzzy."""
        q = normalize(cue)
        if not q:
            return []
        self._views()  # flushes pending spellings
        contained = self._containment(q)
        hits: list[tuple[int, float, str]] = []
        any_exact = False
        for e in sorted(contained):
            score = contained[e]
            kind = "exact" if score == 1.0 and self.norms[e] == q else "containment"
            if kind == "exact":
                any_exact = True
            hits.append((e, score, kind))
        if not any_exact:
            hits.extend(self._fuzzy(q, contained, dice_floor))
        best: dict[int, tuple[int, float, str]] = {}
        records = self.records
        for e, score, kind in hits:
            record = records[e]
            cur = best.get(record)
            if cur is None or score > cur[1]:
                best[record] = (e, score, kind)
        return [(record, score, kind) for record, (_e, score, kind) in best.items()]

    def _fuzzy(self, q: str, matched: dict[int, float], dice_floor: float) -> list[tuple[int, float, str]]:
        t_size, _lengths, df, stop = self._views()
        gram_id = self.gram_id
        q_gids = []
        for g in bigrams(q):
            gid = gram_id.get(g)
            if gid is not None and df[gid] <= stop:
                q_gids.append(gid)
            elif gid is None:
                q_gids.append(-1)  # posted by no spelling: a non-stop gram of q nobody shares
        if not q_gids:
            return []
        nq = len(q_gids)
        posts = [np.frombuffer(self.gram_post[g], dtype=np.int32) for g in q_gids if g >= 0 and len(self.gram_post[g])]
        if not posts:
            return []
        entries, shared = np.unique(np.concatenate(posts), return_counts=True)
        del posts
        ts = t_size[entries]
        ok = ts > 0
        entries, shared, ts = entries[ok], shared[ok], ts[ok]
        dice = 2.0 * shared.astype(np.float64) / (nq + ts).astype(np.float64)
        keep = dice >= dice_floor
        out: list[tuple[int, float, str]] = []
        for e, d in zip(entries[keep].tolist(), dice[keep].tolist(), strict=False):
            if e not in matched:
                out.append((e, d, "fuzzy"))
        return out
