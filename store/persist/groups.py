"""Context groups: named bundles of contexts that may nest child groups (a shallow DAG, never cyclic).

The pure rules every writer shares (routes, `taguru_group` import records, the store's sweeps):
the record, the closure of a set of groups, the nesting walk that decides which group an error
names, and the fingerprint over a group's transitive members. Groups live in the store beside
the contexts (`RowStore.write_groups`); the registry holds them in memory.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Mapping

import attrs

from taguru_server.store.wire import dumps_bytes

MAX_GROUP_MEMBERS = 1000  # member contexts, and child groups, per group
MAX_GROUP_DEPTH = 3  # groups stacked in one chain
MAX_GROUP_NAME_BYTES = 64
FNV_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


@attrs.frozen
class GroupRecord:
    """One group's truth: its description, member contexts and child groups (sets, kept sorted)."""

    description: str = ""
    contexts: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    @classmethod
    def of(cls, description: str, contexts: Iterable[str], groups: Iterable[str]) -> GroupRecord:
        return cls(description, tuple(sorted(set(contexts))), tuple(sorted(set(groups))))

    def to_json(self) -> str:
        return json.dumps(
            {"description": self.description, "contexts": list(self.contexts), "groups": list(self.groups)},
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> GroupRecord:
        body = json.loads(text)
        return cls.of(body.get("description", ""), body.get("contexts", ()), body.get("groups", ()))


Groups = Mapping[str, GroupRecord]


class NestingError(Exception):
    """A prospective map of groups that loops (`cycle`) or stacks too many groups (`too_deep`)."""

    def __init__(self, kind: str, group: str) -> None:
        super().__init__(kind, group)
        self.kind = kind
        self.group = group


def closure(groups: Groups, names: Iterable[str]) -> set[str]:
    """Every context reachable from the named groups (names that are not groups contribute nothing)."""
    out: set[str] = set()
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        record = groups.get(name)
        if record is None:
            continue
        out.update(record.contexts)
        stack.extend(record.groups)
    return out


def visible_groups(groups: Groups, allows: Callable[[str], bool]) -> dict[str, GroupRecord]:
    """The groups wholly inside a grant: at least one transitive member context, and every one allowed.

    Each record's child list keeps only the visible children (a child of a visible group reaches only
    allowed contexts, so a hidden child is one with no member context at all). This is what a key with a
    context list sees under strict tenancy; a group it does not see is, to it, a group that does not exist.
    """
    reach: dict[str, frozenset[str]] = {}

    def members(name: str, trail: tuple[str, ...]) -> frozenset[str]:
        if name in reach:
            return reach[name]
        record = groups.get(name)
        if record is None or name in trail:  # a dangling or looping child contributes nothing
            return frozenset()
        out = set(record.contexts)
        for child in record.groups:
            out.update(members(child, (*trail, name)))
        reach[name] = frozenset(out)
        return reach[name]

    shown = {name for name in groups if (m := members(name, ())) and all(allows(c) for c in m)}
    return {
        name: attrs.evolve(groups[name], groups=tuple(g for g in groups[name].groups if g in shown))
        for name in sorted(shown)
    }


def validate_nesting(groups: Groups) -> None:
    """Walk every group in name order, children in name order; the first violation met is raised."""
    settled: dict[str, int] = {}

    def depth(name: str, visiting: list[str]) -> int:
        if name in settled:
            return settled[name]
        record = groups.get(name)
        if record is None:
            return 0  # a dangling child: depth 0, not an error here
        if name in visiting:
            raise NestingError("cycle", name)
        if len(visiting) >= MAX_GROUP_DEPTH:
            raise NestingError("too_deep", visiting[0])
        visiting.append(name)
        below = 0
        for child in sorted(record.groups):
            below = max(below, depth(child, visiting))
        visiting.pop()
        d = below + 1
        if d > MAX_GROUP_DEPTH:
            raise NestingError("too_deep", visiting[0] if visiting else name)
        settled[name] = d
        return d

    for name in sorted(groups):
        depth(name, [])


def _fold(d: int, data: bytes) -> int:
    for byte in data:
        d = ((d ^ byte) * FNV_PRIME) & _MASK
    return d


def fingerprint(
    groups: Groups,
    name: str,
    allows: Callable[[str], bool],
    revision: Callable[[str], tuple[int, int, int] | None],
) -> str:
    """FNV-1a 64 over the group's visible transitive members, in name order, with their revisions."""
    d = FNV_BASIS
    for ctx in sorted(closure(groups, [name])):
        if not allows(ctx):
            continue
        rev = revision(ctx)
        if rev is None:
            continue
        raw = ctx.encode("utf-8", "surrogatepass")
        d = _fold(d, struct.pack("<Q", len(raw)))
        d = _fold(d, raw)
        for v in rev:
            d = _fold(d, struct.pack("<Q", v & _MASK))
    return f"{d:016x}"


def without_context(groups: Groups, context: str) -> dict[str, GroupRecord]:
    """The groups whose members change when `context` is deleted, with it swept out."""
    return {
        name: attrs.evolve(r, contexts=tuple(c for c in r.contexts if c != context))
        for name, r in groups.items()
        if context in r.contexts
    }


def context_renamed(groups: Groups, old: str, new: str) -> dict[str, GroupRecord]:
    """The groups naming `old` as a member, rewritten to name `new`."""
    return {
        name: GroupRecord.of(r.description, [new if c == old else c for c in r.contexts], r.groups)
        for name, r in groups.items()
        if old in r.contexts
    }


def without_child(groups: Groups, child: str) -> dict[str, GroupRecord]:
    """The other groups naming `child`, with it swept out (a deleted group)."""
    return {
        name: attrs.evolve(r, groups=tuple(g for g in r.groups if g != child))
        for name, r in groups.items()
        if child in r.groups and name != child
    }


def child_renamed(groups: Groups, old: str, new: str) -> dict[str, GroupRecord]:
    """The other groups naming `old` as a child, rewritten to name `new`."""
    return {
        name: GroupRecord.of(r.description, r.contexts, [new if g == old else g for g in r.groups])
        for name, r in groups.items()
        if old in r.groups and name != old
    }


def export_line(name: str, record: GroupRecord, contexts: Iterable[str] | None = None) -> bytes:
    """A group's export: one `taguru_group` line (empty fields omitted), newline-terminated.

    `contexts` narrows the members shown (a scoped key's visible slice); child names stay whole.
    Importing the line restores the group (`store/transfer/group_import.py`), so an offline full export can
    write one such file per group beside the contexts' streams.
    """
    members = list(record.contexts if contexts is None else contexts)
    line: dict[str, object] = {"taguru_group": 1, "name": name}
    if record.description:
        line["description"] = record.description
    if members:
        line["contexts"] = members
    if record.groups:
        line["groups"] = list(record.groups)
    return dumps_bytes(line) + b"\n"
