"""The vector lane of passage search: which of the seven states it is in, the exact sweep, and RRF fusion.

Given the query's vector (embedded by the caller, which owns the provider and the cue cache),
`classify` decides whether the lane runs or why not (the plan's reason strings), `sweep` scores
every stored paragraph row against it, and `fuse` merges the BM25 list with the swept rows:
fused `f32(1/(60+rank_bm25)) + f32(1/(60+rank_vector))` when the lane ran, raw BM25 otherwise.

The sweep is exact. Scores are the f32 dot product accumulated sequentially, as the wire
requires; to stay fast over many rows, a BLAS product ranks every row first and only rows within
a rounding margin of the cut (the pool's last score, or the floor) are rescored sequentially —
the margin is far wider than the difference between the two sums, so the kept set, its order and
every reported score are those of the sequential sweep.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from taguru_server.store.index.vectors import PassageStore, fnv1a64
from taguru_server.store.model.context import Context

F32 = np.float32
RRF_K = F32(60.0)
MARGIN = 1e-4  # ≫ the gap between a BLAS f32 dot and the sequential f32 sum of unit vectors (width ≤ 4096)

QUERY_FAILED = "the query embedding failed: {message}"
PASSAGES_OFF = "passage embedding is off (TAGURU_EMBED_PASSAGES)"
NO_PROVIDER = "no embedding provider is configured"
NO_VECTORS = "no paragraph vectors exist yet — the embedding refresh has not covered this context"
MODEL_CHANGED = (
    "stored vectors belong to model '{stored}' but the provider is '{current}' — they are never served, "
    "and the next refresh re-embeds"
)
WIDTH_CHANGED = (
    "stored vectors are {stored}-dimensional but the model now answers {current} (a dimensions setting changed "
    "behind its name) — they are never served, and the next refresh re-embeds"
)


@attrs.frozen
class VectorQuery:
    """What the caller learned before the search: the provider's state and the query's vector (or its failure)."""

    provider_model: str | None = None  # None: no provider configured
    passages_enabled: bool = False
    vector: np.ndarray | None = None
    failure: str | None = None  # the provider's fixed failure message when embedding the query failed
    floor: float = 0.35  # the f32 floor after the request / context / server default


@attrs.frozen
class LaneState:
    """The vector lane's plan entry and its tracing code."""

    ran: bool
    code: str
    reason: str | None = None
    floor: float | None = None


def classify(ctx: Context, q: VectorQuery) -> LaneState:
    """Rows a–g of the lane's states, the first that matches."""
    if q.failure is not None:
        return LaneState(False, "query_embedding_failed", QUERY_FAILED.format(message=q.failure))
    if q.provider_model is not None and not q.passages_enabled:
        return LaneState(False, "off", PASSAGES_OFF)
    if q.provider_model is None:
        return LaneState(False, "off", NO_PROVIDER)
    store = ctx.vectors.passages
    if store is None or store.rows == 0:
        return LaneState(False, "no_vectors", NO_VECTORS)
    if store.model != q.provider_model:
        return LaneState(False, "model_changed", MODEL_CHANGED.format(stored=store.model, current=q.provider_model))
    assert q.vector is not None
    if store.width != len(q.vector):
        return LaneState(False, "width_changed", WIDTH_CHANGED.format(stored=store.width, current=len(q.vector)))
    return LaneState(True, "ran", floor=float(F32(q.floor)))


def sequential_dot(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per row, the f32 dot product accumulated component by component (the wire's arithmetic)."""
    acc = np.zeros(matrix.shape[0], dtype=F32)
    for j in range(matrix.shape[1]):
        acc += matrix[:, j] * q[j]  # float32 in, float32 out: one rounding per product and per addition
    return acc


@attrs.frozen
class VectorRow:
    """A swept row: the paragraph it surfaces, its cosine, and the hash of the text it was made from."""

    source: str
    paragraph: int
    score: float
    para_hash: int


def sweep(store: PassageStore, q: np.ndarray, pool: int, floor: float, allowed: set[str] | None) -> list[VectorRow]:
    """The best `pool` rows by cosine (desc, then source, paragraph, walk order), those ≥ the floor."""
    if store.rows == 0 or pool <= 0:
        return []
    keys = store.keys
    if allowed is None:
        rows = np.arange(store.rows)
        matrix = store.matrix  # no copy: the whole store is eligible
    else:
        rows = np.fromiter((i for i, k in enumerate(keys) if k.source in allowed), dtype=np.int64)
        if rows.size == 0:
            return []
        matrix = store.matrix[rows]
    qf = np.asarray(q, dtype=F32)
    rough = matrix @ qf
    cut = float(F32(floor)) - MARGIN
    if rows.size > pool:
        kth = np.partition(rough, rows.size - pool)[rows.size - pool]
        cut = max(cut, float(kth) - MARGIN)
    near = np.nonzero(rough >= cut)[0]
    exact = sequential_dot(matrix[near], qf)
    f_floor = F32(floor)
    picked = [
        (float(s), keys[int(rows[i])].source, keys[int(rows[i])].paragraph, int(rows[i]))
        for i, s in zip(near.tolist(), exact.tolist(), strict=True)
        if F32(s) >= f_floor
    ]
    picked.sort(key=lambda t: (-t[0], t[1], t[2], t[3]))  # str order is code-point, i.e. UTF-8 byte, order
    return [VectorRow(src, par, score, keys[walk].para_hash) for score, src, par, walk in picked[:pool]]


@attrs.frozen
class FusedHit:
    """A search hit with each lane's own rank and raw score (None when that lane has no current evidence)."""

    source: str
    paragraph: int
    score: float
    text: str
    bm25: tuple[int, float] | None
    vector: tuple[int, float] | None


def _rrf(rank: int) -> Any:
    return F32(1.0) / (RRF_K + F32(rank))


def fuse(
    ctx: Context, bm25_list: list[tuple[str, int, float]], vec_list: list[VectorRow], ran: bool, limit: int
) -> list[FusedHit]:
    """Merge the lanes: first arrival per paragraph wins; stale vector rows lose their evidence."""
    acc: dict[tuple[str, int], list[Any]] = {}
    for i, (source, paragraph, score) in enumerate(bm25_list, start=1):
        entry = acc.setdefault((source, paragraph), [None, None])
        if entry[0] is None:
            entry[0] = (i, score)
    for i, row in enumerate(vec_list, start=1):
        entry = acc.setdefault((row.source, row.paragraph), [None, None])
        if entry[1] is None:
            entry[1] = (i, row.score, row.para_hash)
    hits: list[FusedHit] = []
    for (source, paragraph), (bm25, vector) in acc.items():
        sid = ctx.find_source(source)
        passage = ctx.passages.get(sid) if sid is not None else None
        if passage is None or paragraph >= len(passage.paragraphs):
            continue
        text = passage.paragraphs[paragraph]
        if vector is not None and vector[2] != fnv1a64(text):
            vector = None  # made from text the paragraph no longer holds
        if bm25 is None and vector is None:
            continue
        if ran:
            score = float((_rrf(bm25[0]) if bm25 else F32(0.0)) + (_rrf(vector[0]) if vector else F32(0.0)))
        else:
            assert bm25 is not None
            score = bm25[1]
        hits.append(FusedHit(source, paragraph, score, text, bm25, None if vector is None else vector[:2]))
    hits.sort(key=lambda h: (-h.score, h.source, h.paragraph))
    return hits[:limit]
