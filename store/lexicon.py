"""The spelling index behind resolve: exact, containment and bigram-Dice fuzzy matches."""

from __future__ import annotations

from collections import defaultdict

from store.text import bigrams, normalize

# Substring enumeration of the cue is exact and cheap for ordinary cues; past this
# length the containment pass scans the candidate spellings instead.
MAX_ENUMERATED_CUE = 96


class Lexicon:
    """Normalized spellings (canonical and alias) of one record namespace."""

    __slots__ = ("norms", "records", "alive", "by_norm", "gram_post", "char_post", "gram_df", "n_live", "entry_of")

    def __init__(self) -> None:
        self.norms: list[str] = []
        self.records: list[int] = []
        self.alive: list[bool] = []
        self.by_norm: dict[str, list[int]] = defaultdict(list)
        self.gram_post: dict[str, list[int]] = defaultdict(list)
        self.char_post: dict[str, list[int]] = defaultdict(list)
        self.gram_df: dict[str, int] = defaultdict(int)
        self.n_live = 0
        self.entry_of: dict[str, int] = {}

    def add(self, spelling: str, record: int) -> None:
        """Index a spelling (canonical or alias) of a record."""
        norm = normalize(spelling)
        entry = len(self.norms)
        self.norms.append(norm)
        self.records.append(record)
        self.alive.append(True)
        self.entry_of[spelling] = entry
        self.n_live += 1
        self.by_norm[norm].append(entry)
        for g in bigrams(norm):
            self.gram_post[g].append(entry)
            self.gram_df[g] += 1
        for ch in dict.fromkeys(norm):
            self.char_post[ch].append(entry)

    def remove(self, spelling: str) -> None:
        """Drop an alias spelling from the index."""
        entry = self.entry_of.pop(spelling, None)
        if entry is None or not self.alive[entry]:
            return
        self.alive[entry] = False
        self.n_live -= 1
        norm = self.norms[entry]
        self.by_norm[norm].remove(entry)
        for g in bigrams(norm):
            self.gram_post[g].remove(entry)
            self.gram_df[g] -= 1
        for ch in dict.fromkeys(norm):
            self.char_post[ch].remove(entry)

    def _containment(self, q: str) -> dict[int, float]:
        """Entries equal to, containing, or contained in q, with their ratio score."""
        found: dict[int, float] = {}
        lq = len(q)
        # spellings inside q (including equal)
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
        # spellings containing q
        if lq >= 2:
            grams = bigrams(q)
            lists = sorted((self.gram_post.get(g, []) for g in grams), key=len)
            candidates = lists[0] if lists else []
        else:
            candidates = self.char_post.get(q, [])
        norms = self.norms
        for e in candidates:
            s = norms[e]
            if len(s) > lq and q in s:
                found.setdefault(e, lq / len(s))
        return found

    def lookup(self, cue: str, dice_floor: float) -> list[tuple[int, float, str]]:
        """Best (record, score, kind) per record, unsorted; kind exact/alias/containment/fuzzy."""
        q = normalize(cue)
        if not q:
            return []
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
        for e, score, kind in hits:
            record = self.records[e]
            cur = best.get(record)
            if cur is None or score > cur[1]:
                best[record] = (e, score, kind)
        return [(record, score, kind) for record, (_e, score, kind) in best.items()]

    def _fuzzy(self, q: str, matched: dict[int, float], dice_floor: float) -> list[tuple[int, float, str]]:
        stop = max(self.n_live // 20, 64)
        gram_df = self.gram_df
        q_grams = [g for g in bigrams(q) if gram_df.get(g, 0) <= stop]
        if not q_grams:
            return []
        shared: dict[int, int] = defaultdict(int)
        for g in q_grams:
            for e in self.gram_post.get(g, ()):
                shared[e] += 1
        out: list[tuple[int, float, str]] = []
        nq = len(q_grams)
        for e in sorted(shared):
            if e in matched:
                continue
            t_size = sum(1 for g in bigrams(self.norms[e]) if gram_df[g] <= stop)
            if t_size == 0:
                continue
            dice = 2.0 * shared[e] / (nq + t_size)
            if dice >= dice_floor:
                out.append((e, dice, "fuzzy"))
        return out
