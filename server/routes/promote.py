"""POST /contexts/{name}/promote[?dry_run=true]: named sources of {name} applied to an existing context.

Checks run in the reference's order (docs/audits.md, "Promote"); the batches come from `store/transfer/promote.py`
and are applied, or previewed, with the import machinery. After a real apply the destination
gets the consolidation audit with its defaults, unless `audit` is false; the batches are
durable by then, so an audit that cannot run is reported in `audit_skipped`, never as a failure.
"""

from __future__ import annotations

from typing import Any

from taguru_server.server.call import Call, Route, not_durable, note_write
from taguru_server.server.errors import malformed
from taguru_server.server.quotas import import_quota
from taguru_server.server.reply import Reply
from taguru_server.server.routes import audits as audit_routes
from taguru_server.server.routes import common
from taguru_server.server.schema_gate import schema_counter
from taguru_server.server.state import METRICS_KEY
from taguru_server.server.wire.audits import DRY_RUN, PROMOTE
from taguru_server.server.wire.render.consolidation import consolidation_out
from taguru_server.server.wire.render.imports import batches_out, warned_extra
from taguru_server.store.derive import audits, consolidation
from taguru_server.store.errors import ApiError, Code, no_context
from taguru_server.store.model.context import CONCEPT, Context
from taguru_server.store.persist.registry import CommitFailed
from taguru_server.store.persist.writer import COMMIT_ANSWER_MARGIN_SECS
from taguru_server.store.transfer import promote as moves


def dry_run_flag(call: Call) -> bool:
    raw = call.query.get("dry_run")
    if raw is None or raw == "false":
        return False
    if raw == "true":
        return True
    raise malformed(
        "Failed to deserialize query string: dry_run: provided string was not `true` or `false`", status=400
    )


def _check_request(call: Call, name: str, into: str, sources: list[str]) -> None:
    """Checks 3-7: non-empty, (the cap is the decoder's), not itself, no reserved id, a grant on `into`."""
    if not sources:
        raise ApiError(
            Code.INVALID_ARGUMENT,
            "'sources' must name at least one source id to promote — choosing which sources are the keepers is "
            "the caller's judgment, never a default",
        )
    if into == name:
        raise ApiError(
            Code.INVALID_ARGUMENT,
            f"'into' names the promoting context '{name}' itself — promotion moves sources into a DIFFERENT, "
            "established context",
        )
    for reserved in moves.RESERVED:
        if reserved in sources:
            raise ApiError(
                Code.INVALID_ARGUMENT,
                f"source id '{reserved}' is reserved by export — promotion moves named sources' own shares; "
                "sourceless weight cannot travel",
            )
    if not call.principal.may_access(into):
        raise ApiError(
            Code.FORBIDDEN,
            f"key '{call.principal.key}' has no grant on context '{into}' ('into'); nothing was applied",
            integrity="nothing_written",
        )


def _contexts(call: Call, name: str, into: str) -> tuple[Context, Context]:
    """Checks 9-10: the destination first, then the scratch."""
    target = call.registry.get(into)
    if target is None:
        raise ApiError(
            Code.NO_CONTEXT,
            f"context '{into}' ('into') does not exist — promotion lands in an established context and never "
            "creates one; create it first",
            integrity="nothing_written",
            retryable=True,
        )
    scratch = call.registry.get(name)
    if scratch is None:
        raise no_context(name)
    return scratch, target


async def _epilogue(call: Call, into: str) -> dict[str, Any]:
    """The destination's default consolidation audit, or the reason it was skipped."""
    if not common.try_permit(call.app_state):
        return {"audit_skipped": "overloaded"}
    try:
        ctx = call.registry.get(into)
        if ctx is None:
            return {"audit_skipped": "no_context"}
        twins = await audit_routes.sweep(call, ctx, (CONCEPT,), {"dice_floor": None, "cosine_floor": None})
        return {
            "audit": consolidation_out(
                consolidation.consolidation(ctx, set(consolidation.CHECKS), deadline=call.deadline, twins=twins)
            )
        }
    except (audits.Expired, ApiError):  # the sweep's only refusal is its mid-scan 408
        return {"audit_skipped": "deadline_exceeded"}
    except Exception:  # the batches are durable already: a failing read only loses the audit
        return {"audit_skipped": "unavailable"}
    finally:
        common.release(call.app_state)


async def promote(call: Call) -> Any:
    """Promote: checks in order, render, apply (or preview), then the audit epilogue."""
    dry_run = dry_run_flag(call)
    args = await call.decode(PROMOTE)
    assert call.name is not None
    name, into, sources = call.name, args["into"], args["sources"]
    _check_request(call, name, into, sources)
    common.before_start(call)
    scratch, _target = _contexts(call, name, into)
    missing = moves.missing_sources(scratch, sources)
    if missing:
        raise ApiError(
            Code.NO_SOURCE,
            f"{len(missing)} of the named source id(s) exist(s) nowhere in context '{name}' — under "
            "retract-then-apply a mistyped id would no-op silently, so the whole request refuses instead; "
            "nothing was applied",
            issues=missing,
            integrity="nothing_written",
            retryable=True,
        )
    batches, dropped = moves.render(scratch, into, sources)
    common.before_start(call)

    def commit(ctx: Context) -> None:
        try:
            call.registry.commit([ctx])
        except CommitFailed as exc:
            raise not_durable(exc, "the promotion could not be made durable; nothing was applied") from None
        note_write()

    metrics = call.app_state.get(METRICS_KEY)
    outcomes = await call.registry.apply_off_loop(  # in the writer thread, commits included
        {into},
        lambda: moves.apply(
            call.registry,
            into,
            batches,
            dry_run=dry_run,
            deadline=call.deadline - COMMIT_ANSWER_MARGIN_SECS,
            commit=commit,
            quota=import_quota(call),
            count_schema=None if metrics is None else schema_counter(metrics),
        ),
    )
    result: dict[str, Any] = {"batches": batches_out(outcomes), "aliases_dropped": dropped}
    if not dry_run and args["audit"] is not False:
        result.update(await _epilogue(call, into))
    extra = warned_extra(outcomes)
    return result if extra is None else Reply(result, extra=extra)


ROUTES: list[Route] = [
    Route(
        "POST",
        "/contexts/{name}/promote",
        promote,
        "write",
        request=PROMOTE,
        response="warned:Promotion",
        query=(DRY_RUN,),
    )
]
