"""Level-by-level execution with anyio; deterministic plan order; per-stage logs and hooks."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio
import attrs
import structlog

from taguru_server.pipeline.core import FAILED, SKIPPED, Key, Outcome, StageContext
from taguru_server.pipeline.graph import Graph

log = structlog.get_logger("taguru.pipeline")


class StageHooks(Protocol):
    """Receives one call per finished stage (for metrics)."""

    def stage_finished(self, stage: str, status: str, reason: str | None, seconds: float) -> None: ...


@attrs.frozen
class PlanEntry:
    """One stage's deterministic record: status, reason token, small counts (no timings)."""

    stage: str
    status: str
    reason: str | None
    detail: Mapping[str, int]


@attrs.frozen
class RunResult:
    values: Mapping[Key[Any], Any]
    entries: list[PlanEntry]
    durations: Mapping[str, float]
    failure: BaseException | None
    failed_stage: str | None


class ContractViolation(RuntimeError):
    """A stage returned values other than the ones it declared."""


async def run_graph(
    graph: Graph,
    inputs: Mapping[Key[Any], Any],
    *,
    clock: Callable[[], float] = time.monotonic,
    deadline: float | None = None,
    hooks: StageHooks | None = None,
) -> RunResult:
    """Run every stage once, level by level; failures skip their downstream stages."""
    missing = [k.name for k in graph.inputs if k not in inputs]
    if missing:
        raise ValueError(f"graph inputs missing: {', '.join(missing)}")
    values: dict[Key[Any], Any] = dict(inputs)
    outcomes: dict[str, Outcome] = {}
    durations: dict[str, float] = {}
    blocked: set[str] = set()
    for level in graph.levels:

        async def run_one(stage: Any) -> None:
            if stage.name in blocked:
                outcomes[stage.name] = Outcome.skipped("upstream_failed")
                durations[stage.name] = 0.0
                return
            started = clock()
            ctx = StageContext(values, tuple(stage.requires), stage.name, clock, deadline)
            with structlog.contextvars.bound_contextvars(stage=stage.name):
                try:
                    outcome = await stage.run(ctx)
                    if outcome.status != FAILED and set(outcome.values) != set(stage.provides):
                        raise ContractViolation(
                            f"stage '{stage.name}' returned {sorted(k.name for k in outcome.values)}, "
                            f"declared {sorted(k.name for k in stage.provides)}"
                        )
                except Exception as exc:  # recorded, reported by the caller
                    outcome = Outcome.failed(getattr(exc, "code", None) or "exception", exc)
                elapsed = clock() - started
                outcomes[stage.name] = outcome
                durations[stage.name] = elapsed
                log.info(
                    "stage.finished",
                    stage=stage.name,
                    status=outcome.status,
                    reason=outcome.reason,
                    duration_ms=round(elapsed * 1000, 3),
                    **dict(outcome.detail),
                )
            if hooks is not None:
                hooks.stage_finished(stage.name, outcome.status, outcome.reason, elapsed)

        if len(level) == 1:
            await run_one(level[0])  # nothing to overlap with: skip the task group
        else:
            async with anyio.create_task_group() as tg:
                for stage in level:
                    tg.start_soon(run_one, stage)
        for stage in level:
            outcome = outcomes[stage.name]
            if outcome.status == FAILED:
                blocked |= graph.downstream(stage.name)
            elif stage.name not in blocked or outcome.status != SKIPPED:
                values.update(outcome.values)
    entries = [
        PlanEntry(name, outcomes[name].status, outcomes[name].reason, dict(outcomes[name].detail))
        for name in graph.plan_order
    ]
    failed = [name for name in graph.declared_order if outcomes[name].status == FAILED]
    failure = outcomes[failed[0]].error if failed else None
    log.info("pipeline.finished", stages=len(entries), failed=failed[0] if failed else None)
    return RunResult(values, entries, durations, failure, failed[0] if failed else None)
