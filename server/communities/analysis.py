"""The communities analysis (`louvain-cc/1`, docs/communities.md): the detected levels assembled into
communities with their members, top associations and fingerprints.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from taguru_server.server.communities.louvain import (
    Check,
    GraphSnapshot,
    deadline_check,
    detect_levels,
    leaf_graph,
    safe_total,
    saturated,
)

ALGORITHM = "louvain-cc/1"
TOP_ASSOCIATIONS = 24
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF


# ----- fingerprints ------------------------------------------------------------------


def fnv1a(data: bytes, h: int = FNV_OFFSET) -> int:
    """Fold bytes into an FNV-1a 64 digest."""
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & _MASK
    return h


_PY_NS_PER_BYTE = 150  # rough costs that pick which streams fold in numpy lockstep
_STEP_NS = 8000


def fnv1a_many(streams: Sequence[bytes]) -> list[int]:
    """FNV-1a 64 of many byte strings; all but the longest few are folded in lockstep with numpy."""
    out = [0] * len(streams)
    order = sorted(range(len(streams)), key=lambda i: -len(streams[i]))
    # fold the k longest byte by byte and the rest in max(len) numpy steps: pick the cheapest k
    best_k, best_cost, folded = 0, None, 0
    for k, i in enumerate(order):
        cost = _STEP_NS * len(streams[i]) + _PY_NS_PER_BYTE * folded
        if best_cost is None or cost < best_cost:
            best_k, best_cost = k, cost
        folded += len(streams[i])
    for i in order[:best_k]:
        out[i] = fnv1a(streams[i])
    short = order[best_k:]
    if not short or not streams[short[0]]:
        for i in short:
            out[i] = FNV_OFFSET
        return out
    lengths = np.fromiter((len(streams[i]) for i in short), dtype=np.int64, count=len(short))
    flat = np.frombuffer(b"".join(streams[i] for i in short), dtype=np.uint8)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    digests = np.full(len(short), FNV_OFFSET, dtype=np.uint64)
    prime = np.uint64(FNV_PRIME)
    # lengths descend, so the streams still folding at step t are a prefix
    steps = np.arange(int(lengths[0]), dtype=np.int64)
    active_at = (len(short) - np.searchsorted(lengths[::-1], steps, "right")).tolist()
    for t, active in enumerate(active_at):
        part = digests[:active]
        np.multiply(np.bitwise_xor(part, flat[offsets[:active] + t]), prime, out=part)
    for i, d in zip(short, digests.tolist(), strict=False):
        out[i] = int(d)
    return out


def _u64(v: int) -> bytes:
    return (v & _MASK).to_bytes(8, "little")


def _named(name: str) -> bytes:
    raw = name.encode("utf-8", "surrogatepass")
    return _u64(len(raw)) + raw


_SUM_COUNT = struct.Struct("<dQ")


def parent_fingerprint(child_digests: Sequence[int]) -> int:
    """The child count, then each child digest in ascending numeric order."""
    ordered = sorted(child_digests)
    return fnv1a(_u64(len(ordered)) + b"".join(_u64(d) for d in ordered))


def hex16(digest: int) -> str:
    return f"{digest:016x}"


# ----- the analysis --------------------------------------------------------------------


def analyze(snap: GraphSnapshot, deadline: float | None = None) -> dict[str, Any]:
    """The full analysis: `{algorithm, concept_count, edge_count, levels, communities}`, leaves first."""
    check = deadline_check(deadline)
    nodes, g = leaf_graph(snap, check)
    edge_count = sum(len(nb) for nb in g.neighbors) // 2
    if not nodes:
        return {"algorithm": ALGORITHM, "concept_count": 0, "edge_count": 0, "levels": 0, "communities": []}
    levels = detect_levels(g, check)
    communities = _assemble(snap, nodes, levels, check)
    return {
        "algorithm": ALGORITHM,
        "concept_count": len(nodes),
        "edge_count": edge_count,
        "levels": len(levels),
        "communities": communities,
    }


def _assemble(snap: GraphSnapshot, nodes: list[int], levels: list[list[int]], check: Check) -> list[dict[str, Any]]:
    """Every community's record, leaves first, then each higher level in order."""
    per_level = _levels_per_node(levels)
    leaf_count = _community_count(per_level[0])
    edges = _LeafEdges.of(snap, nodes, per_level[0])
    check()
    strength = _member_strength(edges, len(snap.concepts))
    concept_rank, label_rank = _name_ranks(snap, nodes)
    check()
    order = _LeafOrders.of(edges, leaf_count, strength, concept_rank, label_rank)
    check()
    out, streams = _leaf_communities(snap, nodes, levels, edges, order, strength, check)
    check()
    fingerprints = fnv1a_many(streams)
    for community, digest in zip(out, fingerprints, strict=False):
        community["fingerprint"] = hex16(digest)
    out.extend(_upper_communities(levels, per_level, fingerprints, check))
    return out


def _levels_per_node(levels: list[list[int]]) -> list[list[int]]:
    """For each level, every leaf-graph node's community at that level."""
    per_level = [list(levels[0])]
    for assignment in levels[1:]:
        prev = per_level[-1]
        per_level.append([assignment[c] for c in prev])
    return per_level


def _community_count(assignment: list[int]) -> int:
    """How many communities a dense assignment names."""
    return max(assignment) + 1 if assignment else 0


@attrs.frozen
class _LeafEdges:
    """The nodes with their leaf, and the live edges whose both ends share one leaf (`ind_*`)."""

    node_arr: np.ndarray
    node_leaf: np.ndarray
    induced: np.ndarray
    ind_home: np.ndarray
    ind_s: np.ndarray
    ind_l: np.ndarray
    ind_o: np.ndarray
    ind_sum: np.ndarray
    ind_cnt: np.ndarray
    ind_mag: np.ndarray

    @classmethod
    def of(cls, snap: GraphSnapshot, nodes: list[int], leaf_assignment: list[int]) -> _LeafEdges:
        """Select the edges induced by each leaf community."""
        node_arr = np.asarray(nodes, dtype=np.int64)
        node_leaf = np.asarray(leaf_assignment, dtype=np.int64)
        leaf_of = np.full(len(snap.concepts), -1, dtype=np.int64)
        leaf_of[node_arr] = node_leaf
        e_s = np.asarray(snap.e_s, dtype=np.int64)
        e_o = np.asarray(snap.e_o, dtype=np.int64)
        e_cnt = np.asarray(snap.e_cnt, dtype=np.int64)
        home = leaf_of[e_s]
        induced = np.nonzero((e_cnt != 0) & (home >= 0) & (leaf_of[e_o] == home))[0]  # live, both ends in one leaf
        ind_sum = np.asarray(snap.e_sum, dtype=np.float64)[induced]
        return cls(
            node_arr=node_arr,
            node_leaf=node_leaf,
            induced=induced,
            ind_home=home[induced],
            ind_s=e_s[induced],
            ind_l=np.asarray(snap.e_l, dtype=np.int64)[induced],
            ind_o=e_o[induced],
            ind_sum=ind_sum,
            ind_cnt=e_cnt[induced],
            ind_mag=np.abs(ind_sum),
        )


def _member_strength(edges: _LeafEdges, n_concepts: int) -> np.ndarray:
    """Each concept's summed |sum| over the induced edges it is an end of."""
    ind_s, ind_o, ind_mag = edges.ind_s, edges.ind_o, edges.ind_mag
    # Each induced edge's |sum| to its subject, then to its object unless it is a self-loop,
    # accumulated in edge id order (bincount keeps input order within a bin).
    if safe_total(ind_mag):
        events = np.column_stack((ind_s, ind_o)).ravel()
        amounts = np.column_stack((ind_mag, np.where(ind_o != ind_s, ind_mag, 0.0))).ravel()
        strength: np.ndarray = np.bincount(events, weights=amounts, minlength=n_concepts)
        return strength
    strength = np.zeros(n_concepts, dtype=np.float64)
    for s, o, mag in zip(ind_s.tolist(), ind_o.tolist(), ind_mag.tolist(), strict=False):
        strength[s] = saturated(float(strength[s]) + mag)
        if o != s:
            strength[o] = saturated(float(strength[o]) + mag)
    return strength


def _name_ranks(snap: GraphSnapshot, nodes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Name-order ranks of the node concepts and of every label."""
    # Python str order is code-point order, i.e. UTF-8 byte order.
    concepts, labels = snap.concepts, snap.labels
    concept_rank = np.full(len(concepts), -1, dtype=np.int64)
    concept_rank[np.asarray(sorted(nodes, key=concepts.__getitem__), dtype=np.int64)] = np.arange(len(nodes))
    label_rank = np.zeros(max(len(labels), 1), dtype=np.int64)
    if labels:
        label_rank[np.asarray(sorted(range(len(labels)), key=labels.__getitem__), dtype=np.int64)] = np.arange(
            len(labels)
        )
    return concept_rank, label_rank


@attrs.frozen
class _LeafOrders:
    """Per leaf: members by strength, members by name, and induced-edge positions in two orders."""

    members: list[list[int]]
    names: list[list[int]]
    fingerprint_edges: list[list[int]]
    top_edges: list[list[int]]

    @classmethod
    def of(
        cls,
        edges: _LeafEdges,
        leaf_count: int,
        strength: np.ndarray,
        concept_rank: np.ndarray,
        label_rank: np.ndarray,
    ) -> _LeafOrders:
        """Sort members and induced edges within each leaf."""

        def grouped(order: np.ndarray, keys: np.ndarray, values: np.ndarray) -> list[list[int]]:
            """`values[order]` split by the (sorted) leaf in `keys[order]`."""
            flat = values[order].tolist()
            bounds = np.concatenate(([0], np.cumsum(np.bincount(keys[order], minlength=leaf_count)))).tolist()
            return [flat[bounds[c] : bounds[c + 1]] for c in range(leaf_count)]

        node_arr, node_leaf, ind_home = edges.node_arr, edges.node_leaf, edges.ind_home
        member_order = np.lexsort((concept_rank[node_arr], -strength[node_arr], node_leaf))
        name_order = np.lexsort((concept_rank[node_arr], node_leaf))
        positions = np.arange(len(edges.induced))
        fp_order = np.lexsort((concept_rank[edges.ind_o], label_rank[edges.ind_l], concept_rank[edges.ind_s], ind_home))
        top_order = np.lexsort((edges.induced, -edges.ind_mag, ind_home))
        return cls(
            members=grouped(member_order, node_leaf, node_arr),
            names=grouped(name_order, node_leaf, node_arr),
            fingerprint_edges=grouped(fp_order, ind_home, positions),
            top_edges=grouped(top_order, ind_home, positions),
        )


def _leaf_communities(
    snap: GraphSnapshot,
    nodes: list[int],
    levels: list[list[int]],
    edges: _LeafEdges,
    order: _LeafOrders,
    strength: np.ndarray,
    check: Check,
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The leaf communities (fingerprint still blank) and the byte stream each fingerprint hashes."""
    concepts, labels = snap.concepts, snap.labels
    s_list, l_list, o_list = edges.ind_s.tolist(), edges.ind_l.tolist(), edges.ind_o.tolist()
    sum_list, cnt_list = edges.ind_sum.tolist(), edges.ind_cnt.tolist()
    mag_list = edges.ind_mag.tolist()
    strength_list = strength.tolist()
    named_concept = {c: _named(concepts[c]) for c in nodes}
    named_label: dict[int, bytes] = {}
    has_parent = len(levels) > 1

    streams: list[bytes] = []
    out: list[dict[str, Any]] = []
    for cid in range(len(order.members)):
        if not cid & 255:
            check()
        parts = [named_concept[c] for c in order.names[cid]]
        for p in order.fingerprint_edges[cid]:
            lab = l_list[p]
            nl = named_label.get(lab)
            if nl is None:
                nl = named_label[lab] = _named(labels[lab])
            total = sum_list[p]
            if total == 0.0:
                total = 0.0  # -0.0 and 0.0 are one netted edge
            parts.append(
                named_concept[s_list[p]] + nl + named_concept[o_list[p]] + _SUM_COUNT.pack(total, cnt_list[p] & _MASK)
            )
        streams.append(b"".join(parts))
        community: dict[str, Any] = {"id": f"L0-{cid}", "level": 0}
        if has_parent:
            community["parent"] = f"L1-{levels[1][cid]}"
        community["fingerprint"] = ""
        community["concept_count"] = len(order.members[cid])
        community["members"] = [{"name": concepts[c], "strength": strength_list[c]} for c in order.members[cid]]
        associations: list[dict[str, Any]] = []
        for p in order.top_edges[cid]:
            if len(associations) == TOP_ASSOCIATIONS or mag_list[p] == 0.0:
                break
            associations.append(
                {
                    "subject": concepts[s_list[p]],
                    "label": labels[l_list[p]],
                    "object": concepts[o_list[p]],
                    "weight": sum_list[p] / cnt_list[p],
                    "count": cnt_list[p],
                }
            )
        if associations:
            community["top_associations"] = associations
        out.append(community)
    return out, streams


def _upper_communities(
    levels: list[list[int]], per_level: list[list[int]], leaf_fingerprints: list[int], check: Check
) -> list[dict[str, Any]]:
    """The communities of every level above the leaves, each fingerprinted from its children."""
    n_levels = len(levels)
    out: list[dict[str, Any]] = []
    fingerprints = leaf_fingerprints
    for level in range(1, n_levels):
        check()
        count = _community_count(per_level[level])
        below = _community_count(per_level[level - 1])
        assignment = levels[level]
        children: list[list[int]] = [[] for _ in range(count)]
        for child in range(below):
            children[assignment[child]].append(child)
        concept_counts = [0] * count
        for c in per_level[level]:
            concept_counts[c] += 1
        level_fingerprints = []
        for cid, kids in enumerate(children):
            digest = parent_fingerprint([fingerprints[k] for k in kids])
            level_fingerprints.append(digest)
            community: dict[str, Any] = {"id": f"L{level}-{cid}", "level": level}
            if level + 1 < n_levels:
                community["parent"] = f"L{level + 1}-{levels[level + 1][cid]}"
            community["fingerprint"] = hex16(digest)
            community["concept_count"] = concept_counts[cid]
            if kids:
                community["children"] = [f"L{level - 1}-{k}" for k in kids]
            out.append(community)
        fingerprints = level_fingerprints
    return out
