"""Compressed sparse rows: the grouping the packed columns of a context share (adjacency, attribution
records, the source → edges index)."""

from __future__ import annotations

import numpy as np


def grouped(keys: np.ndarray, ids: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of `ids` grouped by `keys` (0 ≤ key < n_groups), each group in the order `ids` holds them."""
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n_groups), out=ptr[1:])
    return ptr, np.asarray(ids)[order].astype(np.int32)


def owners(ptr: np.ndarray) -> np.ndarray:
    """The group of every position of a CSR with pointers `ptr` (group g owns `ptr[g]:ptr[g + 1]`)."""
    return np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
