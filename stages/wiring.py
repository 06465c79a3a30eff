"""The one wiring list: every evidence stage, in the contract's order of precedence."""

from __future__ import annotations

from taguru_server.pipeline import Graph, Stage
from taguru_server.stages.activate import Activate
from taguru_server.stages.budget import Budget
from taguru_server.stages.cite import Cite
from taguru_server.stages.communities import Communities
from taguru_server.stages.contradict import Contradict
from taguru_server.stages.dedup import Dedup, GraphDedup
from taguru_server.stages.diversify import Diversify, GraphDiversify
from taguru_server.stages.fuse import Fuse, GraphFuse
from taguru_server.stages.graph_passages import GraphPassages
from taguru_server.stages.model import INPUTS
from taguru_server.stages.near_dup import NearDup
from taguru_server.stages.package import GRAPH_OUTPUTS, OUTPUTS
from taguru_server.stages.passages import Passages
from taguru_server.stages.query import Query
from taguru_server.stages.rerank import Rerank
from taguru_server.stages.resolve import Resolve

# Declaration order is the order of error precedence (docs/stages.md): when several stages fail,
# the client gets the error of the first one listed here. Lane stages come first, in the
# order of the lane registry (stages/lanes.py).
STAGES: tuple[Stage, ...] = (
    Resolve(),
    Query(),
    Activate(),
    Passages(),
    Communities(),
    Cite(),
    Dedup(),
    Fuse(),
    NearDup(),
    Rerank(),
    Contradict(),
    Diversify(),
    Budget(),
)


def evidence_graph() -> Graph:
    """The validated evidence graph."""
    return Graph(STAGES, INPUTS, OUTPUTS)


# The graph-passages mode (`include_graph_passages`): the graph lane after `passages`, dedup pooling it,
# fusion weighting its ranks, and diversify putting the units that add no paragraph last; every other
# stage is the same.
GRAPH_STAGES: tuple[Stage, ...] = (
    *STAGES[:4],
    GraphPassages(),
    *STAGES[4:6],
    GraphDedup(),
    GraphFuse(),
    *STAGES[8:11],
    GraphDiversify(),
    *STAGES[12:],
)


def graph_passages_graph() -> Graph:
    """The validated evidence graph of the graph-passages mode."""
    return Graph(GRAPH_STAGES, INPUTS, GRAPH_OUTPUTS)
