"""Helpers for stage tests: tiny in-memory contexts, running one stage, plain-data snapshots."""

from __future__ import annotations

from typing import Any

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.model import Candidate, EvidenceRequest, Fused, LaneResult, Services, Unit
from taguru_server.store.model.context import Context, Meta
from taguru_server.store.persist.registry import Registry
from taguru_server.store.wire import F32, format_f32, format_f64


class MemoryPersistence:
    """A persistence that keeps nothing: for stage tests that never restart."""

    def list_contexts(self) -> list[Any]:
        return []

    def next_id(self) -> int:
        return 1

    def load(self, cid: int, name: str, meta: Meta) -> Context:
        raise KeyError(name)

    def commit(self, contexts: Any) -> None:
        for ctx in contexts:
            ctx.created = False

    def delete(self, cid: int) -> None:
        return None

    def list_groups(self) -> dict[str, Any]:
        return {}

    def latest_change(self) -> int:
        return 0

    def contexts_changed_after(self, seq: int) -> tuple[int, set[int]]:
        return 0, set()

    def write_groups(self, upserts: Any, deletes: Any = ()) -> None:
        return None

    def close(self, intact: bool = True) -> None:
        return None


def make_context(
    name: str = "t",
    associations: list[tuple[str, str, str, float, str | None, int | None]] = (),  # type: ignore[assignment]
    passages: dict[str, str] | None = None,
    locators: dict[str, list[tuple[int, str, str]]] | None = None,
    registry: Registry | None = None,
) -> Context:
    ctx = registry.create(name, Meta()) if registry is not None else Context(1, name, Meta())
    for source, text in (passages or {}).items():
        ctx.store_passage(source, text, [], [], (locators or {}).get(source, []), [], 0, None)
    for s, lab, o, w, src, p in associations:
        ctx.assert_association(s, lab, o, w, src, p)
    return ctx


def memory_registry() -> Registry:
    return Registry(MemoryPersistence())


def services(registry: Registry | None = None, may_access: Any = None) -> Services:
    return Services(registry or memory_registry(), may_access or (lambda name: True))


async def run_stage(stage: Any, values: dict[Key[Any], Any], remaining: float | None = None) -> Outcome:
    deadline = None if remaining is None else 1000.0 + remaining
    ctx = StageContext(values, tuple(stage.requires), stage.name, lambda: 1000.0, deadline)
    return await stage.run(ctx)


def plain(value: Any) -> Any:
    """Plain data for snapshots: attrs instances as dicts, keys by name, tuples as lists."""
    if isinstance(value, Outcome):
        return {
            "status": value.status,
            "reason": value.reason,
            "detail": dict(value.detail),
            "values": {k.name: plain(v) for k, v in value.values.items()},
        }
    if isinstance(value, LaneResult) and value.detail is None:  # a lane with nothing more for explain
        return {f.name: plain(getattr(value, f.name)) for f in attrs.fields(type(value)) if f.name != "detail"}
    if isinstance(value, (Candidate, Fused, Unit, LaneResult)) or attrs.has(type(value)):
        return {f.name: plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else repr(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, F32):
        return f"f32:{format_f32(value)}"
    if isinstance(value, float):
        return format_f64(value)
    return value


def request(**kw: Any) -> EvidenceRequest:
    kw.setdefault("origins", ())
    if "query" not in kw:
        kw["query"] = "; ".join(kw["origins"])
    return EvidenceRequest(**kw)


def cand(kind: str, key: str, lane: str, rank: int, **kw: Any) -> Candidate:
    return Candidate(kind=kind, canonical_key=key, lane=lane, rank=rank, payload=kw.pop("payload", {"k": key}), **kw)


def fused(c: Candidate, rank: int = 0, score: float = 0.0) -> Fused:
    return Fused(c, ((c.lane, c.rank),), c.locators, score, rank)
