"""The exact-match retrieval cache (`TAGURU_RETRIEVAL_CACHE_BYTES`): finished `result` payloads of recall,
query, passage search and community search, keyed on everything that can change their answer.

A key is `(op, route, targets, params)`: `targets` is the resolved target list in search order, each
target as its name, its incarnation (a number given to each context object this process builds, so
a compaction's rebuild, a reload or a delete and re-create never matches an old entry) and its read
version (the graph, passage and configuration revisions, the in-memory edge and index versions);
`params` is the request body canonicalised (keys sorted, no insignificant space) with the query
string. The key is made before the handler runs, so an entry is never older than its key. Only full
successes are stored: an error, a result of another shape, or a passage search whose query
embedding failed is served and not stored. An entry costs its payload plus its key; one costing more
than a quarter of the budget is served uncached; the least recently used entries go first.

A hit replays what the fresh path does besides computing (the usage counters of each target, the
passage lane counts, the search log line) and returns the stored bytes, spliced into a fresh
envelope. Each process (each worker of `taguru serve --workers N`) keeps its own cache.
"""

from __future__ import annotations

import itertools
import json
import weakref
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import attrs
import structlog
from aiohttp import web

from taguru_server.server.call import Call, Handler, Route
from taguru_server.server.decode import Spec, is_json_content_type
from taguru_server.server.semantic import QueryFailed, cue_cache, query_vector
from taguru_server.server.semantic_cache import SEMANTIC_CACHE_KEY, SemanticCache
from taguru_server.server.state import EMBEDDER_KEY, METRICS_KEY, passage_lane_enabled
from taguru_server.server.tracing import TRACING_KEY
from taguru_server.store.model.context import Context
from taguru_server.store.read.cache import read_version
from taguru_server.store.wire import Encoded, dumps_bytes

OPS = ("recall", "query", "search_passages", "search_communities")
DEFAULT_BUDGET_BYTES = 33554432
ENTRY_OVERHEAD_BYTES = 64
TARGET_OVERHEAD_BYTES = 24

search_log = structlog.get_logger("taguru.search")


class RetrievalCache:
    """A byte-bounded LRU map from a key to its entry (the budget 0 disables it)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: OrderedDict[Any, Entry] = OrderedDict()
        self.bytes = 0

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def get(self, key: Any) -> Entry | None:
        """The entry under `key` (now the most recently used), or None."""
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, key: Any, entry: Entry) -> bool:
        """Admit an entry, evicting the least recently used until it fits; False when it costs over budget / 4."""
        if entry.cost > self.budget // 4:
            return False
        old = self.entries.pop(key, None)
        if old is not None:
            self.bytes -= old.cost
        while self.entries and self.bytes + entry.cost > self.budget:
            _key, evicted = self.entries.popitem(last=False)
            self.bytes -= evicted.cost
        self.entries[key] = entry
        self.bytes += entry.cost
        return True


RETRIEVAL_CACHE_KEY: web.AppKey[RetrievalCache] = web.AppKey("retrieval_cache", RetrievalCache)


@attrs.frozen
class Entry:
    """A stored answer: the `result` bytes, what it costs, and the side effects a hit replays."""

    payload: bytes
    cost: int
    reads: tuple[tuple[str, bool], ...]  # (target, found nothing) per usage count the fresh path made
    lanes: tuple[Any, ...]  # the served hits' `lanes` records the passage lane counter saw
    searches: tuple[tuple[str, bool], ...]  # (op, found nothing) per `taguru_searches_total` count
    summary: dict[str, Any]  # the search log line's fields (no query text)


@attrs.define
class Recorder:
    """What a fresh computation under the cache did besides computing."""

    reads: list[tuple[str, bool]] = attrs.field(factory=list)
    lanes: list[Any] = attrs.field(factory=list)
    searches: list[tuple[str, bool]] = attrs.field(factory=list)
    uncacheable: bool = False


_RECORDER: ContextVar[Recorder | None] = ContextVar("taguru_retrieval_recorder", default=None)


def note_read(name: str, empty: bool) -> None:
    """A usage count of the computation being cached (replayed on each hit)."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.reads.append((name, empty))


def note_searched(op: str, empty: bool) -> None:
    """A `taguru_searches_total` count of the computation being cached (replayed on each hit)."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.searches.append((op, empty))


def note_lanes(hits: list[Any]) -> None:
    """Served hits the passage lane counter counted (replayed on each hit)."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.lanes.extend({"lanes": hit.get("lanes")} for hit in hits)


def note_uncacheable() -> None:
    """The computation being cached must not be stored (a query embedding failed: the next one retries)."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.uncacheable = True


_INCARNATIONS: weakref.WeakKeyDictionary[Context, int] = weakref.WeakKeyDictionary()
_NEXT = itertools.count(1)


def incarnation(ctx: Context) -> int:
    """This context object's number: every rebuilt, reloaded or re-created context is a new object."""
    number = _INCARNATIONS.get(ctx)
    if number is None:
        number = _INCARNATIONS[ctx] = next(_NEXT)
    return number


def fingerprint(ctx: Context) -> tuple[Any, ...]:
    """What of one target an answer depends on: identity, revisions, in-memory versions."""
    meta = ctx.meta
    return (ctx.name, ctx.cid, incarnation(ctx), meta.rev_graph, meta.rev_passages, meta.rev_config, *read_version(ctx))


class _NoKey(Exception):
    """The request cannot be keyed (it is computed, not cached)."""


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NoKey
    return out


def _no_constant(name: str) -> Any:
    raise _NoKey


def canonical_body(raw: bytes) -> tuple[Any, bytes]:
    """The parsed body and its canonical bytes; _NoKey for a body that is not plain JSON (it is left to the
    handler's own decoding and refusals)."""
    try:
        body = json.loads(raw.decode("utf-8"), object_pairs_hook=_refuse_duplicates, parse_constant=_no_constant)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return body, text.encode("utf-8")
    except (ValueError, RecursionError, UnicodeError):
        raise _NoKey from None


# a route's resolved targets from the call and its parsed body (any exception: no key)
Targets = Callable[[Call, Any], list[Context]]


@attrs.frozen
class Keyed:
    """A request's key, its cost without the payload, and what the paraphrase tier needs of it."""

    key: tuple[Any, ...]
    cost: int
    body: dict[str, Any]
    names: tuple[str, ...]


def make_key(call: Call, op: str, targets: Targets) -> Keyed | None:
    """The request's key and its cost without the payload, or None when it cannot be keyed."""
    try:
        if not is_json_content_type(call.headers.get("Content-Type")):
            return None
        body, params = canonical_body(call.body)
        if not isinstance(body, dict):
            return None
        contexts = targets(call, body)
        query = json.dumps(sorted(call.query.items()), ensure_ascii=False).encode("utf-8")
    except Exception:
        return None
    prints = tuple(fingerprint(ctx) for ctx in contexts)
    key = (op, call.path, prints, params, query)
    cost = sum(len(ctx.name.encode("utf-8")) + TARGET_OVERHEAD_BYTES for ctx in contexts)
    names = tuple(ctx.name for ctx in contexts)
    return Keyed(key, cost + len(params) + len(query) + ENTRY_OVERHEAD_BYTES, body, names)


def cached_read(template: str, op: str, handler: Handler, targets: Targets, request: Spec, response: str) -> Route:
    """A retrieval's route (POST, the read role): `handler` behind the retrieval cache as `op`."""
    return Route("POST", template, cached(op, handler, targets), "read", request=request, response=response)


def cached(op: str, handler: Handler, targets: Targets) -> Handler:
    """`handler` behind the app's retrieval cache (off: the handler itself)."""

    async def run(call: Call) -> Any:
        cache = call.app_state.get(RETRIEVAL_CACHE_KEY)
        keyed = make_key(call, op, targets) if cache is not None and cache.enabled else None
        if cache is None or keyed is None:
            result = await handler(call)
            if type(result) is dict and call.settings.log_searches:
                log_search(call, summarize(op, call, result), False)
            return result
        metrics = call.app_state.get(METRICS_KEY)
        entry = cache.get(keyed.key)
        if metrics is not None:
            metrics.retrieval_cache.labels(op, "miss" if entry is None else "hit").inc()
        if entry is not None:
            replay(call, entry)
            traced_hit(call, op, keyed, "retrieval_cache_hit")
            return Encoded(entry.payload)
        paraphrase = await paraphrased(call, cache, keyed) if op == "search_passages" else None
        if paraphrase is not None and paraphrase.entry is not None:
            replay(call, paraphrase.entry, paraphrase.similarity)
            traced_hit(call, op, keyed, "semantic_cache_hit")
            return Encoded(paraphrase.entry.payload)
        recorder = Recorder()
        token = _RECORDER.set(recorder)
        try:
            result = await handler(call)
        finally:
            _RECORDER.reset(token)
        if type(result) is not dict:
            return result
        summary = summarize(op, call, result)
        log_search(call, summary, False)
        if recorder.uncacheable:
            return result
        payload = dumps_bytes(result)
        reads, lanes, searches = tuple(recorder.reads), tuple(recorder.lanes), tuple(recorder.searches)
        stored = Entry(payload, len(payload) + keyed.cost, reads, lanes, searches, summary)
        if cache.put(keyed.key, stored) and paraphrase is not None:
            paraphrase.register()
        return Encoded(payload)

    return run


@attrs.define
class Paraphrase:
    """The paraphrase tier's part in one request: the stored answer it found (a hit), else what to register."""

    tier: SemanticCache
    bucket: tuple[Any, ...]
    query: str
    vector: Any
    params: bytes
    entry: Entry | None = None
    similarity: float = 0.0

    def register(self) -> None:
        """The request's query becomes its cluster's canonical (its answer was just stored)."""
        self.tier.register(self.bucket, self.query, self.vector, self.params)


async def paraphrased(call: Call, cache: RetrievalCache, keyed: Keyed) -> Paraphrase | None:
    """After an exact miss of a passage search: the probe of the paraphrase tier (None when it is silent)."""
    tier = call.app_state.get(SEMANTIC_CACHE_KEY)
    query = keyed.body.get("query")
    embedder = call.app_state.get(EMBEDDER_KEY)
    if tier is None or embedder is None or not passage_lane_enabled(call.app_state):
        return None
    if not isinstance(query, str) or not query.strip():
        return None
    try:
        vector = await query_vector(embedder, cue_cache(embedder), query, call.deadline)
        rest = canonical_body(json.dumps({k: v for k, v in keyed.body.items() if k != "query"}).encode("utf-8"))
    except (QueryFailed, _NoKey):
        return None
    op, path, prints, params, query_string = keyed.key
    bucket = (op, path, keyed.names, rest[1], query_string)
    found = Paraphrase(tier, bucket, query, vector, params)
    probe = tier.probe(bucket, query, vector)
    outcome = probe.outcome
    if probe.claim is not None:
        entry = cache.get((op, path, prints, probe.claim.params, query_string))
        outcome = "stale" if entry is None else "hit"
        found.entry, found.similarity = entry, probe.similarity
    metrics = call.app_state.get(METRICS_KEY)
    if metrics is not None:
        metrics.semantic_cache.labels(outcome).inc()
    return found


def traced_hit(call: Call, op: str, keyed: Keyed, reason: str) -> None:
    """A direct passage search served from the cache is one childless `taguru.passage_search` span with
    `taguru.cache.result` and the event `taguru.cache` (when tracing is on)."""
    tracing = call.app_state.get(TRACING_KEY)
    if tracing is None or op != "search_passages" or call.name is None:
        return
    limit = keyed.body.get("limit")
    with tracing.passage_search(min(limit, 1000) if type(limit) is int else 5) as span:
        if reason == "retrieval_cache_hit":
            span.set_attribute("taguru.cache.result", "hit")
        else:
            span.set_attribute("taguru.cache.result", "miss")
            span.set_attribute("taguru.cache.semantic", "hit")
        span.add_event("taguru.cache", {"taguru.reason": reason})


def replay(call: Call, entry: Entry, similarity: float | None = None) -> None:
    """A hit's side effects, as the fresh path had them: usage counts, lane counts, the search log line."""
    for name, empty in entry.reads:
        ctx = call.registry.get(name)
        if ctx is not None:
            ctx.meta.record_read(empty)
    metrics = call.app_state.get(METRICS_KEY)
    if metrics is not None:
        for op, empty in entry.searches:
            metrics.searched(op, empty)
        if entry.lanes:
            metrics.hits_served(list(entry.lanes))
    summary = entry.summary if similarity is None else {**entry.summary, "similarity": similarity}
    log_search(call, summary, True)


def summarize(op: str, call: Call, result: dict[str, Any]) -> dict[str, Any]:
    """The search log fields of a fresh answer: op, target names, hits, top score (never query text)."""
    fields: dict[str, Any] = {"op": op}
    if call.name is not None:
        fields["context"] = call.name
    else:
        plan = result.get("plan") or {}
        names = [c if isinstance(c, str) else c.get("context") for c in plan.get("contexts") or []]
        fields["contexts"] = ",".join(str(n) for n in dict.fromkeys(names))
    found = result.get("matches") if "matches" in result else result.get("hits")
    fields["hits"] = len(found) if isinstance(found, list) else 0
    if op in ("search_passages", "search_communities") and isinstance(found, list) and found:
        fields["top_score"] = found[0].get("score")
    if op == "search_communities":
        fields["stale"] = bool(result.get("stale"))
    return fields


def log_search(call: Call, fields: dict[str, Any], hit: bool) -> None:
    """The TAGURU_LOG_SEARCHES line of a served retrieval (its redacted form), when the setting is on."""
    if not call.settings.log_searches:
        return
    if hit:
        fields = {k: v for k, v in fields.items() if k != "stale"}
        search_log.info("search.served", **fields, cached=True)
    else:
        search_log.info("search.served", **fields)


def path_target(call: Call, body: Any) -> list[Context]:
    """The one target of a `/contexts/{name}/…` read: the context the path names (it must exist)."""
    assert call.name is not None
    ctx = call.registry.get(call.name)
    if ctx is None:
        raise LookupError("no such context")
    return [ctx]
