"""The pipeline engine: validation errors, describe(), failure handling, plan order."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from taguru_server.pipeline import Graph, GraphError, Key, Outcome, StageContext, run_graph
from taguru_server.stages.wiring import evidence_graph

A: Key[int] = Key("a")
B: Key[int] = Key("b")
C: Key[int] = Key("c")
IN: Key[int] = Key("in")


def _stage(name: str, requires: tuple[Key[Any], ...], provides: tuple[Key[Any], ...], fn=None):
    @attrs.frozen
    class S:
        async def run(self, ctx: StageContext) -> Outcome:
            if fn is not None:
                return fn(ctx)
            return Outcome.ran({k: 1 for k in provides})

    S.name = name  # type: ignore[attr-defined]
    S.requires = requires  # type: ignore[attr-defined]
    S.provides = provides  # type: ignore[attr-defined]
    return S()


def test_evidence_graph_describe(snapshot) -> None:
    assert evidence_graph().describe() == snapshot


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([_stage("x", (), (A,)), _stage("x", (), (B,))], "two stages are named 'x'"),
        ([_stage("x", (), (A,)), _stage("y", (), (A,))], "key 'a' is provided twice: by 'x' and by 'y'"),
        ([_stage("x", (B,), (A,))], "stage 'x' requires 'b', which no stage provides"),
        ([_stage("x", (B,), (A,)), _stage("y", (A,), (B,))], "stages form a cycle"),
    ],
)
def test_graph_validation(stages, message) -> None:
    with pytest.raises(GraphError) as err:
        Graph(stages)
    assert message in str(err.value)


@pytest.mark.anyio
async def test_failure_skips_downstream_and_reports_the_first_declared() -> None:
    def boom(ctx):
        raise RuntimeError("bug")

    graph = Graph([_stage("x", (IN,), (A,), boom), _stage("y", (A,), (B,)), _stage("z", (IN,), (C,))], [IN])
    run = await run_graph(graph, {IN: 1})
    statuses = {e.stage: (e.status, e.reason) for e in run.entries}
    assert statuses == {"x": ("failed", "exception"), "y": ("skipped", "upstream_failed"), "z": ("ran", None)}
    assert run.failed_stage == "x" and isinstance(run.failure, RuntimeError)
    assert [e.stage for e in run.entries] == ["x", "z", "y"]  # (level, name)


@pytest.mark.anyio
async def test_stage_must_return_what_it_declares() -> None:
    graph = Graph([_stage("x", (), (A,), lambda ctx: Outcome.ran({}))])
    run = await run_graph(graph, {})
    assert run.entries[0].status == "failed"


@pytest.mark.anyio
async def test_stage_cannot_read_undeclared_keys() -> None:
    graph = Graph([_stage("x", (), (A,), lambda ctx: Outcome.ran({A: ctx[IN]}))], [IN])
    run = await run_graph(graph, {IN: 1})
    assert run.entries[0].status == "failed" and isinstance(run.failure, KeyError)
