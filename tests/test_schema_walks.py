"""With a schema installed the walks (activate on both its walks, explore, paths, unreachable_from) treat
every `schema:type` edge exactly as a dead edge: on seeded random graphs, a context with a schema answers
bit for bit what the same context answers with its type assertions retracted and no schema."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from taguru_server.server.wire.render import lanes as lane_wire
from taguru_server.server.wire.render import walks as walk_wire
from taguru_server.store.model.context import Context, Meta
from taguru_server.store.model.schema import SCHEMA_TYPE, install
from taguru_server.store.read.activation import activation

WEIGHTS = [1.0, 1.0, 0.5, 2.0, -1.0, 0.3, 3.0, 0.0]
LABELS = ["l0", "l1", SCHEMA_TYPE, SCHEMA_TYPE]


def _bits(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _bits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bits(v) for v in value]
    if isinstance(value, float):
        return struct.pack("<d", value)
    return value


def _pair(seed: int, n: int, assertions: int) -> tuple[Context, Context]:
    """The same random graph twice: one with a schema, one with its type assertions retracted instead."""
    out = []
    for _ in range(2):
        rng = random.Random(seed)
        ctx = Context(1, "g", Meta())
        names = [f"c{i}" for i in range(n)]
        for _ in range(assertions):
            s = rng.choice(names)
            o = s if rng.random() < 0.05 else rng.choice(names[: max(2, n // 3)])
            ctx.assert_association(s, rng.choice(LABELS), o, rng.choice(WEIGHTS), f"src{rng.randrange(3)}", None)
            if rng.random() < 0.05:
                ctx.retract_association(s, rng.choice(LABELS), o)
        out.append(ctx)
    typed, retracted = out
    typed.meta.schema = install(1, "off", False, {}, {}).text()
    lab = retracted.label_id.get(SCHEMA_TYPE)
    if lab is not None:
        for e in list(retracted.label_edges[lab]):
            names = retracted.concepts
            retracted.retract_association(
                names[retracted.edges.subject[e]], SCHEMA_TYPE, names[retracted.edges.object[e]]
            )
    return typed, retracted


def _answers(ctx: Context, rng: random.Random, n: int) -> list[Any]:
    origins = [f"c{rng.randrange(n)}" for _ in range(rng.choice([1, 1, 2, 3]))]
    targets = [f"c{rng.randrange(n)}" for _ in range(rng.choice([1, 2]))]
    out: list[Any] = []
    for decay in (0.5, 0.9, 1.0):
        for limit in (3, 50):
            out.append(lane_wire.activate(ctx, origins, decay, limit))
            found = activation(ctx, origins, decay, limit, total=False)
            out.append([(m.edge, m.strength, m.path) for m in found.matches])
    for depth in (1, 3, 10):
        out.append(walk_wire.explore(ctx, origins, depth, 40, None))
        out.append(walk_wire.paths(ctx, origins, targets, depth, 20))
        out.append(walk_wire.paths(ctx, origins, targets, depth, 20, budget=25))
    out.append(walk_wire.unreachable_from(ctx, origins, 100, None, lambda: None))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_a_schema_hides_the_type_edges_as_retraction_would(seed: int) -> None:
    n = 6 + seed % 20
    typed, retracted = _pair(seed, n, 3 * n)
    got = _answers(typed, random.Random(seed), n)
    want = _answers(retracted, random.Random(seed), n)
    assert _bits(got) == _bits(want)


def test_the_walk_graphs_follow_an_install_on_a_context_read_before() -> None:
    typed, retracted = _pair(7, 12, 40)
    typed.meta.schema = None
    plain = _answers(typed, random.Random(1), 12)
    typed.meta.schema = install(1, "off", False, {}, {}).text()
    typed.meta.rev_config += 1  # as an install does
    assert _bits(_answers(typed, random.Random(1), 12)) == _bits(_answers(retracted, random.Random(1), 12))
    assert _bits(plain) != _bits(_answers(typed, random.Random(1), 12))
