"""The one wiring list: every evidence stage, in the contract's order of precedence."""

from __future__ import annotations

from pipeline import Graph, Stage
from stages.activate import Activate
from stages.budget import Budget
from stages.cite import Cite
from stages.communities import Communities
from stages.contradict import Contradict
from stages.dedup import Dedup
from stages.diversify import Diversify
from stages.fuse import Fuse
from stages.model import INPUTS
from stages.near_dup import NearDup
from stages.passages import Passages
from stages.query import Query
from stages.rerank import Rerank
from stages.resolve import Resolve

# Declaration order is the order of error precedence (§14.6): when several stages fail,
# the client gets the error of the first one listed here.
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
    return Graph(STAGES, INPUTS)
