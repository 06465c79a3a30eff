"""The paraphrase tier over the retrieval cache (`TAGURU_SEMANTIC_CACHE_THRESHOLD`), passage search only.

The tier stores no answers, only claims that "query B asks what canonical query A asked": the
canonical's query text, its unit query vector and its full canonical body. Claims live in buckets
keyed by the operation, the path, the target names in order and the body without its `query`. After
an exact miss, a probe takes the bucket's claims whose cosine with the request's query vector is at
least the threshold, best first; the first that passes the guard (below) decides: its rewritten key
(its body, the request's current target fingerprints) is in the exact cache → `hit` (those bytes are
served); absent → `stale` (computed fresh). Claims above the threshold that all fail the guard →
`guarded`; none above it → `miss`. A fresh answer that gets cached registers its query as its
cluster's canonical, replacing a claim that would itself match, else opening a cluster. At most 1024
claims, least recently used out.

The guard compares two raw queries after NFKC folding (U+2019 read as `'`); they agree only if their
negations, their numbers and their entity-ish tokens are the same multisets.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, OrderedDict
from typing import Any

import attrs
import numpy as np
from aiohttp import web

MAX_CLAIMS = 1024
NEGATION_WORDS = frozenset({"no", "not", "never", "none", "neither", "nor", "without", "cannot", "non"})
NEGATION_MARKS = ("n't", "ない", "ません", "なかった", "せず", "不", "無")
OUTCOMES = ("hit", "stale", "guarded", "miss")


def fold(text: str) -> str:
    """NFKC, with the right single quotation mark read as an apostrophe."""
    return unicodedata.normalize("NFKC", text).replace("\u2019", "'")


def tokens(text: str) -> list[str]:
    """Maximal runs of alphanumeric characters."""
    out: list[str] = []
    run: list[str] = []
    for ch in text:
        if ch.isalnum():
            run.append(ch)
        elif run:
            out.append("".join(run))
            run = []
    if run:
        out.append("".join(run))
    return out


def negations(text: str) -> Counter[str]:
    """Whole negation words (lowercased) and negation marks (substrings), with their counts."""
    lowered = text.lower()
    found: Counter[str] = Counter(t for t in tokens(lowered) if t in NEGATION_WORDS)
    for mark in NEGATION_MARKS:
        count = lowered.count(mark)
        if count:
            found[mark] += count
    return found


def numbers(text: str) -> list[str]:
    """The maximal runs of numeric characters, sorted (`01` and `1` differ)."""
    runs: list[str] = []
    run: list[str] = []
    for ch in text:
        if ch.isnumeric():
            run.append(ch)
        elif run:
            runs.append("".join(run))
            run = []
    if run:
        runs.append("".join(run))
    return sorted(runs)


def entities(text: str) -> list[str]:
    """Tokens holding an uppercase character, lowercased and sorted; the first token is exempt unless it is
    all uppercase and at least 2 characters long (a sentence's capital is not a name)."""
    found = []
    for i, token in enumerate(tokens(text)):
        if not any(ch.isupper() for ch in token):
            continue
        if i == 0 and not (token.isupper() and len(token) >= 2):
            continue
        found.append(token.lower())
    return sorted(found)


def guard(a: str, b: str) -> bool:
    """Whether two queries may share an answer: the same negations, numbers and entity-ish tokens."""
    fa, fb = fold(a), fold(b)
    return negations(fa) == negations(fb) and numbers(fa) == numbers(fb) and entities(fa) == entities(fb)


@attrs.define
class Claim:
    """A canonical query of a cluster: its text, unit vector and full canonical body."""

    query: str
    vector: np.ndarray
    params: bytes


@attrs.frozen
class Probe:
    """A probe's outcome and, for `hit`/`stale`, the claim that decided and its similarity."""

    outcome: str
    claim: Claim | None = None
    similarity: float = 0.0


class SemanticCache:
    """Claims by bucket, at most `MAX_CLAIMS` in all, least recently used out."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.claims: OrderedDict[tuple[Any, str], Claim] = OrderedDict()  # (bucket, query) → claim, LRU order
        self.buckets: dict[Any, dict[str, Claim]] = {}

    def __len__(self) -> int:
        return len(self.claims)

    def _above(self, bucket: Any, vector: np.ndarray) -> list[tuple[float, Claim]]:
        found = []
        for claim in self.buckets.get(bucket, {}).values():
            if len(claim.vector) != len(vector):
                continue
            similarity = float(np.dot(claim.vector, vector))
            if similarity >= self.threshold:
                found.append((similarity, claim))
        found.sort(key=lambda pair: -pair[0])
        return found

    def probe(self, bucket: Any, query: str, vector: np.ndarray) -> Probe:
        """The claim that decides for `query` (`hit` or `stale` is the caller's to tell), `guarded` or `miss`."""
        above = self._above(bucket, vector)
        for similarity, claim in above:
            if guard(query, claim.query):
                self.claims.move_to_end((bucket, claim.query))
                return Probe("candidate", claim, similarity)
        return Probe("guarded" if above else "miss")

    def register(self, bucket: Any, query: str, vector: np.ndarray, params: bytes) -> None:
        """`query` becomes its cluster's canonical: it replaces a claim that would match it, else opens one."""
        for _similarity, claim in self._above(bucket, vector):
            if guard(query, claim.query):
                self._drop(bucket, claim.query)
                break
        self._drop(bucket, query)
        claim = Claim(query, vector, params)
        self.buckets.setdefault(bucket, {})[query] = claim
        self.claims[(bucket, query)] = claim
        while len(self.claims) > MAX_CLAIMS:
            (old_bucket, old_query), _claim = self.claims.popitem(last=False)
            self._forget(old_bucket, old_query)

    def _drop(self, bucket: Any, query: str) -> None:
        if self.claims.pop((bucket, query), None) is not None:
            self._forget(bucket, query)

    def _forget(self, bucket: Any, query: str) -> None:
        members = self.buckets.get(bucket)
        if members is not None:
            members.pop(query, None)
            if not members:
                del self.buckets[bucket]


SEMANTIC_CACHE_KEY: web.AppKey[SemanticCache] = web.AppKey("semantic_cache", SemanticCache)
