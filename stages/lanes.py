"""The lane registry: every evidence lane, its typed key, and what fusion and citation take from it."""

from __future__ import annotations

from typing import Any

import attrs

from taguru_server.pipeline import Key
from taguru_server.stages.model import Candidate, LaneResult
from taguru_server.store.read.citations import Citation

# The lanes' keys: each is provided by exactly one lane stage.
ANCHORS: Key[LaneResult[tuple[str, ...]]] = Key("anchors", LaneResult)
QUERY_HITS: Key[LaneResult[tuple[Candidate, ...]]] = Key("query_hits", LaneResult)
ACTIVATE_HITS: Key[LaneResult[tuple[Candidate, ...]]] = Key("activate_hits", LaneResult)
PASSAGE_HITS: Key[LaneResult[tuple[Candidate, ...]]] = Key("passage_hits", LaneResult)
COMMUNITY_HITS: Key[LaneResult[tuple[Candidate, ...]]] = Key("community_hits", LaneResult)
GRAPH_PASSAGE_HITS: Key[LaneResult[tuple[Candidate, ...]]] = Key("graph_passage_hits", LaneResult)
CITATIONS: Key[LaneResult[dict[tuple[str, int], Citation]]] = Key("citations", LaneResult)


@attrs.frozen
class Lane:
    """One lane: its name in the wire plan, the key its stage provides, and how later stages use it.

    `candidates`: its value is a tuple of candidates that dedup pools for fusion.
    `cited`: its candidates' locators are resolved to citations by the cite stage.
    """

    plan_name: str
    key: Key[LaneResult[Any]]
    candidates: bool = False
    cited: bool = False

    def __attrs_post_init__(self) -> None:
        if self.cited and not self.candidates:
            raise ValueError(f"lane '{self.plan_name}' is cited but produces no candidates")


# Registry order is the order of `plan.lanes` on the wire and the order dedup pools candidates in.
LANES: tuple[Lane, ...] = (
    Lane("resolve", ANCHORS),
    Lane("query", QUERY_HITS, candidates=True, cited=True),
    Lane("activate", ACTIVATE_HITS, candidates=True, cited=True),
    Lane("passages", PASSAGE_HITS, candidates=True),
    Lane("communities", COMMUNITY_HITS, candidates=True),
    Lane("citations", CITATIONS),
)

PLAN_NAMES: tuple[str, ...] = tuple(lane.plan_name for lane in LANES)
LANE_KEYS: tuple[Key[Any], ...] = tuple(lane.key for lane in LANES)
CANDIDATE_KEYS: tuple[Key[LaneResult[tuple[Candidate, ...]]], ...] = tuple(
    lane.key for lane in LANES if lane.candidates
)
CITED_KEYS: tuple[Key[LaneResult[tuple[Candidate, ...]]], ...] = tuple(lane.key for lane in LANES if lane.cited)

# The graph-passages mode (`include_graph_passages`): the same lanes with the graph-ranked passage lane
# after `passages`. It is a separate registry, and so a separate graph, so that a request without the
# mode runs exactly the graph, and renders exactly the package, it always did.
GRAPH_LANES: tuple[Lane, ...] = (*LANES[:4], Lane("graph_passages", GRAPH_PASSAGE_HITS, candidates=True), *LANES[4:])
GRAPH_PLAN_NAMES: tuple[str, ...] = tuple(lane.plan_name for lane in GRAPH_LANES)
GRAPH_LANE_KEYS: tuple[Key[Any], ...] = tuple(lane.key for lane in GRAPH_LANES)
GRAPH_CANDIDATE_KEYS: tuple[Key[LaneResult[tuple[Candidate, ...]]], ...] = tuple(
    lane.key for lane in GRAPH_LANES if lane.candidates
)
if len(set(GRAPH_PLAN_NAMES)) != len(GRAPH_PLAN_NAMES):
    raise ValueError("two lanes share a plan name")
