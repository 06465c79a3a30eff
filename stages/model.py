"""The evidence request, candidates, lane results and the typed keys the stages exchange."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import attrs

from taguru_server.pipeline import Key
from taguru_server.store.errors import BEFORE_START, ApiError, Code
from taguru_server.store.model.context import Context
from taguru_server.store.persist.registry import Registry

T = TypeVar("T")

# The plan reason of a lane that needs anchors when none resolved (query, activate).
NO_ANCHORS = "no anchors resolved from 'origins'"

GATE_MESSAGE = BEFORE_START


# The evidence request's defaults and ceilings; the published request spec refers to these.
MAX_CUES = 1000  # origins / labels per request; more is a 400 over_limit
DEFAULT_RESOLVE_LIMIT = 1000
DEFAULT_ACTIVATE_DECAY = 0.5
DEFAULT_ACTIVATE_LIMIT = 20
MATCH_LIMIT_CEILING = 1000  # resolve_limit and activate_limit
DEFAULT_SEARCH_LIMIT = 5
SEARCH_LIMIT_CEILING = 200
DEFAULT_MAX_ITEMS = 40
MAX_ITEMS_CEILING = 1000
DEFAULT_MAX_BYTES = 65536
MAX_BYTES_CEILING = 1048576
DEFAULT_MAX_TOKENS = 4000


@attrs.frozen
class EvidenceRequest:
    """A validated request with every default and ceiling applied."""

    origins: tuple[str, ...]
    labels: tuple[str, ...] = ()
    dice_floor: float | None = None
    semantic_floor: float | None = None
    resolve_limit: int = DEFAULT_RESOLVE_LIMIT
    activate_decay: float = DEFAULT_ACTIVATE_DECAY
    activate_limit: int = DEFAULT_ACTIVATE_LIMIT
    query: str = ""
    search_limit: int = DEFAULT_SEARCH_LIMIT
    include_communities: bool = False
    max_items: int = DEFAULT_MAX_ITEMS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_tokens: int = DEFAULT_MAX_TOKENS
    rerank_requested: bool = False
    rerank_model: str | None = None
    include_graph_passages: bool = False


@attrs.frozen
class RerankVerdict:
    """What the reranker did: a permutation to apply (or None) and the reason token."""

    permutation: tuple[int, ...] | None
    reason: str | None


class Reranker(Protocol):
    """A reorder-only provider; it never raises, it answers a verdict."""

    @property
    def configured(self) -> bool: ...

    @property
    def model(self) -> str | None: ...

    async def rerank(
        self, query: str, documents: list[str], remaining: Callable[[], float | None]
    ) -> RerankVerdict: ...


@attrs.frozen
class NoReranker:
    """The default: no provider configured."""

    configured: bool = False
    model: str | None = None

    async def rerank(self, query: str, documents: list[str], remaining: Callable[[], float | None]) -> RerankVerdict:
        return RerankVerdict(None, "not_configured")


SemanticTier = Callable[[Any, str, list[Any], list[Any], float | None], Awaitable[list[tuple[str, float]]]]


@attrs.frozen
class Services:
    """What the stages may reach beyond the request: other contexts (scoped) and the reranker."""

    registry: Registry
    may_access: Callable[[str], bool]
    reranker: Reranker = attrs.field(factory=NoReranker)
    observe_rerank: Callable[[str, float], None] | None = None
    # the vector lane's query state for (context, query text, request floor); None: no semantic lanes
    vector_query: Callable[[Any, str, float | None], Awaitable[Any]] | None = None
    # resolve's semantic candidates for (context, cue, served lexical, all lexical, request floor)
    semantic_tier: SemanticTier | None = None
    # runs a whole-context build (the graph-passages walk's arrays) in another thread while no loaded
    # context can change; None: the stage builds inline
    build_apart: Callable[[Callable[[], object]], Awaitable[None]] | None = None


@attrs.frozen
class Candidate:
    """One lane result: its identity, its rank in that lane, its payload and selection facts.

    `locators` are sorted and distinct (the (source, paragraph) pairs of its attributions)."""

    kind: str
    canonical_key: str
    lane: str
    rank: int
    payload: Any = attrs.field(eq=False, repr=False)
    source: str | None = None
    locators: tuple[tuple[str, int], ...] = ()
    corroborating: tuple[str, ...] = ()
    relation: tuple[str, str] | None = None
    text: str = ""

    @property
    def candidate_id(self) -> str:
        return f"{self.kind}\u0000{self.canonical_key}"


@attrs.frozen
class Group:
    """The copies of one candidate merged: the representative, its best rank per lane, merged locators."""

    candidate: Candidate
    lane_ranks: tuple[tuple[str, int], ...]
    locators: tuple[tuple[str, int], ...]

    @property
    def candidate_id(self) -> str:
        return self.candidate.candidate_id


@attrs.frozen
class Fused:
    """A fused candidate: a merged group with its RRF score and its rank in fused order."""

    candidate: Candidate
    lane_ranks: tuple[tuple[str, int], ...]
    locators: tuple[tuple[str, int], ...]
    score: float
    fused_rank: int = 0

    @property
    def candidate_id(self) -> str:
        return self.candidate.candidate_id


@attrs.frozen
class LaneResult(Generic[T]):
    """A lane's output and its wire plan entry ({ran, reason?})."""

    value: T
    ran: bool
    reason: str | None = None
    # what explain shows of the lane beyond its plan entry (resolve: each origin's OriginAnchor)
    detail: Any = attrs.field(default=None, eq=False, repr=False)

    def plan(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ran": self.ran}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@attrs.frozen
class OriginAnchor:
    """One origin and what resolve made of it: the anchor's name, its tier and score (all None: nothing served)."""

    origin: str
    name: str | None = None
    tier: str | None = None
    score: float | None = None


@attrs.frozen
class Unit:
    """An admission unit: one candidate, or a whole contradiction group."""

    members: tuple[Fused, ...]

    @property
    def representative(self) -> Fused:
        return self.members[0]


@attrs.frozen
class Omission:
    candidate_id: str
    kind: str
    reason: str
    duplicate_of: str | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"candidate_id": self.candidate_id, "kind": self.kind, "reason": self.reason}
        if self.duplicate_of is not None:
            out["duplicate_of"] = self.duplicate_of
        return out


@attrs.frozen
class Selection:
    """The budget stage's result: the package body minus the plan."""

    items: tuple[dict[str, Any], ...]
    citations: tuple[dict[str, Any], ...]
    budget: dict[str, Any]
    omitted: tuple[Omission, ...]
    items_json: tuple[str, ...] = ()  # the same items, serialized once while measuring
    citations_json: tuple[str, ...] = ()


# Inputs
REQUEST: Key[EvidenceRequest] = Key("request", EvidenceRequest)
CONTEXT: Key[Context] = Key("context", Context)
SERVICES: Key[Services] = Key("services", Services)
# Selection (the lanes' keys are declared with the lane registry, stages/lanes.py)
GROUPS: Key[tuple[Group, ...]] = Key("groups", tuple)
DEDUP_DROPPED: Key[int] = Key("dedup_dropped", int)
RANKED: Key[tuple[Fused, ...]] = Key("ranked", tuple)
SURVIVORS: Key[tuple[Fused, ...]] = Key("survivors", tuple)
NEAR_DUP_OMITTED: Key[tuple[Omission, ...]] = Key("near_dup_omitted", tuple)
REORDERED: Key[tuple[Fused, ...]] = Key("reordered", tuple)
RERANK_PLAN: Key[dict[str, Any]] = Key("rerank_plan", dict)
UNITS: Key[tuple[Unit, ...]] = Key("units", tuple)
CONTRADICTION_GROUPS: Key[int] = Key("contradiction_groups", int)
TIERED: Key[tuple[Unit, ...]] = Key("tiered", tuple)
TIER_WIDTH: Key[int] = Key("tier_width", int)
SELECTION: Key[Selection] = Key("selection", Selection)

INPUTS = (REQUEST, CONTEXT, SERVICES)


def gate(remaining: float | None) -> None:
    """A handler deadline gate: refuse to start an operation once the budget is spent."""
    if remaining is not None and remaining <= 0:
        raise ApiError(Code.TIMEOUT, GATE_MESSAGE)
