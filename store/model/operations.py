"""The one write path of a context: every operation that changes the model, with its feed events and usage mark.

An operation mutates the in-memory context through its primitives (which keep the revision
counters and the dirty set), records the change-feed events of what it did (`Context.emit`: they
are written and numbered with the commit that makes the write durable) and marks one write in the
context's usage (`Meta.record_write`). It never commits: the caller (an HTTP handler, the importer,
promote) makes the change durable, or rolls it back. The HTTP writes (one operation per request)
and the import batch (`replace_source`, one operation per batch) share the steps below, so the same
data written either way yields the same model, the same revisions and the same events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from taguru_server.store.model.context import AliasRefused, Context
from taguru_server.store.model.passage import NO_MARKERS, StoreCounts
from taguru_server.store.model.schema import Schema


@attrs.define
class PassagesStored:
    """What a passage store request did: how many passages, with the summed marker counts."""

    stored: int = 0
    markers: StoreCounts = NO_MARKERS


@attrs.define
class BatchCounts:
    """What one import batch did (or, dry, would do) to its context."""

    retracted: int = 0
    associations: int = 0
    aliases: int = 0
    passage_stored: bool = False
    passage_dropped: bool = False
    markers: StoreCounts = NO_MARKERS  # of the batch's passage
    association_paragraphs_dropped: int = 0
    schema_violations: int = 0


ASSOCIATIONS_PER_EVENT = 10_000
"""Associations per `associations_added` change-feed event of an import batch."""

Association = tuple[str, str, str, float, str | None, int | None]
"""(subject, label, object, weight, source or None, paragraph or None) of one asserted association."""

SourcedRow = tuple[str, str, str, float, int | None]
"""(subject, label, object, weight, paragraph or None) of one association of a known source."""

Alias = tuple[int, str, str]
"""(kind, alias, canonical) of one alias to register."""


@attrs.frozen
class PassageIn:
    """One passage to store: its source, text, markers, tags and dates."""

    source: str
    text: str
    questions: list[tuple[int, str]]
    sections: list[tuple[int, str]]
    locators: list[tuple[int, str, str]]
    tags: list[str]
    stored_at: int | None
    date: int | None


class Stopped(Exception):
    """An alias batch stopped at one pair; the pairs before it stay applied and recorded.

    `done` is how many landed, `reason` the refusal's reason phrase (None: the alias to remove is
    not an alias)."""

    def __init__(self, done: int, kind: int, alias: str, canonical: str | None, reason: str | None) -> None:
        super().__init__(reason or f"'{alias}' is not an alias")
        self.done = done
        self.kind = kind
        self.alias = alias
        self.canonical = canonical
        self.reason = reason


# ----- the writes of one request -------------------------------------------------------------


def assert_associations(ctx: Context, items: Sequence[Association]) -> int:
    """Assert each association in order (a paragraph counts only with a source); returns how many."""
    for s, lab, o, w, src, p in items:
        ctx.assert_association(s, lab, o, w, src, p if src is not None else None)
    if items:
        ctx.meta.record_write()
        ctx.emit("associations_added", count=len(items))
    return len(items)


def retract_association(ctx: Context, subject: str, label: str, obj: str) -> tuple[bool, int]:
    """Retract one association wholesale; returns whether it was live and how many attributions went."""
    retracted, removed = ctx.retract_association(subject, label, obj)
    if retracted:
        ctx.emit("association_retracted", subject=subject, label=label, object=obj)
        ctx.meta.record_write()
    return retracted, removed


def add_aliases(ctx: Context, aliases: Iterable[Alias]) -> int:
    """Register the aliases in (kind, alias) order; returns how many. A refused pair raises `Stopped`
    (the pairs before it stay applied, with their event and usage mark)."""
    applied = 0
    try:
        applied = _add_aliases(ctx, aliases)
    except Stopped as stop:
        applied = stop.done
        raise
    finally:
        if applied:
            ctx.meta.record_write()
    return applied


def remove_aliases(ctx: Context, names: Iterable[tuple[int, str]]) -> int:
    """Remove each (kind, alias) in order; returns how many. A name that is no alias raises `Stopped`."""
    removed = 0
    try:
        for kind, alias in names:
            if not ctx.remove_alias(kind, alias):
                raise Stopped(removed, kind, alias, None, None)
            removed += 1
    finally:
        if removed:
            ctx.meta.record_write()
            ctx.emit("aliases_removed", count=removed)
    return removed


def store_passages(ctx: Context, passages: Sequence[PassageIn]) -> PassagesStored:
    """Store each passage (replacing its source's); returns how many, with the summed marker counts."""
    totals = PassagesStored()
    for passage in passages:
        totals.stored += 1
        totals.markers = totals.markers.plus(_store_passage(ctx, passage))
    if passages:
        ctx.meta.record_write()
    return totals


def retract_source(ctx: Context, source: str, dry_run: bool = False) -> tuple[int, bool]:
    """Retract a source's attributions and passage (or, dry, count them); returns edges touched, passage removed."""
    if dry_run:
        return ctx.retract_source(source, dry_run=True)
    touched, removed = _retract_source(ctx, source)
    if touched or removed:
        ctx.meta.record_write()
    return touched, removed


def configure(
    ctx: Context,
    *,
    description: str | None,
    pinned: bool | None,
    dice_floor: float | None,
    semantic_floor: float | None,
) -> None:
    """Set the given (non-None) settings of a context; a new configuration revision either way."""
    m = ctx.meta
    if description is not None:
        m.description = description
    if pinned is not None:
        m.pinned = pinned
    if dice_floor is not None:
        m.dice_floor = dice_floor
    if semantic_floor is not None:
        m.semantic_floor = semantic_floor
    m.rev_config += 1
    ctx.dirty.meta = True


def install_schema(ctx: Context, schema: Schema) -> bool:
    """Install (or replace) the context's schema document; False (nothing changed) when it is the same document.

    An effective install is one configuration revision and one `schema_updated` event."""
    text = schema.text()
    if ctx.meta.schema == text:
        return False
    ctx.meta.schema = text
    ctx.meta.rev_config += 1
    ctx.dirty.meta = True
    ctx.emit("schema_updated", mode=schema.mode)
    return True


# ----- the write of one import batch ---------------------------------------------------------


def replace_source(
    ctx: Context,
    source: str,
    passage: PassageIn | None,
    associations: list[SourcedRow],
    aliases: Sequence[Alias],
) -> BatchCounts:
    """Replace one source's whole truth: retract what it held, store its passage, assert its
    associations, register the aliases; returns the counts."""
    out = BatchCounts()
    sid = ctx.find_source(source)
    if sid is not None:
        had_passage = sid in ctx.passages
        out.retracted, _removed = _retract_source(ctx, source)
        out.passage_dropped = had_passage and passage is None
    if passage is not None:
        out.passage_stored = True
        out.markers = _store_passage(ctx, passage)
    dropped = 0
    for start in range(0, len(associations), ASSOCIATIONS_PER_EVENT):  # one feed event per chunk, as the reference
        chunk = associations[start : start + ASSOCIATIONS_PER_EVENT]
        dropped += ctx.assert_many(chunk, source)
        ctx.emit("associations_added", count=len(chunk))
    out.associations = len(associations)
    out.association_paragraphs_dropped = dropped
    out.aliases = _add_aliases(ctx, aliases)
    if associations or aliases or passage is not None or out.retracted or out.passage_dropped:
        ctx.meta.record_write()
    return out


# ----- the steps the writes share ------------------------------------------------------------


def _add_aliases(ctx: Context, aliases: Iterable[Alias]) -> int:
    """Register aliases in (kind, alias) order with their feed event; `Stopped` at a refused pair."""
    applied = 0
    try:
        for kind, alias, canonical in sorted(aliases):
            try:
                ctx.add_alias(kind, alias, canonical)
            except AliasRefused as exc:
                raise Stopped(applied, kind, alias, canonical, str(exc)) from None
            applied += 1
    finally:
        if applied:
            ctx.emit("aliases_added", count=applied)
    return applied


def _store_passage(ctx: Context, passage: PassageIn) -> StoreCounts:
    """Store one passage with its feed event; returns what its markers kept and dropped."""
    counts = ctx.store_passage(
        passage.source,
        passage.text,
        passage.questions,
        passage.sections,
        passage.locators,
        passage.tags,
        passage.stored_at,
        passage.date,
    )
    ctx.emit("source_stored", source=passage.source)
    return counts


def _retract_source(ctx: Context, source: str) -> tuple[int, bool]:
    """Retract a source with its feed events: one from the graph side when the source was in the
    graph, one from the passage side when it removed a passage and the graph side touched nothing."""
    sid = ctx.find_source(source)
    in_graph = sid is not None and sid in ctx.source_edges
    touched, removed = ctx.retract_source(source)
    if in_graph:
        ctx.emit("source_retracted", source=source)
    if removed and not touched:
        ctx.emit("source_retracted", source=source)
    return touched, removed
