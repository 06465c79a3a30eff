"""The audit routes: POST …/vocabulary/audit, …/drift/audit and …/consolidation/audit (read-only).

Vocabulary and consolidation audits hold a heavy-operation permit from before their body is
read (`middleware.heavy_before_body`) to the end of the handler; the drift audit takes one
only for its twin sweep, after its own sweeps. In-process calls (MCP tools) take it at the
start of the handler. The sweeps run on the event loop over the live context, checking the
request's deadline as they go; the twin sweeps (the expensive part) run in a worker thread over
copies of the spelling index and name vectors, so the event loop keeps serving meanwhile; large
results are drawn and encoded there too (in pieces, so the loop gets the interpreter between them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from taguru_server.server.call import Call, Route
from taguru_server.server.decode import PREFIX, Spec, parse_json
from taguru_server.server.errors import malformed
from taguru_server.server.routes.common import before_start, count_read, permit
from taguru_server.server.state import EMBEDDER_KEY
from taguru_server.server.wire.audits import CONSOLIDATION_AUDIT, DRIFT_AUDIT, VOCABULARY_AUDIT
from taguru_server.server.wire.render import audits as audit_wire
from taguru_server.server.wire.render.consolidation import consolidation_out
from taguru_server.store.derive import audits, consolidation
from taguru_server.store.derive import twins as twins_module
from taguru_server.store.errors import ApiError, Code, budget_spent
from taguru_server.store.model.context import CONCEPT, LABEL, Context
from taguru_server.store.persist.writer import collector_paused
from taguru_server.store.wire import Encoded, encode_in_pieces

# ----- shared pieces ------------------------------------------------------------------------


def optional_body(spec: Spec, raw: bytes) -> dict[str, Any]:
    """The optional-body discipline: empty is every default; any other failure is one 400 (any Content-Type)."""
    value: Any = {} if raw == b"" else None
    try:
        if value is None:
            value = parse_json(raw)
        return spec.decode(value, raw)
    except ApiError as exc:
        detail = exc.message
        for prefix in (PREFIX, "Failed to parse the request body as JSON: "):
            detail = detail.removeprefix(prefix)
        raise malformed(f"the request body is not valid JSON: {detail}", status=400) from None


def vectors_serve(call: Call, ctx: Context) -> bool:
    """Gloss vectors made under the configured provider's model exist (else the semantic half is skipped)."""
    embedder = call.app_state.get(EMBEDDER_KEY)
    store = ctx.vectors.glosses
    return embedder is not None and store is not None and store.model == embedder.model


def floors(args: dict[str, Any]) -> tuple[float, float]:
    return audits.clamp01(args["dice_floor"]), audits.clamp01(args["cosine_floor"])


T = TypeVar("T")


async def apart(work: Callable[[], T]) -> T:
    """Run an audit's reading of the context in a worker thread (the caller holds the registry quiesced).

    The event loop keeps serving meanwhile; the context cannot change under the thread, since this
    process's writes and catch-ups wait for the quiesce.
    """

    def paused() -> T:
        with collector_paused():
            return work()

    try:
        return await asyncio.to_thread(paused)
    except audits.Expired:
        raise budget_spent() from None


async def sweep(call: Call, ctx: Context, kinds: tuple[int, ...], args: dict[str, Any]) -> twins_module.Twins:
    """The twin sweeps (spelling index and name vectors), in a worker thread."""
    dice, cosine = floors(args)
    vectors = vectors_serve(call, ctx)
    return await apart(lambda: twins_module.sweep(ctx, kinds, dice, cosine, call.deadline, vectors))


async def twins(call: Call, ctx: Context, args: dict[str, Any]) -> Encoded:
    """The vocabulary result, drawn and encoded in the worker thread (tens of MB on a twin-heavy context)."""
    found = await sweep(call, ctx, (CONCEPT, LABEL), args)
    return await apart(lambda: encode_in_pieces(audit_wire.vocabulary(ctx, found)))


# ----- handlers ----------------------------------------------------------------------------


async def vocabulary_audit(call: Call) -> Any:
    """The vocabulary audit: permit (taken before the body), body, budget, context, sweep."""
    with permit(call.app_state):
        args = optional_body(VOCABULARY_AUDIT, call.body)
        before_start(call)
        ctx = call.context()
        async with call.registry.quiesced():
            return await twins(call, ctx, args)


async def drift_audit(call: Call) -> Any:
    """The drift audit: body, budget, context, the unsourced and dead-alias sweeps, then (permit) the twins."""
    args = optional_body(DRIFT_AUDIT, call.body)
    before_start(call)
    ctx = call.context()
    floor = 0.0 if args["unsourced_floor"] is None else float(args["unsourced_floor"])

    def sweeps() -> tuple[int, Encoded, tuple[dict[str, str], dict[str, str]]]:
        total, page = audit_wire.unsourced(ctx, floor, args["limit"], args["after"], call.deadline)
        return total, encode_in_pieces(page), audits.dead_aliases(ctx)

    async with call.registry.quiesced():
        total, page, (dead_concepts, dead_labels) = await apart(sweeps)
        found = None
        if args["include_twins"]:
            with permit(call.app_state):
                found = await twins(call, ctx, args)
    count_read(ctx, False)
    result = {
        "total": total,
        "unsourced": page,
        "dead_concept_aliases": dead_concepts,
        "dead_label_aliases": dead_labels,
        "twins": found,
    }
    return await asyncio.to_thread(encode_in_pieces, result)  # the pieces are spliced, the dead aliases encoded


def checked_sections(checks: list[str]) -> set[str]:
    """The consolidation body's own checks: consecutive duplicates dropped, not empty, every name known."""
    deduped = [c for i, c in enumerate(checks) if i == 0 or checks[i - 1] != c]
    if not deduped:
        raise ApiError(
            Code.INVALID_ARGUMENT,
            "'checks' must name at least one of merge, contradiction, staleness — every section is a full-graph "
            "pass, so the caller names what it pays for",
        )
    for c in deduped:
        if c not in consolidation.CHECKS:
            raise ApiError(Code.INVALID_ARGUMENT, f"unknown check '{c}' — merge, contradiction, and staleness exist")
    return set(deduped)


async def consolidation_audit(call: Call) -> Any:
    """The consolidation audit: permit (taken before the body), typed body, checks, budget, context, sections."""
    with permit(call.app_state):
        args = await call.decode(CONSOLIDATION_AUDIT)
        sections = checked_sections(args["checks"])
        before_start(call)
        ctx = call.context()
        async with call.registry.quiesced():
            found = await sweep(call, ctx, (CONCEPT,), args) if "merge" in sections else None
            return await apart(
                lambda: encode_in_pieces(
                    consolidation_out(
                        consolidation.consolidation(
                            ctx,
                            sections,
                            limit=args["limit"],
                            evidence_cap=args["evidence_cap"],
                            floor_secs=args["floor_secs"],
                            deadline=call.deadline,
                            twins=found,
                        )
                    )
                )
            )


ROUTES: list[Route] = [
    Route(
        "POST",
        "/contexts/{name}/vocabulary/audit",
        vocabulary_audit,
        "read",
        request=VOCABULARY_AUDIT,
        response="VocabularyAudit",
        optional_body=True,
        heavy_before_body=True,
    ),
    Route(
        "POST",
        "/contexts/{name}/drift/audit",
        drift_audit,
        "read",
        request=DRIFT_AUDIT,
        response="DriftAudit",
        optional_body=True,
    ),
    Route(
        "POST",
        "/contexts/{name}/consolidation/audit",
        consolidation_audit,
        "read",
        request=CONSOLIDATION_AUDIT,
        response="ConsolidationAudit",
        heavy_before_body=True,
    ),
]
