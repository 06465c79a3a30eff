"""An import file read in stretches of whole batches, so a client sends it with constant memory.

`taguru import --url` validates each file in one pass and sends it in a second, each pass
holding one stretch (about `budget` bytes of whole batches, or one larger batch) at a time.
Validation gives the refusal `parse_stream` gives the whole file: lines are numbered across
the file, a source stated twice is found across stretches, and the whole-stream checks run
at the end over what they need (the first batch citing paragraphs without a passage).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import attrs

from taguru_server.store.text import WHITE_SPACE
from taguru_server.store.transfer.importer import Batch, Stream, check_batches, parse_lines

HEADER_KEY = "taguru_batch"
GROUP_KEY = "taguru_group"
SCHEMA_KEY = "taguru_schema"


@attrs.frozen
class Stretch:
    """Consecutive whole batches: their lines as parsed (numbered from `first_line`) and as sent."""

    first_line: int
    lines: list[str]
    pieces: list[str]  # one NDJSON text per batch, as sent

    def parse(self, seen: set[tuple[str, str]], group_names: set[str], schema_contexts: set[str]) -> Stream:
        return parse_lines("\n".join(self.lines), self.first_line, seen, group_names, schema_contexts)


@attrs.define
class Budget:
    """The bytes one request may carry; halved by the sender when the server answers 413."""

    size: int


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) split on LF only, decoded strictly; a leading BOM is dropped."""
    offset = 0
    with path.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                # the whole-file decode names the byte's position in the file
                raise UnicodeDecodeError(
                    "utf-8", bytes(offset) + raw, offset + exc.start, offset + exc.end, exc.reason
                ) from None
            offset += len(raw)
            if n == 1 and line.startswith("\ufeff"):
                line = line[1:]
            yield n, line[:-1] if line.endswith("\n") else line


def _has_key(line: str, key: str) -> bool:
    """Whether the line is a JSON object with `key` (the parser's own test for a record's kind)."""
    if key not in line:
        return False
    try:
        rec = json.loads(line.strip(WHITE_SPACE))
    except ValueError:
        return False
    return isinstance(rec, dict) and key in rec


def is_header(line: str) -> bool:
    """Whether the line opens a batch."""
    return _has_key(line, HEADER_KEY)


def is_group(line: str) -> bool:
    """Whether the line is a `taguru_group` record (sent after every batch of its file, in one request)."""
    return HEADER_KEY not in line and SCHEMA_KEY not in line and _has_key(line, GROUP_KEY)


def is_schema(line: str) -> bool:
    """Whether the line is a `taguru_schema` record (sent after every batch of its file, before its groups)."""
    return HEADER_KEY not in line and _has_key(line, SCHEMA_KEY)


def is_record(line: str) -> bool:
    """A schema or group record: kept out of the batch pieces."""
    return is_group(line) or is_schema(line)


class _Stretcher:
    """Collects lines into batches and batches into stretches under the budget."""

    def __init__(self, budget: Budget, groups: list[str], schemas: list[str]) -> None:
        self.budget = budget
        self.groups = groups  # the file's group records, wherever they stand, kept out of the pieces
        self.schemas = schemas  # and its schema records
        self.first = 1  # line number of lines[0]
        self.lines: list[str] = []
        self.pieces: list[str] = []
        self.size = 0
        self.batch_at: int | None = None  # index in `lines` of the open batch's header
        self.batch_first = 0

    def close_batch(self) -> Stretch | None:
        """End the open batch; returns the stretch before it when the batch does not fit into it."""
        if self.batch_at is None:
            return None
        at = self.batch_at
        piece = "\n".join(x for x in self.lines[at:] if not is_record(x)).rstrip("\n") + "\n"
        cost = len(piece.encode("utf-8"))
        done = None
        if self.pieces and self.size + cost > self.budget.size:
            done = Stretch(self.first, self.lines[:at], self.pieces)
            self.lines, self.pieces, self.size, self.first = self.lines[at:], [], 0, self.batch_first
        self.pieces.append(piece)
        self.size += cost
        self.batch_at = None
        return done

    def add(self, n: int, line: str) -> Stretch | None:
        done = None
        if is_header(line):
            done = self.close_batch()
            self.batch_at, self.batch_first = len(self.lines), n
        elif is_schema(line):
            self.schemas.append(line)
        elif is_group(line):
            self.groups.append(line)
        self.lines.append(line)
        return done


def stretches(
    path: Path, budget: Budget, groups: list[str] | None = None, schemas: list[str] | None = None
) -> Iterator[Stretch]:
    """The file as stretches of whole batches, each at most `budget.size` bytes unless one batch is larger.

    Its `taguru_schema` and `taguru_group` records are appended to `schemas` and `groups` instead of
    being sent with a stretch: the sender posts them after the file's last batch, so every context
    they name exists by then.
    """
    st = _Stretcher(budget, [] if groups is None else groups, [] if schemas is None else schemas)
    for n, line in _lines(path):
        done = st.add(n, line)
        if done is not None:
            yield done
    done = st.close_batch()
    if done is not None:
        yield done
    if st.lines:
        yield Stretch(st.first, st.lines, st.pieces)


def validate(path: Path, budget: int, schema_contexts: set[str] | None = None) -> int:
    """Parse the whole file stretch by stretch; the number of batches, or the refusal `parse_stream` raises.
    `schema_contexts` collects the contexts its schema records name (one record per context in a file)."""
    seen: set[tuple[str, str]] = set()
    group_names: set[str] = set()
    stated: set[str] = set()
    first_unbacked: Batch | None = None
    count = 0
    groups = 0
    for stretch in stretches(path, Budget(budget)):
        parsed = stretch.parse(seen, group_names, stated)
        groups += len(parsed.groups) + len(parsed.schemas)
        for b in parsed:
            count += 1
            if first_unbacked is None and b.needs_passage_line is not None and b.passage is None:
                first_unbacked = b
    if first_unbacked is not None or count == 0:
        check_batches([first_unbacked] if first_unbacked is not None else [], groups > 0)
    if schema_contexts is not None:
        schema_contexts |= stated
    return count
