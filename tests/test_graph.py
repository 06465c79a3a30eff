"""The pipeline engine: validation errors, describe(), failure handling, plan order."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from taguru_server.pipeline import Graph, GraphError, Key, Outcome, StageContext, check_contracts, run_graph
from taguru_server.pipeline.executor import ContractChecks
from taguru_server.stages.lanes import ANCHORS
from taguru_server.stages.wiring import evidence_graph

A: Key[int] = Key("a", int)
B: Key[int] = Key("b", int)
C: Key[int] = Key("c", int)
IN: Key[int] = Key("in", int)


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


def test_an_output_nobody_provides_is_a_wiring_error() -> None:
    with pytest.raises(GraphError) as err:
        Graph([_stage("x", (IN,), (A,))], [IN], outputs=(A, B))
    assert "output 'b' is declared, but no stage provides it" in str(err.value)


@pytest.mark.anyio
async def test_run_result_serves_declared_outputs_only() -> None:
    graph = Graph([_stage("x", (IN,), (A,)), _stage("y", (A,), (B,))], [IN], outputs=(B,))
    run = await run_graph(graph, {IN: 1})
    assert run.output(B) == 1
    with pytest.raises(KeyError, match="'a' is not a declared output"):
        run.output(A)


@pytest.mark.anyio
async def test_a_value_of_the_wrong_type_fails_its_stage() -> None:
    assert ContractChecks.enabled  # the suite runs with contract checking on (conftest.py)
    graph = Graph(
        [_stage("resolve", (), (ANCHORS,), lambda ctx: Outcome.ran({ANCHORS: 42})), _stage("y", (ANCHORS,), (B,))]
    )
    run = await run_graph(graph, {})
    statuses = {e.stage: (e.status, e.reason) for e in run.entries}
    assert statuses == {"resolve": ("failed", "exception"), "y": ("skipped", "upstream_failed")}
    assert str(run.failure) == "stage 'resolve' provided 'anchors' as int, declared LaneResult"


@pytest.mark.anyio
async def test_value_types_go_unchecked_when_checking_is_off() -> None:
    graph = Graph([_stage("resolve", (), (ANCHORS,), lambda ctx: Outcome.ran({ANCHORS: 42}))])
    check_contracts(False)
    try:
        run = await run_graph(graph, {})
    finally:
        check_contracts(True)
    assert run.entries[0].status == "ran"
