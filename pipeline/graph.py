"""Graph construction and validation: names, providers, requirements, cycles, levels."""

from __future__ import annotations

from collections.abc import Sequence
from graphlib import CycleError, TopologicalSorter
from typing import Any

from taguru_server.pipeline.core import Key, Stage


class GraphError(ValueError):
    """A wiring mistake found when the graph is built."""


class Graph:
    """A validated DAG of stages; `levels` groups stages that may run together.

    `inputs` are the keys the caller supplies; `outputs` are the keys a consumer may read from
    a run (`RunResult.output`), each of which some stage or input must provide."""

    def __init__(
        self, stages: Sequence[Stage], inputs: Sequence[Key[Any]] = (), outputs: Sequence[Key[Any]] = ()
    ) -> None:
        self.stages = list(stages)
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.output_set = frozenset(self.outputs)
        names: dict[str, Stage] = {}
        for stage in self.stages:
            if stage.name in names:
                raise GraphError(f"two stages are named '{stage.name}'; stage names must be unique")
            names[stage.name] = stage
        self.by_name = names
        provider: dict[Key[Any], str] = {key: "<input>" for key in self.inputs}
        for stage in self.stages:
            for key in stage.provides:
                if key in provider:
                    raise GraphError(f"key '{key.name}' is provided twice: by '{provider[key]}' and by '{stage.name}'")
                provider[key] = stage.name
        self.provider = provider
        for key in self.outputs:
            if key not in provider:
                raise GraphError(f"output '{key.name}' is declared, but no stage provides it and it is not an input")
        deps: dict[str, set[str]] = {}
        for stage in self.stages:
            deps[stage.name] = set()
            for key in stage.requires:
                if key not in provider:
                    raise GraphError(
                        f"stage '{stage.name}' requires '{key.name}', which no stage provides and is not an input"
                    )
                if provider[key] != "<input>":
                    deps[stage.name].add(provider[key])
        self.deps = deps
        try:
            order = list(TopologicalSorter(deps).static_order())
        except CycleError as exc:
            cycle = exc.args[1] if len(exc.args) > 1 else []
            raise GraphError(f"stages form a cycle: {' -> '.join(cycle)}") from None
        level: dict[str, int] = {}
        for name in order:
            level[name] = 1 + max((level[d] for d in deps[name]), default=-1)
        self.level = level
        depth = max(level.values(), default=-1) + 1
        self.levels: list[list[Stage]] = [
            sorted((s for s in self.stages if level[s.name] == i), key=lambda s: s.name) for i in range(depth)
        ]
        self.plan_order = [s.name for lv in self.levels for s in lv]
        self.declared_order = [s.name for s in self.stages]

    def downstream(self, name: str) -> set[str]:
        """Every stage that depends, directly or not, on the named one."""
        out: set[str] = set()
        frontier = [name]
        while frontier:
            current = frontier.pop()
            for other, deps in self.deps.items():
                if current in deps and other not in out:
                    out.add(other)
                    frontier.append(other)
        return out

    def describe(self) -> str:
        """A stable text rendering of the wiring, one stage per line in plan order."""
        lines = [
            f"inputs: {', '.join(k.name for k in self.inputs) or '-'}",
            f"outputs: {', '.join(k.name for k in self.outputs) or '-'}",
        ]
        for i, lv in enumerate(self.levels):
            for stage in lv:
                req = ", ".join(k.name for k in stage.requires) or "-"
                prov = ", ".join(k.name for k in stage.provides) or "-"
                lines.append(f"L{i} {stage.name}: requires [{req}] provides [{prov}]")
        return "\n".join(lines) + "\n"
