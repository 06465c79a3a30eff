"""The schema gate of the write routes: judge a write's associations against the context's schema,
count the check, refuse under strict, and carry a warned write's issues to its success envelope."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from taguru_server.server.errors import issue_out
from taguru_server.server.metrics import Metrics
from taguru_server.store.errors import MAX_LISTED_ISSUES, Issue, collected
from taguru_server.store.model.context import Context
from taguru_server.store.model.schema_check import Checked, Op, check, issues


def counted(metrics: Metrics | None, ctx: Context, mode: str, found: Checked) -> None:
    """Record a check that gated a real write (never a dry run or an audit)."""
    if metrics is not None:
        metrics.schema_checked(ctx.name, found.outcome(mode), len(found.violations))


def schema_counter(metrics: Metrics) -> Callable[[Context, str, Checked], None]:
    """The importer's hook: count each check that gates a real batch apply."""

    def count(ctx: Context, mode: str, found: Checked) -> None:
        counted(metrics, ctx, mode, found)

    return count


def warned_extra(listed: Sequence[Issue], total: int) -> dict[str, Any] | None:
    """The success envelope's `issues` (the first 20) and `schema_violations` (the true count), if any."""
    if not total:
        return None
    return {"issues": [issue_out(i) for i in listed[:MAX_LISTED_ISSUES]], "schema_violations": total}


def gate_associations(ctx: Context | None, ops: Sequence[Op], metrics: Metrics | None) -> dict[str, Any] | None:
    """`POST …/associations`: the check over every item (no schema or no context: nothing to judge);
    strict violations refuse the whole write (400), warned ones come back as envelope extras."""
    schema = None if ctx is None else ctx.schema
    if ctx is None or schema is None:
        return None
    found = check(ctx, schema, ops)
    counted(metrics, ctx, schema.mode, found)
    listed = issues(found.violations)
    if listed and schema.mode == "strict":
        raise collected("the associations batch", listed)
    return warned_extra(listed, len(listed))
