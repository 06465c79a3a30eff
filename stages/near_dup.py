"""The near-dup stage: drop passages whose text nearly repeats a better-ranked kept passage (§7.1)."""

from __future__ import annotations

from typing import Any, ClassVar

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


def suppress_near_duplicates(
    ranked: tuple[Fused, ...], threshold: float = THRESHOLD
) -> tuple[tuple[Fused, ...], tuple[Omission, ...]]:
    """Keep the first of each near-duplicate family in fused order; name what each dropped one repeats.

    Bigram sets are held as integer bitsets over this request's bigram vocabulary, so each
    pairwise |A∩B| is one AND and a popcount — the same counts, hence the same Dice values.
    """
    kept: list[Fused] = []
    kept_passages: list[tuple[Fused, int, int]] = []  # (candidate, bitset, set size)
    vocabulary: dict[str, int] = {}
    dropped: list[Omission] = []
    for fused in ranked:
        if fused.candidate.kind != "passage":
            kept.append(fused)
            continue
        grams = bigram_set(fused.candidate.text)
        bits = 0
        for g in grams:
            bits |= 1 << vocabulary.setdefault(g, len(vocabulary))
        size = len(grams)
        match = None
        for other, other_bits, other_size in kept_passages:
            total = size + other_size
            if total == 0:
                match = other
                break
            if 2 * min(size, other_size) / total < threshold:
                continue  # Dice is at most 2·min/(|a|+|b|): the sizes alone rule a match out
            if 2 * (bits & other_bits).bit_count() / total >= threshold:
                match = other
                break
        if match is None:
            kept.append(fused)
            kept_passages.append((fused, bits, size))
        else:
            dropped.append(Omission(fused.candidate_id, "passage", "duplicate_passage", match.candidate_id))
    return tuple(kept), tuple(dropped)


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
