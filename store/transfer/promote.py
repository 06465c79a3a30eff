"""Promote: named sources of one context (the scratch) become import batches applied to another.

The scratch is read, never changed. What moves is exactly what `export` would render for the
requested sources with every other source filtered out (each source's own shares of its edges,
its passage with markers and metadata, and the aliases whose canonical stays live in that
slice), headed at the destination with no `create` block; the batches are then applied with the
import machinery (`store/importer.py`), so promote agrees with export and import by
construction.

Durability: only the destination changes, and all of its batches commit in one transaction.
A refusal (or a spent budget) at batch i commits the batches before it first, so the answer's
`durable_batches` is always exactly what is in the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from taguru_server.store.errors import ApiError, Code, Issue
from taguru_server.store.model.context import CONCEPT, LABEL, Context
from taguru_server.store.persist.registry import Registry
from taguru_server.store.transfer.importer import (
    Batch,
    BatchOutcome,
    QuotaGate,
    SchemaCounter,
    Stop,
    alias_refusal,
    apply_batch,
    carries_growth,
    no_create_block,
    noted,
    predict,
    schema_refusal,
    with_warnings,
)

RESERVED = ("export:unsourced", "export:empty")
BUDGET_TEXT = "request exceeded its budget partway through the promotion (TAGURU_REQUEST_TIMEOUT_SECS tunes this)"


def exists_in(ctx: Context, source: str) -> bool:
    """A source exists when it has a stored passage or at least one live attribution."""
    sid = ctx.source_id.get(source)
    if sid is None:
        return False
    if sid in ctx.passages:
        return True
    return any(rec[0] == sid and rec[2] > 0 for e in ctx.source_edges.get(sid, ()) for rec in ctx.edges.attributions[e])


def missing_sources(ctx: Context, sources: list[str]) -> list[Issue]:
    """One issue per requested id that exists nowhere in the scratch, in request order."""
    return [
        Issue(
            f"sources[{i}]",
            "unknown_reference",
            f"'{source}' stored in context '{ctx.name}' as a passage or a live attribution",
            "not present in this request",
        )
        for i, source in enumerate(sources)
        if not exists_in(ctx, source)
    ]


def render(scratch: Context, into: str, sources: list[str]) -> tuple[list[Batch], int]:
    """The filtered, re-headed batches (one per source, byte order) and how many aliases stay behind."""
    batches: list[Batch] = []
    live_concepts: set[int] = set()
    live_labels: set[int] = set()
    for source in sorted(set(sources)):
        sid = scratch.source_id[source]
        batch = Batch(context=into, source=source, create=None, first_line=0)
        passage = scratch.passages.get(sid)
        if passage is not None:
            batch.passage = passage.text
            batch.stored_at = passage.stored_at
            batch.date = passage.date
            batch.tags = list(passage.tags)
            batch.questions = list(passage.questions)
            batch.sections = sorted(passage.sections.items())
            batch.locators = sorted((p, k, v) for p, (k, v) in passage.locators.items())
        for e in sorted(scratch.source_edges.get(sid, ())):
            for rec_sid, rsum, rcount, paragraph in scratch.edges.attributions[e]:
                if rec_sid != sid or rcount <= 0:
                    continue
                s, lab, o = scratch.edges.subject[e], scratch.edges.label[e], scratch.edges.object[e]
                live_concepts.update((s, o))
                live_labels.add(lab)
                names = (scratch.concepts[s], scratch.labels[lab], scratch.concepts[o])
                average = rsum / rcount
                batch.associations.append((*names, average, paragraph))
                batch.associations.extend([(*names, average, None)] * (rcount - 1))
        batches.append(batch)
    emitted: list[tuple[int, str, str]] = []
    dropped = 0
    for kind, live, spellings in ((CONCEPT, live_concepts, scratch.concepts), (LABEL, live_labels, scratch.labels)):
        for alias, target in scratch.aliases[kind].items():
            if target in live:
                emitted.append((kind, alias, spellings[target]))
            else:
                dropped += 1
    if batches:
        batches[-1].aliases = emitted
    return batches, dropped


def _refused(dry_run: bool) -> Stop:
    if dry_run:
        return Stop(
            "would be refused",
            "previewed clean (dry_run=true; nothing is written)",
            "fixing the scratch (or the destination) and re-running the preview is exact",
        )
    return Stop(
        "refused",
        "landed durably",
        "fixing the scratch (or the destination) and re-calling promote is exact (each batch replaces its own source)",
    )


def _unfinished(dry_run: bool) -> Stop:
    if dry_run:
        return Stop(
            "not previewed",
            "previewed clean (dry_run=true; nothing is written)",
            "re-running the preview with more time or fewer sources is exact",
        )
    return Stop(
        "not attempted",
        "landed durably",
        "re-calling promote with the same sources is exact (each batch replaces its own source)",
    )


_QUOTA_STOP = Stop(
    "not attempted",
    "landed durably",
    "retracting or compacting the destination (or raising its quota), then re-calling promote is exact "
    "(each batch replaces its own source)",
)


def apply(
    registry: Registry,
    into: str,
    batches: list[Batch],
    *,
    dry_run: bool,
    deadline: float | None,
    commit: Callable[[Context], None],
    count_schema: SchemaCounter | None = None,
    quota: QuotaGate | None = None,
) -> list[BatchOutcome]:
    """Preview or apply every batch in order; the landed prefix is committed before any refusal. The
    destination's schema judges every batch as an import's (a real promote counts its checks); with
    `quota`, a real batch that carries growth is judged against the destination's storage ceiling once
    the batches before it are durable."""
    outcomes: list[BatchOutcome] = []
    ctx = registry.get(into)
    now = int(time.time())
    seen: list[tuple[str, str, str, float, int | None]] = []

    def stop(err: ApiError, how: Stop, i: int) -> ApiError:
        if not dry_run and i > 0 and ctx is not None:
            commit(ctx)
        return noted(err, how, batches, i, dry_run)

    for i, batch in enumerate(batches):
        if deadline is not None and time.monotonic() > deadline:
            raise stop(ApiError(Code.TIMEOUT, BUDGET_TEXT), _unfinished(dry_run), i)
        if ctx is None:
            raise stop(no_create_block(into, i), _refused(dry_run), i)
        # a preview seeds each batch with what the earlier ones would intern
        checked = attrs.evolve(batch, associations=seen + batch.associations) if dry_run and seen else batch
        refusal = alias_refusal(ctx, checked, i)
        warned: list[Issue] = []
        if refusal is None:
            refusal, warned = schema_refusal(ctx, batch, i, None if dry_run else count_schema)
        if refusal is not None:
            raise stop(refusal, _refused(dry_run), i)
        if dry_run:
            outcomes.append(with_warnings(predict(ctx, batch, False), warned))
            seen.extend(batch.associations)
            continue
        if quota is not None and carries_growth(batch) and quota.applies(into):
            if i > 0:  # the batches before it count: they are durable before it is judged
                commit(ctx)
            over = quota.refusal(ctx)
            if over is not None:
                raise noted(over, _QUOTA_STOP, batches, i, dry_run)
        try:
            outcomes.append(with_warnings(apply_batch(ctx, batch, False, now), warned))
        except Exception:
            registry.rollback([ctx])
            raise
    if not dry_run and ctx is not None:
        commit(ctx)
    return outcomes
