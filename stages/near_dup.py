"""The near-dup stage: drop passages whose text nearly repeats a better-ranked kept passage."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import NEAR_DUP_OMITTED, RANKED, SURVIVORS, Fused, Omission
from taguru_server.store.text import normalize

THRESHOLD = 0.9


def bigram_set(text: str) -> frozenset[str]:
    """Adjacent-character pairs of the normalized text; one character c gives {cc}."""
    s = normalize(text)
    if len(s) < 2:
        return frozenset({s + s}) if s else frozenset()
    return frozenset(s[i : i + 2] for i in range(len(s) - 1))


def dice(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return 2 * len(a & b) / (len(a) + len(b))


# Passages in a request from which pairs are found through the prefix index. Measured on the
# hub corpus at search_limit 200 (200 passages of ~110 bigrams): the index checks ~700 pairs
# instead of ~20,000, but building it (bigram frequencies, ranked prefixes) costs what the
# bitset comparisons cost (~7 ms each way), so below this the quadratic walk is kept.
INDEXED_FROM = 400


def suppress_near_duplicates(
    ranked: tuple[Fused, ...], threshold: float = THRESHOLD
) -> tuple[tuple[Fused, ...], tuple[Omission, ...]]:
    """Keep the first of each near-duplicate family in fused order; name what each dropped one repeats.

    With few passages every kept one is compared, its bigram set held as an integer bitset over
    this request's bigram vocabulary (|A∩B| is one AND and a popcount). With many, only the kept
    passages that share a bigram of the passage's prefix are compared (`_PrefixIndex`), with
    |A∩B| from the sets themselves; either way the counts, hence the Dice values, are the same,
    and the first kept passage in order that matches is the one named.
    """
    grams = {i: bigram_set(f.candidate.text) for i, f in enumerate(ranked) if f.candidate.kind == "passage"}
    if len(grams) >= INDEXED_FROM and 0 < threshold <= 1:
        return _walk(ranked, grams, _IndexedPassages(grams.values(), threshold))
    return _walk(ranked, grams, _BitsetPassages(threshold))


class _KeptPassages(Protocol):
    """The passages kept so far, and the test of a new one against them."""

    def offer(self, fused: Fused, grams: frozenset[str]) -> Fused | None:
        """The first kept passage (in order) that `fused` nearly repeats; None after keeping it."""
        ...


def _walk(
    ranked: tuple[Fused, ...], grams: dict[int, frozenset[str]], passages: _KeptPassages
) -> tuple[tuple[Fused, ...], tuple[Omission, ...]]:
    """Every candidate in fused order: a passage offered to `passages` is dropped when it repeats a kept one,
    everything else is kept."""
    kept: list[Fused] = []
    dropped: list[Omission] = []
    for i, fused in enumerate(ranked):
        if fused.candidate.kind == "passage":
            match = passages.offer(fused, grams[i])
            if match is not None:
                dropped.append(Omission(fused.candidate_id, "passage", "duplicate_passage", match.candidate_id))
                continue
        kept.append(fused)
    return tuple(kept), tuple(dropped)


class _BitsetPassages:
    """Every kept passage compared, its bigram set an integer bitset over this request's bigram vocabulary."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.kept: list[tuple[Fused, int, int]] = []  # (candidate, bitset, set size)
        self.vocabulary: dict[str, int] = {}

    def offer(self, fused: Fused, grams: frozenset[str]) -> Fused | None:
        """The first kept passage `fused` nearly repeats; None after keeping it."""
        threshold, vocabulary = self.threshold, self.vocabulary
        bits = 0
        for g in grams:
            bits |= 1 << vocabulary.setdefault(g, len(vocabulary))
        size = len(grams)
        for other, other_bits, other_size in self.kept:
            total = size + other_size
            if total == 0:
                return other
            if 2 * min(size, other_size) / total < threshold:
                continue  # Dice is at most 2·min/(|a|+|b|): the sizes alone rule a match out
            if 2 * (bits & other_bits).bit_count() / total >= threshold:
                return other
        self.kept.append((fused, bits, size))
        return None


class _IndexedPassages:
    """Each passage compared only with the kept ones the prefix index proposes, |A∩B| from the sets."""

    def __init__(self, sets: Iterable[frozenset[str]], threshold: float) -> None:
        self.threshold = threshold
        self.index = _PrefixIndex(sets, threshold)
        self.kept: list[tuple[Fused, frozenset[str]]] = []

    def offer(self, fused: Fused, grams: frozenset[str]) -> Fused | None:
        """The first kept passage `fused` nearly repeats; None after keeping it."""
        threshold, index = self.threshold, self.index
        size = len(grams)
        prefix = index.prefix(grams)
        for k in index.candidates(grams, prefix):
            other, other_grams = self.kept[k]
            total = size + len(other_grams)
            if total == 0:
                return other
            if 2 * min(size, len(other_grams)) / total < threshold:
                continue
            if 2 * len(grams & other_grams) / total >= threshold:
                return other
        index.add(grams, prefix, len(self.kept))
        self.kept.append((fused, grams))
        return None


class _PrefixIndex:
    """Prefix filtering for Dice >= t over a fixed order of bigrams (rarest in the request first).

    Dice(A, B) >= t needs |A∩B| >= t·|A|/(2−t) (as |B| >= t·|A|/(2−t)), so two matching sets
    share a bigram among the first |A|−o(A)+1 of A and the first |B|−o(B)+1 of B, with o a
    lower bound of that overlap (taken a little low against float rounding: a longer prefix
    only adds candidates, which are then checked with the exact test). Empty sets match only
    each other, through their own list."""

    def __init__(self, sets: Iterable[frozenset[str]], threshold: float) -> None:
        df = Counter(itertools.chain.from_iterable(sets))
        # the order: fewer passages holding the bigram first, then first seen (no sort needed)
        self.rank = {g: (n << 32) | i for i, (g, n) in enumerate(df.items())}
        self.ratio = threshold / (2 - threshold)
        self.postings: dict[int, list[int]] = {}
        self.empty: list[int] = []

    def prefix(self, grams: frozenset[str]) -> list[int]:
        n = len(grams)
        overlap = max(1, math.floor(self.ratio * n - 1e-6))
        return sorted(map(self.rank.__getitem__, grams))[: max(n - overlap + 1, 0)]

    def add(self, grams: frozenset[str], prefix: list[int], k: int) -> None:
        if not grams:
            self.empty.append(k)
        postings = self.postings
        for r in prefix:
            found = postings.get(r)
            if found is None:
                postings[r] = [k]
            else:
                found.append(k)

    def candidates(self, grams: frozenset[str], prefix: list[int]) -> list[int]:
        """Kept positions that may match, ascending."""
        if not grams:
            return list(self.empty)
        postings = self.postings
        lists = [found for r in prefix if (found := postings.get(r)) is not None]
        if not lists:
            return []
        if len(lists) == 1:
            return lists[0]
        return sorted(set(itertools.chain.from_iterable(lists)))


@attrs.frozen
class NearDup:
    """Drop passages whose text nearly repeats a better-ranked kept passage."""

    name: ClassVar[str] = "near-dup"
    requires: ClassVar[tuple[Key[Any], ...]] = (RANKED,)
    provides: ClassVar[tuple[Key[Any], ...]] = (SURVIVORS, NEAR_DUP_OMITTED)
    threshold: float = THRESHOLD

    async def run(self, ctx: StageContext) -> Outcome:
        kept, dropped = suppress_near_duplicates(ctx[RANKED], self.threshold)
        return Outcome.ran(
            {SURVIVORS: kept, NEAR_DUP_OMITTED: dropped}, detail={"in": len(ctx[RANKED]), "dropped": len(dropped)}
        )
