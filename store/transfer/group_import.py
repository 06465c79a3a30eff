"""`taguru_group` records in an import stream: parsing one line, and restoring the stream's groups as a set.

A group record replaces its whole group. The records of one stream apply together, after every
batch of the stream has landed (so their member contexts may come from the same stream), and
are validated whole before any is written: every member registered, every child registered or
riding the stream, and the resulting nesting sound. Groups the stream does not name are untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from taguru_server.store.errors import ApiError, Code
from taguru_server.store.persist.groups import (
    MAX_GROUP_MEMBERS,
    MAX_GROUP_NAME_BYTES,
    GroupRecord,
    Groups,
    NestingError,
    closure,
    validate_nesting,
)
from taguru_server.store.persist.registry import Registry
from taguru_server.store.text import name_problem, utf8_len
from taguru_server.store.wire import describe_value

MAX_DESCRIPTION_BYTES = 4096
_FIELDS = ("taguru_group", "name", "description", "contexts", "groups")


class GroupParseError(Exception):
    """A group record line that cannot be read; the message is the wire text."""


@attrs.frozen
class GroupLine:
    """One parsed `taguru_group` record and the line it sat on."""

    line: int
    name: str
    record: GroupRecord


def _not_a_record(n: int, detail: str) -> GroupParseError:
    return GroupParseError(f"line {n}: not a group record: {detail}")


def _shape(n: int, rec: dict[str, Any]) -> None:
    """The closed shape: known keys, the right types, `taguru_group` and `name` present."""
    unknown = [k for k in rec if k not in _FIELDS]
    if unknown:
        expected = ", ".join(f"`{f}`" for f in _FIELDS)
        raise _not_a_record(n, f"unknown field `{unknown[0]}`, expected one of {expected}")
    version = rec["taguru_group"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise _not_a_record(n, f"invalid type: {describe_value(version)}, expected u32")
    for key in ("name", "description"):
        if key in rec and not isinstance(rec[key], str):
            raise _not_a_record(n, f"invalid type: {describe_value(rec[key])}, expected a string")
    for key in ("contexts", "groups"):
        value = rec.get(key, [])
        if not isinstance(value, list):
            raise _not_a_record(n, f"invalid type: {describe_value(value)}, expected a sequence")
        for item in value:
            if not isinstance(item, str):
                raise _not_a_record(n, f"invalid type: {describe_value(item)}, expected a string")
    if "name" not in rec:
        raise _not_a_record(n, "missing field `name`")


def _group_name(n: int, label: str, value: str) -> None:
    """A group's name, or a member's: not empty, within the name cap."""
    problem = name_problem(label, value, MAX_GROUP_NAME_BYTES)
    if problem is not None:
        raise GroupParseError(f"line {n}: {problem}")


def parse_group_line(n: int, rec: dict[str, Any], seen: set[str]) -> GroupLine:
    """Validate one group record (its caps in the documented order); refuse a group stated twice."""
    _shape(n, rec)
    version = rec["taguru_group"]
    if version != 1:
        raise GroupParseError(f"line {n}: taguru_group {version} is not a version this taguru reads (it reads 1)")
    name = rec["name"]
    _group_name(n, "name", name)
    description = rec.get("description", "")
    size = utf8_len(description)
    if size > MAX_DESCRIPTION_BYTES:
        raise GroupParseError(f"line {n}: description of {size} bytes exceeds the 4096-byte cap")
    sets: dict[str, set[str]] = {}
    for key in ("contexts", "groups"):
        for member in rec.get(key, []):
            _group_name(n, key, member)
        sets[key] = set(rec.get(key, []))
        if len(sets[key]) > MAX_GROUP_MEMBERS:
            raise GroupParseError(
                f"line {n}: {len(sets[key])} {key} where a group holds at most 1000 — split into nested child groups"
            )
    if name in seen:
        raise GroupParseError(
            f"line {n}: group '{name}' is already stated by an earlier record of this stream — one record owns "
            "one group's truth"
        )
    seen.add(name)
    return GroupLine(n, name, GroupRecord.of(description, sets["contexts"], sets["groups"]))


def involved_contexts(standing: Groups, lines: Iterable[GroupLine]) -> set[str]:
    """The contexts a restore touches: the closure of its names over the standing and the prospective groups."""
    records = list(lines)
    names = [g.name for g in records]
    prospective = {**standing, **{g.name: g.record for g in records}}
    return closure(standing, names) | closure(prospective, names)


def _refusal(code: Code, reason: str, batches: int) -> ApiError:
    err = ApiError(
        code,
        f"group records refused with every batch landed ({batches} durable); fixing the stream and re-POSTing it "
        f"whole is exact: {reason}",
        retryable=True,
    )
    _landed(err, batches)
    return err


def _landed(err: ApiError, batches: int) -> None:
    if batches:
        err.integrity = "durable_prefix"
        err.durable_batches = batches
    else:
        err.integrity = "nothing_written"


def _check(
    registry: Registry, lines: list[GroupLine], batches: int, seen: Groups, written: dict[str, GroupRecord]
) -> None:
    """The first refusal of the documented order for the records as written, or nothing.

    `seen` is the map of standing groups a child is looked up in and a nesting refusal may name (the
    store's, or a strict-tenancy key's view of it); the nesting itself is judged over the whole store.
    """
    problem = _membership_problem(registry, lines, seen, written) or _nesting_problem(registry, lines, seen, written)
    if problem is not None:
        raise _refusal(*problem, batches)


def _membership_problem(
    registry: Registry, lines: list[GroupLine], seen: Groups, written: dict[str, GroupRecord]
) -> tuple[Code, str] | None:
    """The first over-full, unknown-member or unknown-child refusal (code and reason), or None."""
    riding = {g.name for g in lines}
    for g in lines:  # a line holds at most 1000 children; the unseen ones it keeps may take the set past that
        if len(written[g.name].groups) > MAX_GROUP_MEMBERS:
            return Code.OVER_LIMIT, (
                f"group '{g.name}' would bundle more than {MAX_GROUP_MEMBERS} child groups; no group was applied "
                "— split into nested child groups"
            )
    for g in lines:
        missing = next((c for c in g.record.contexts if not registry.exists(c)), None)
        if missing is not None:
            return Code.NO_CONTEXT, (
                f"group '{g.name}' names member context '{missing}', which does not exist; no group was applied "
                "(batches of the same stream apply first — import the contexts, then the groups)"
            )
    for g in lines:
        unknown = next((c for c in g.record.groups if c not in seen and c not in riding), None)
        if unknown is not None:
            return Code.NO_GROUP, (
                f"group '{g.name}' names child group '{unknown}', which neither exists nor rides this stream; "
                "no group was applied"
            )
    return None


def _nesting_problem(
    registry: Registry, lines: list[GroupLine], seen: Groups, written: dict[str, GroupRecord]
) -> tuple[Code, str] | None:
    """The cycle or depth refusal of the nesting the records would leave (code and reason), or None."""
    try:
        validate_nesting({**registry.groups, **written})
    except NestingError as err:
        named = err.group in seen or err.group in {g.name for g in lines}
        if err.kind == "cycle":
            where = f" through group '{err.group}'" if named else ""
            return Code.INVALID_ARGUMENT, f"the restored nesting would close a cycle{where}; no group was applied"
        where = f" under group '{err.group}'" if named else ""
        return Code.OVER_LIMIT, f"the restored nesting would stack more than 3 groups{where}; no group was applied"
    return None


def _as_written(registry: Registry, seen: Groups, line: GroupLine) -> GroupRecord:
    """The record a line writes: itself, plus the standing children outside `seen`'s record (kept, unseen)."""
    standing, shown = registry.groups.get(line.name), seen.get(line.name)
    if standing is None or shown is None or standing.groups == shown.groups:
        return line.record
    hidden = set(standing.groups) - set(shown.groups)
    return GroupRecord.of(line.record.description, line.record.contexts, {*line.record.groups, *hidden})


@attrs.frozen
class GroupOutcome:
    """One group record's outcome: created, replaced or unchanged, with its member counts."""

    name: str
    outcome: str
    contexts: int
    groups: int


def restore_groups(
    registry: Registry,
    lines: list[GroupLine],
    batches: int,
    deadline: float | None = None,
    on_commit: Callable[[], None] | None = None,
    seen: Groups | None = None,
) -> list[GroupOutcome]:
    """Validate the stream's group records as a set, then write the changed ones in one transaction.

    `seen` (default: every standing group) is the caller's view of the standing groups: children are
    looked up in it, outcomes are judged against it, and a standing child outside it is kept.
    """
    if not lines:
        return []
    view = registry.groups if seen is None else seen
    written = {g.name: _as_written(registry, view, g) for g in lines}
    _check(registry, lines, batches, view, written)
    outcomes: list[GroupOutcome] = []
    changed: dict[str, GroupRecord] = {}
    for g in lines:
        standing = view.get(g.name)
        outcome = "created" if standing is None else "unchanged" if standing == g.record else "replaced"
        if outcome != "unchanged":
            changed[g.name] = written[g.name]
        outcomes.append(GroupOutcome(g.name, outcome, len(g.record.contexts), len(g.record.groups)))
    if deadline is not None and time.monotonic() > deadline:
        err = ApiError(
            Code.TIMEOUT,
            f"group restore exceeded its budget with {batches} batch(es) durable (TAGURU_REQUEST_TIMEOUT_SECS "
            "tunes this); the request budget ran out after 0 group record(s) landed; re-importing the stream is "
            "exact",
        )
        _landed(err, batches)
        raise err
    if changed:
        registry.write_groups(changed)
        if on_commit is not None:
            on_commit()
    return outcomes
