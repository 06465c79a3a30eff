"""JSONL batch import: parse a whole stream first, then apply batch by batch (docs/operations.md, "Backup").

Each line's own checks are `store/transfer/import_records.py`'s; here are the stream (its fast path for the
common association line, batch boundaries, the whole-stream checks) and the application, one
`store/model/operations.py: replace_source` per batch.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from taguru_server.store.errors import MAX_LISTED_ISSUES, ApiError, Code, Issue, collected, timed_out
from taguru_server.store.model import operations
from taguru_server.store.model.context import CONCEPT, LABEL, Context
from taguru_server.store.model.operations import BatchCounts, PassageIn
from taguru_server.store.model.passage import StoreCounts
from taguru_server.store.model.schema_check import Checked, check, issues
from taguru_server.store.persist.registry import Registry
from taguru_server.store.persist.writer import collector_paused
from taguru_server.store.text import WHITE_SPACE, split_paragraphs
from taguru_server.store.transfer.group_import import GroupLine, GroupParseError, parse_group_line
from taguru_server.store.transfer.import_records import (
    ASSOCIATION_KEYS,
    DECODER,
    MAX_NAME_BYTES,
    MAX_U32,
    MAX_WEIGHT,
    Batch,
    ParseError,
    decode_line,
    meta_from_create,
    parse_op_line,
    read_header,
)
from taguru_server.store.transfer.schema_records import SchemaRecord, parse_schema_record

# The association-line shortcuts below only ever accept what the full checks accept, with
# the same values; tests/test_scale_equivalence.py compares both ways (this switch off).
FAST_PATHS = True
# An association line in the common layout, with plain strings (no escapes, no control
# characters) and a JSON number: when it matches, json.loads would return exactly these
# values, so the line is taken without running the JSON decoder. Anything else is decoded.
_WS = "[ \t\n\r]*"
_NAME = r'"([^"\\\x00-\x1f]{1,256})"'  # 1 to 256 characters: never over the 1024-byte cap
_FLOAT = "(-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+))"  # a float literal


def _member(key: str, value: str) -> str:
    return f'"{key}"{_WS}:{_WS}{value}{_WS}'


_ASSOC_LINE = re.compile(
    f"[ \t\r]*\\{{{_WS}"
    + f",{_WS}".join(_member(k, _NAME) for k in ("subject", "label", "object"))
    + f",{_WS}{_member('weight', _FLOAT)}"
    + f"(?:,{_WS}{_member('paragraph', '(0|[1-9][0-9]{0,9})')})?\\}}[ \t\r]*"
)
_FAST_RAW_CHARS = 4096
_FAST_NAME_CHARS = MAX_NAME_BYTES // 4  # a name this short cannot exceed the byte cap


class Stream(list[Batch]):
    """A parsed stream: its batches in order, then its `taguru_schema` records (installed after every batch)
    and its `taguru_group` records (applied after those)."""

    groups: list[GroupLine]
    schemas: list[SchemaRecord]


def parse_stream(data: bytes | str) -> Stream:
    """Validate a whole JSONL stream into batches (and group records), or raise ParseError naming the line."""
    text = data.decode("utf-8", errors="strict") if isinstance(data, bytes) else data
    if text.startswith("\ufeff"):
        text = text[1:]
    batches = parse_lines(text, 1, set(), set())
    _check_paragraph_references(batches, bool(batches.groups or batches.schemas))
    return batches


def parse_lines(
    text: str,
    first_line: int,
    seen: set[tuple[str, str]],
    group_names: set[str],
    schema_contexts: set[str] | None = None,
) -> Stream:
    """The batches (and schema and group records) of one stretch of a stream that starts at a batch header
    (or the stream's start), its first line numbered `first_line`; `seen` holds the (context, source)
    pairs, `group_names` the group records and `schema_contexts` the schema records' contexts of the
    earlier stretches. A stream parsed stretch by stretch, followed by `check_batches` over the
    stretches' batches in order, is refused exactly where `parse_stream` refuses it whole."""
    batches = Stream()
    batches.groups = []
    batches.schemas = []
    stated = set() if schema_contexts is None else schema_contexts
    current: Batch | None = None
    alias_seen: set[tuple[int, str]] = set()
    decode = DECODER.decode
    fast_line = _ASSOC_LINE.fullmatch
    fast = FAST_PATHS
    # The regex shortcut stays inline: it runs once per association line on the import hot path.
    for n, raw in enumerate(text.split("\n"), start=first_line):
        if fast and current is not None and len(raw) <= _FAST_RAW_CHARS:
            m = fast_line(raw)
            if m is not None:
                s, lab, o, w_text, p_text = m.groups()
                w = float(w_text)
                if -MAX_WEIGHT <= w <= MAX_WEIGHT:
                    if p_text is None:
                        current.last_line = n
                        current.associations.append((s, lab, o, w, None))
                        continue
                    p = int(p_text)
                    if p <= MAX_U32:
                        current.last_line = n
                        if current.needs_passage_line is None:
                            current.needs_passage_line = n
                        current.associations.append((s, lab, o, w, p))
                        continue
        line = raw.strip(WHITE_SPACE)
        if not line:
            continue
        rec = decode_line(n, line, decode)
        if fast and current is not None and _took_plain_association(n, line, rec, current):
            continue
        if "taguru_batch" in rec:
            current = _open_batch(n, rec, seen)
            alias_seen = set()
            batches.append(current)
            continue
        if "taguru_schema" in rec:  # a schema record closes the batch before it
            current = None
            batches.schemas.append(parse_schema_record(n, rec, stated))
            continue
        if "taguru_group" in rec:  # a group record closes the batch before it
            current = None
            try:
                batches.groups.append(parse_group_line(n, rec, group_names))
            except GroupParseError as exc:
                raise ParseError(str(exc)) from None
            continue
        parse_op_line(n, rec, current, alias_seen)
    return batches


def _took_plain_association(n: int, line: str, rec: dict[str, Any], current: Batch) -> bool:
    """Append a common, plainly valid association line to the batch; False leaves it to the full checks."""
    if "subject" not in rec or not rec.keys() <= ASSOCIATION_KEYS or "\\ud" in line or "\\uD" in line:
        return False  # surrogate escapes take the full checks, which also word any refusal
    s = rec.get("subject")
    lab = rec.get("label")
    o = rec.get("object")
    w = rec.get("weight")
    p = rec.get("paragraph")
    short = _FAST_NAME_CHARS
    if not (
        type(s) is str
        and type(lab) is str
        and type(o) is str
        and 0 < len(s) <= short
        and 0 < len(lab) <= short
        and 0 < len(o) <= short
        and type(w) is float
        and -MAX_WEIGHT <= w <= MAX_WEIGHT
        and (p is None or (type(p) is int and 0 <= p <= MAX_U32))
    ):
        return False
    current.last_line = n
    if p is not None and current.needs_passage_line is None:
        current.needs_passage_line = n
    current.associations.append((s, lab, o, w, p))
    return True


def _open_batch(n: int, rec: dict[str, Any], seen: set[tuple[str, str]]) -> Batch:
    """A new batch from its header line, refusing a source stated twice in the stream."""
    batch = read_header(n, rec)
    key = (batch.context, batch.source)
    if key in seen:
        raise ParseError(
            f"line {n}: source '{batch.source}' in context '{batch.context}' is already stated by an "
            "earlier batch of this stream — one batch owns one source's truth"
        )
    seen.add(key)
    return batch


def check_batches(batches: list[Batch], has_groups: bool = False) -> None:
    """The whole-stream checks `parse_stream` ends with (paragraph references, an empty stream)."""
    _check_paragraph_references(batches, has_groups)


def _check_paragraph_references(batches: list[Batch], has_groups: bool = False) -> None:
    """Refuse a batch that cites paragraphs without a passage, and an empty stream."""
    for b in batches:
        if b.needs_passage_line is not None and b.passage is None:
            raise ParseError(
                f"line {b.needs_passage_line}: a paragraph reference needs a passage line in the same batch"
            )
    if not batches and not has_groups:
        raise ParseError("empty file: expected a batch header, schema record, or group record line")


# ----- apply -----------------------------------------------------------------------


def alias_refusal(ctx: Context | None, batch: Batch, index: int) -> ApiError | None:
    """Step 1: refuse the batch before anything is written if an alias cannot land."""
    if not batch.aliases:
        return None
    used_sets: list[tuple[set[str], set[str]]] = []

    def used(kind: int) -> set[str]:
        if not used_sets:
            used_sets.append(
                (
                    {s for s, _l, _o, _w, _p in batch.associations} | {o for _s, _l, o, _w, _p in batch.associations},
                    {lab for _s, lab, _o, _w, _p in batch.associations},
                )
            )
        return used_sets[0][kind]

    pending: tuple[dict[str, str], dict[str, str]] = ({}, {})
    for kind in (CONCEPT, LABEL):
        for _k, alias, canonical in sorted(a for a in batch.aliases if a[0] == kind):
            word = "concept" if kind == CONCEPT else "label"
            path = f"batches[{index}].{word}s['{alias}']"
            find = None if ctx is None else (ctx.find_concept if kind == CONCEPT else ctx.find_label)
            target_known = (
                (find is not None and find(canonical) is not None)
                or canonical in used(kind)
                or canonical in pending[kind]
            )
            if not target_known:
                return ApiError(
                    Code.CONFLICT,
                    f"{word} alias '{alias}' → '{canonical}': the canonical spelling is not interned; "
                    "nothing was applied",
                    issues=[
                        Issue(
                            path,
                            "unknown_reference",
                            f"'{canonical}' already interned as a concept or label this batch's associations use",
                            "not present in this request",
                        )
                    ],
                    retryable=True,
                )
            root = pending[kind].get(canonical, canonical)
            current_alias = find(alias) if find is not None else None
            current_root = find(root) if find is not None else None
            clash = False
            if current_alias is not None:
                clash = current_root is None or current_alias != current_root
            elif alias in used(kind) or alias in pending[kind].values():
                clash = alias != root
            if clash:
                return ApiError(
                    Code.CONFLICT,
                    f"{word} alias '{alias}' → '{canonical}': the alias already resolves to a different record; "
                    "nothing was applied",
                    issues=[
                        Issue(path, "conflict", f"resolves to '{canonical}'", "already resolves to a different record")
                    ],
                    retryable=True,
                )
            pending[kind][alias] = root
    return None


@attrs.frozen
class BatchOutcome:
    """One batch's outcome: its context and source, whether it created the context, and its counts; `warned`
    holds the first issues of a schema in warn mode (paths prefixed `batches[{b}].`)."""

    context: str
    source: str
    created: bool
    counts: BatchCounts
    warned: tuple[Issue, ...] = ()


SchemaCounter = Callable[[Context, str, Checked], None]
"""Called for each schema check that gates a real batch apply: the context, the schema's mode and the findings."""


def schema_refusal(
    ctx: Context | None, batch: Batch, index: int, count: SchemaCounter | None
) -> tuple[ApiError | None, list[Issue]]:
    """Step 2, the schema prediction: a batch on a context with a schema is judged as it will apply
    (its label alias lines declared, its own source about to be retracted). Returns the refusal (409 for
    a label alias to the reserved label, 400 for strict violations), else the warned issues (prefixed)."""
    schema = None if ctx is None else ctx.schema
    if ctx is None or schema is None:
        return None, []
    declared = {alias: canonical for kind, alias, canonical in batch.aliases if kind == LABEL}
    ops = [(s, lab, o) for s, lab, o, _w, _p in batch.associations]
    found = check(ctx, schema, ops, declared, batch.source)
    if count is not None:
        count(ctx, schema.mode, found)
    prefix = f"batches[{index}]."
    if found.reserved:
        return _batch_refusal(Code.CONFLICT, "this batch's label aliases", found.reserved, prefix), []
    listed = issues(found.violations)
    if listed and schema.mode == "strict":
        return _batch_refusal(Code.INVALID_ARGUMENT, "this batch's associations", listed, prefix), []
    return None, [attrs.evolve(i, path=prefix + i.path) for i in listed]


def _batch_refusal(code: Code, what: str, found: list[Issue], prefix: str) -> ApiError:
    """The collected refusal of one batch: batch-relative bullets, stream-prefixed issues (the listed ones)."""
    err = collected(what, found)
    err.code = code
    err.issues = [attrs.evolve(i, path=prefix + i.path) for i in found[:MAX_LISTED_ISSUES]]
    return err


def predict(ctx: Context | None, batch: Batch, created: bool) -> BatchOutcome:
    """What applying the batch would report, computed without writing."""
    out = BatchCounts()
    sid = ctx.find_source(batch.source) if ctx is not None else None
    if ctx is not None and sid is not None:
        out.retracted = len(ctx.source_edges.get(sid, ()))
        out.passage_dropped = batch.passage is None and sid in ctx.passages
    n = len(split_paragraphs(batch.passage)) if batch.passage is not None else 0
    if batch.passage is not None:
        out.passage_stored = True
        kept_q = sum(1 for p, _q in batch.questions if p < n)
        sections = {m[0] for m in batch.sections if m[0] < n}
        locators = {m[0] for m in batch.locators if m[0] < n}
        out.markers = StoreCounts(
            kept_q,
            len(batch.questions) - kept_q,
            len(sections),
            len(batch.sections) - len(sections),
            len(locators),
            len(batch.locators) - len(locators),
        )
    out.associations = len(batch.associations)
    seen_records: set[tuple[str, str, str]] = set()
    dropped = 0
    for s, lab, o, _w, p in batch.associations:
        if (s, lab, o) in seen_records:
            continue
        seen_records.add((s, lab, o))
        if p is not None and p >= n:
            dropped += 1
    out.association_paragraphs_dropped = dropped
    out.aliases = len(batch.aliases)
    return BatchOutcome(batch.context, batch.source, created, out)


def apply_batch(ctx: Context, batch: Batch, created: bool, now: int) -> BatchOutcome:
    """Steps 3-6 of one batch on a context that exists (or was just created): the source's truth replaced."""
    passage = None
    if batch.passage is not None:
        stored_at = batch.stored_at if batch.stored_at is not None else now
        markers = (batch.questions, batch.sections, batch.locators)
        passage = PassageIn(batch.source, batch.passage, *markers, batch.tags, stored_at, batch.date)
    counts = operations.replace_source(ctx, batch.source, passage, batch.associations, batch.aliases)
    return BatchOutcome(batch.context, batch.source, created, counts)


def run_import(
    registry: Registry,
    batches: list[Batch],
    *,
    dry_run: bool = False,
    commit_every: int = 512,
    deadline: float | None = None,
    timeout_secs: int = 30,
    on_commit: Callable[[int], None] | None = None,
    count_schema: SchemaCounter | None = None,
    on_schema_refused: Callable[[Batch, ApiError], None] | None = None,
    quota: QuotaGate | None = None,
) -> list[BatchOutcome]:
    """Apply batches in order, committing in groups; a refusal keeps the landed prefix. `count_schema` is
    told of every schema check that gates a real apply (never of a dry run's); with `on_schema_refused`, a
    batch the schema refuses is handed to it and skipped, and the batches after it still apply. With
    `quota`, a batch that carries growth into a context with a storage ceiling is judged after the batches
    before it are durable (`QuotaGate`); a refusal there stops the stream with the landed prefix."""
    # A bulk load creates millions of long-lived objects and no reference cycles worth
    # collecting meanwhile; the cyclic collector would re-scan them over and over.
    with collector_paused():
        return _run_import(
            registry,
            batches,
            dry_run=dry_run,
            commit_every=commit_every,
            deadline=deadline,
            timeout_secs=timeout_secs,
            on_commit=on_commit,
            count_schema=count_schema,
            on_schema_refused=on_schema_refused,
            quota=quota,
        )


class QuotaGate(Protocol):
    """The storage-quota check of a batch: whether its context has a ceiling, and the refusal (or None)."""

    def applies(self, context: str) -> bool: ...

    def refusal(self, ctx: Context) -> ApiError | None: ...


def _gated(quota: QuotaGate, ctx: Context, batch: Batch) -> bool:
    """Whether a batch is judged against its context's storage quota: it adds something, and a ceiling applies."""
    return carries_growth(batch) and quota.applies(ctx.name)


def carries_growth(batch: Batch) -> bool:
    """A batch that adds something (a header-only batch is a pure source retraction)."""
    return bool(batch.associations or batch.aliases or batch.passage is not None)


def _run_import(
    registry: Registry,
    batches: list[Batch],
    *,
    dry_run: bool,
    commit_every: int,
    deadline: float | None,
    timeout_secs: int,
    on_commit: Callable[[int], None] | None,
    count_schema: SchemaCounter | None,
    on_schema_refused: Callable[[Batch, ApiError], None] | None,
    quota: QuotaGate | None = None,
) -> list[BatchOutcome]:
    outcomes: list[BatchOutcome] = []
    pending: list[Context] = []
    will_exist: set[str] = set()
    now = int(time.time())
    landed = 0

    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    def refuse_late() -> ApiError:
        # past the budget nothing more is committed: what is not durable yet is undone, and the
        # refusal names the durable prefix (a write is never answered 200 after its deadline)
        registry.rollback(pending)
        return noted(timed_out(timeout_secs), _stream_stop(dry_run), batches, landed, dry_run)

    def flush() -> None:
        nonlocal landed, pending
        if pending:
            if late():
                raise refuse_late()
            registry.commit(pending)
            pending = []
        landed = len(outcomes)
        if on_commit is not None:
            on_commit(landed)

    for i, batch in enumerate(batches):
        if late():
            if dry_run:
                raise noted(timed_out(timeout_secs), _stream_stop(dry_run), batches, i, dry_run)
            raise refuse_late()
        ctx = registry.get(batch.context)
        exists = ctx is not None or (dry_run and batch.context in will_exist)
        refusal = alias_refusal(ctx, batch, i)
        warned: list[Issue] = []
        if refusal is None:
            refusal, warned = schema_refusal(ctx, batch, i, None if dry_run else count_schema)
            if refusal is not None and on_schema_refused is not None:
                on_schema_refused(batch, refusal)  # the offline import reports it and goes on
                continue
        if refusal is None and not exists and batch.create is None:
            refusal = no_create_block(batch.context, i)
        if refusal is not None:
            if not dry_run:
                flush()
            raise noted(refusal, _stream_stop(dry_run), batches, i, dry_run)
        if dry_run:
            created = not exists
            will_exist.add(batch.context)
            outcomes.append(with_warnings(predict(ctx, batch, created), warned))
            continue
        if quota is not None and ctx is not None and _gated(quota, ctx, batch):
            flush()  # the batches before it count: they are durable before it is judged
            over = quota.refusal(ctx)
            if over is not None:
                raise noted(over, QUOTA_STOP, batches, i, dry_run)
        created = ctx is None
        if ctx is None:
            assert batch.create is not None
            ctx = registry.create(batch.context, meta_from_create(batch.create))
        try:
            outcomes.append(with_warnings(apply_batch(ctx, batch, created, now), warned))
        except Exception:
            registry.rollback(pending + [ctx])
            raise
        pending.append(ctx)
        if (i + 1) % commit_every == 0:
            flush()
    if not dry_run:
        flush()
    return outcomes


def with_warnings(outcome: BatchOutcome, warned: list[Issue]) -> BatchOutcome:
    """The outcome with its schema violations counted and the first of them kept for the envelope."""
    if not warned:
        return outcome
    outcome.counts.schema_violations = len(warned)
    return attrs.evolve(outcome, warned=tuple(warned[:MAX_LISTED_ISSUES]))


@attrs.frozen
class Stop:
    """How a refused or unfinished batch is described: what befell it, what the batches before it did, what next."""

    verb: str
    clause: str
    next_step: str


def _stream_stop(dry_run: bool) -> Stop:
    if dry_run:
        return Stop(
            "would be refused",
            "previewed clean (dry_run=true; nothing is written)",
            "fixing the stream and re-running the preview is exact",
        )
    return Stop(
        "refused",
        "landed durably",
        "fixing the stream and re-POSTing it whole is exact (each batch replaces its own source)",
    )


QUOTA_STOP = Stop(
    "not attempted",
    "landed durably",
    "retracting or compacting the context (or raising its quota), then re-POSTing the remaining stream is exact "
    "(each batch replaces its own source)",
)


def noted(err: ApiError, stop: Stop, batches: list[Batch], i: int, dry_run: bool) -> ApiError:
    """The batch note before the message (when there are several batches) and the integrity fields."""
    n = len(batches)
    if n > 1:
        b = batches[i]
        err.message = (
            f"batch {i + 1} of {n} (context '{b.context}', source '{b.source}') {stop.verb} — the {i} batch(es) "
            f"before it {stop.clause}; {stop.next_step}: {err.message}"
        )
        err.args = (err.message,)
    if i >= 1 and not dry_run:
        err.integrity = "durable_prefix"
        err.durable_batches = i
    else:
        err.integrity = "nothing_written"
    return err


def no_create_block(context: str, i: int) -> ApiError:
    """The refusal of batch i whose context does not exist and which brings no create block."""
    return ApiError(
        Code.NO_CONTEXT,
        f"context '{context}' does not exist and the batch brought no create block",
        issues=[
            Issue(
                f"batches[{i}].create",
                "missing",
                "a create block, since the named context does not exist yet",
                "absent",
            )
        ],
        retryable=True,
    )
