"""The import outcomes as the wire shows them: a batch's (`POST /import`, promote, `taguru import
--json`), a group record's, and a passage store's counts."""

from __future__ import annotations

from typing import Any

import attrs

from taguru_server.server.errors import issue_out
from taguru_server.store.errors import MAX_LISTED_ISSUES
from taguru_server.store.model.operations import PassagesStored
from taguru_server.store.transfer.group_import import GroupOutcome
from taguru_server.store.transfer.importer import BatchOutcome
from taguru_server.store.transfer.schema_records import SchemaOutcome


def batch_out(outcome: BatchOutcome) -> dict[str, Any]:
    """One batch: context, source, created, then its counts (the passage's marker counts after
    `passage_dropped`)."""
    c = outcome.counts
    return {
        "context": outcome.context,
        "source": outcome.source,
        "created": outcome.created,
        "retracted": c.retracted,
        "associations": c.associations,
        "aliases": c.aliases,
        "passage_stored": c.passage_stored,
        "passage_dropped": c.passage_dropped,
        **attrs.asdict(c.markers),
        "association_paragraphs_dropped": c.association_paragraphs_dropped,
        "schema_violations": c.schema_violations,
    }


def batches_out(outcomes: list[BatchOutcome]) -> list[dict[str, Any]]:
    """Every batch's outcome, in stream order."""
    return [batch_out(o) for o in outcomes]


def schemas_out(outcomes: list[SchemaOutcome]) -> list[dict[str, Any]]:
    """Every installed schema record's outcome, in stream order."""
    return [attrs.asdict(o) for o in outcomes]


def warned_extra(outcomes: list[BatchOutcome]) -> dict[str, Any] | None:
    """A warned import's envelope extras: the batches' issues (the first 20 in stream order) and the
    summed violation counts; None when no batch was warned."""
    total = sum(o.counts.schema_violations for o in outcomes)
    if not total:
        return None
    listed = [i for o in outcomes for i in o.warned][:MAX_LISTED_ISSUES]
    return {"issues": [issue_out(i) for i in listed], "schema_violations": total}


def groups_out(outcomes: list[GroupOutcome]) -> list[dict[str, Any]]:
    """Every group record's outcome, in stream order."""
    return [attrs.asdict(o) for o in outcomes]


def passages_stored_out(totals: PassagesStored) -> dict[str, Any]:
    """A passage store's counts: how many, then the summed marker counts."""
    return {"stored": totals.stored, **attrs.asdict(totals.markers)}
