"""Typed keys, the stage protocol, outcomes and the per-stage context."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

import attrs

T = TypeVar("T")

RAN, DEGRADED, SKIPPED, FAILED = "ran", "degraded", "skipped", "failed"


@attrs.frozen(eq=False, repr=False)
class Key(Generic[T]):
    """A typed slot that one stage provides and others require (compared by identity).

    `value_type` is the runtime class a provided value must be an instance of; the executor
    checks it when contract checking is on (the static `T` is for mypy only)."""

    name: str
    value_type: type[Any]

    def __repr__(self) -> str:
        return f"Key({self.name})"


@attrs.frozen
class Outcome:
    """What a stage did: status, an optional reason token, the values it provides, small counts."""

    status: str
    values: Mapping[Key[Any], Any] = attrs.field(factory=dict)
    reason: str | None = None
    detail: Mapping[str, int] = attrs.field(factory=dict)
    error: BaseException | None = attrs.field(default=None, eq=False)

    @classmethod
    def ran(cls, values: Mapping[Key[Any], Any], detail: Mapping[str, int] | None = None) -> Outcome:
        return cls(RAN, values, None, detail or {})

    @classmethod
    def degraded(cls, reason: str, values: Mapping[Key[Any], Any], detail: Mapping[str, int] | None = None) -> Outcome:
        return cls(DEGRADED, values, reason, detail or {})

    @classmethod
    def skipped(
        cls, reason: str, values: Mapping[Key[Any], Any] | None = None, detail: Mapping[str, int] | None = None
    ) -> Outcome:
        return cls(SKIPPED, values or {}, reason, detail or {})

    @classmethod
    def failed(cls, reason: str, error: BaseException | None = None) -> Outcome:
        return cls(FAILED, {}, reason, {}, error)


class Stage(Protocol):
    """One step of the graph: declares what it reads and writes, and runs asynchronously."""

    name: ClassVar[str]
    requires: ClassVar[tuple[Key[Any], ...]]
    provides: ClassVar[tuple[Key[Any], ...]]

    async def run(self, ctx: StageContext) -> Outcome: ...


class StageContext:
    """The values a stage may read (only its declared requirements) and the injected clock."""

    __slots__ = ("_values", "_allowed", "stage", "clock", "deadline")

    def __init__(
        self,
        values: Mapping[Key[Any], Any],
        allowed: tuple[Key[Any], ...],
        stage: str,
        clock: Callable[[], float],
        deadline: float | None,
    ) -> None:
        self._values = values
        self._allowed = allowed
        self.stage = stage
        self.clock = clock
        self.deadline = deadline

    def __getitem__(self, key: Key[T]) -> T:
        if key not in self._allowed:
            raise KeyError(f"stage '{self.stage}' read {key.name!r} without declaring it in `requires`")
        return cast(T, self._values[key])  # the key's type: what the providing stage declared

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None when there is no deadline)."""
        return None if self.deadline is None else self.deadline - self.clock()
