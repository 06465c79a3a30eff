"""The stage-graph engine: typed keys, stages, outcomes, validation and execution."""

from taguru_server.pipeline.core import DEGRADED, FAILED, RAN, SKIPPED, Key, Outcome, Stage, StageContext
from taguru_server.pipeline.executor import PlanEntry, RunResult, StageHooks, StageSpans, check_contracts, run_graph
from taguru_server.pipeline.graph import Graph, GraphError

__all__ = [
    "DEGRADED",
    "FAILED",
    "RAN",
    "SKIPPED",
    "Graph",
    "GraphError",
    "Key",
    "Outcome",
    "PlanEntry",
    "RunResult",
    "Stage",
    "StageContext",
    "StageHooks",
    "StageSpans",
    "check_contracts",
    "run_graph",
]
