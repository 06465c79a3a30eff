"""Embedding vectors of a context: the gloss store and the passage store, and their arithmetic.

Vectors are derived data: computed by a refresh (`POST …/embeddings/refresh`), never on write,
identified by the `(model, width)` that produced them (a store made under another model or width
is never served), and kept per row with the hash of the text it was made from, so a refresh
re-embeds only what is missing or stale. Every vector is unit-normalized in f32 when received.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = 0xFFFF_FFFF_FFFF_FFFF


def fnv1a64(text: str) -> int:
    """FNV-1a 64 over the UTF-8 bytes: the staleness hash of an embedded text."""
    h = FNV_OFFSET
    for byte in text.encode("utf-8"):
        h = ((h ^ byte) * FNV_PRIME) & MASK64
    return h


class VectorError(ValueError):
    """A vector that cannot be used (a non-finite norm)."""


def normalize(values: Any) -> np.ndarray:
    """Unit-normalize in f32: norm = f32(sqrt(sum of f64 squares)); a zero vector stays zero."""
    v = np.asarray(values, dtype=np.float32)
    norm = np.float32(math.sqrt(float(np.sum(v.astype(np.float64) ** 2))))
    if not math.isfinite(float(norm)):
        raise VectorError("the provider returned a vector whose norm is not finite")
    if norm > 0:
        v = (v / norm).astype(np.float32)
    return v


def dot_f32(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two unit vectors, accumulated sequentially in f32 (the wire's scores); 0.0 across widths."""
    if a.shape != b.shape:
        return 0.0
    acc = np.float32(0.0)
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        acc = np.float32(acc + np.float32(np.float32(x) * np.float32(y)))
    return float(acc)


def blob_of(row: np.ndarray) -> bytes:
    """A vector as stored: f32 little-endian bytes."""
    return np.asarray(row, dtype="<f4").tobytes()


def vector_of(blob: Any, width: int) -> np.ndarray:
    """A stored vector back (a row of the wrong length is unreadable)."""
    data = bytes(blob)
    if len(data) != 4 * width:
        raise VectorError("a stored vector has the wrong length")
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


@attrs.define
class GlossTable:
    """Unit vectors of canonical names (one table for concepts, one for labels): name -> (gloss hash, row)."""

    hashes: dict[str, int] = attrs.field(factory=dict)
    rows: dict[str, np.ndarray] = attrs.field(factory=dict)


@attrs.define
class GlossStore:
    """The gloss vectors of a context, under one (model, width)."""

    model: str
    width: int
    concepts: GlossTable = attrs.field(factory=GlossTable)
    labels: GlossTable = attrs.field(factory=GlossTable)


@attrs.define(frozen=True)
class RowKey:
    """A passage row: the paragraph it surfaces, the hash of its text, and of its question (None: the text row)."""

    source: str
    paragraph: int
    para_hash: int
    question_hash: int | None


@attrs.define
class PassageStore:
    """The passage vectors of a context in walk order (sources by byte order, paragraphs, text then questions)."""

    model: str
    width: int
    keys: list[RowKey] = attrs.field(factory=list)
    matrix: np.ndarray = attrs.field(factory=lambda: np.zeros((0, 0), dtype=np.float32))

    @property
    def rows(self) -> int:
        return len(self.keys)


@attrs.define
class ContextVectors:
    """What a context holds: either store may be absent (never refreshed, or pruned to nothing)."""

    glosses: GlossStore | None = None
    passages: PassageStore | None = None
