"""The semantic tier of resolve and resolve_label: when it runs, its candidates, and the merged ladder.

The lexical tier (`resolve.resolve_matches`) runs first. When it is not confident (nothing, or a
best score under 0.5) and the context holds gloss vectors under the provider's model, the cue's
vector (embedded by the caller) is compared with every stored gloss of the namespace; the best 5
at or above the floor join the lexical candidates they do not repeat.
"""

from __future__ import annotations

import numpy as np

from taguru_server.store.index.vectors import GlossTable
from taguru_server.store.model.context import CONCEPT, Context
from taguru_server.store.read.resolve import ResolveMatch, resolve_matches
from taguru_server.store.read.vector_lane import sequential_dot

CONFIDENT = 0.5
SEMANTIC_KEEP = 5
F32 = np.float32


def lexical(ctx: Context, kind: int, cue: str, dice_floor: float) -> list[ResolveMatch]:
    """The whole lexical list (not yet cut to the request's limit)."""
    return resolve_matches(ctx, kind, cue, dice_floor, len(ctx.concepts) + len(ctx.labels) + 1)


def confident(found: list[ResolveMatch]) -> bool:
    return bool(found) and found[0].score >= CONFIDENT


def _table(ctx: Context, kind: int) -> GlossTable | None:
    store = ctx.vectors.glosses
    if store is None:
        return None
    return store.concepts if kind == CONCEPT else store.labels


def wants_vector(ctx: Context, kind: int, found: list[ResolveMatch], provider_model: str | None) -> bool:
    """Whether the semantic tier needs the cue's vector: a provider, not confident, a table under its model."""
    if provider_model is None or confident(found):
        return False
    store = ctx.vectors.glosses
    table = _table(ctx, kind)
    return store is not None and store.model == provider_model and table is not None and bool(table.rows)


def candidates(ctx: Context, kind: int, q: np.ndarray, floor: float) -> list[tuple[str, float]]:
    """(name, f32 cosine widened to f64) of the best 5 stored glosses at or above the floor; [] across widths."""
    store = ctx.vectors.glosses
    table = _table(ctx, kind)
    if store is None or table is None or not table.rows or store.width != len(q):
        return []
    names = list(table.rows)
    scores = sequential_dot(np.vstack([table.rows[n] for n in names]).astype(F32), np.asarray(q, dtype=F32))
    f_floor = F32(floor)
    kept = [(float(s), n) for n, s in zip(names, scores.tolist(), strict=True) if F32(s) >= f_floor]
    kept.sort(key=lambda t: (-t[0], t[1]))
    return [(n, s) for s, n in kept[:SEMANTIC_KEEP]]


def ladder(
    found: list[ResolveMatch], semantic: list[tuple[str, float]], limit: int
) -> tuple[list[ResolveMatch], list[tuple[str, float]]]:
    """Lexical candidates (cut to `limit`), then new semantic ones; overflow leaves from the lexical tail first."""
    lex = found[:limit]
    seen = {m.name for m in lex}
    sem = [(n, s) for n, s in semantic if n not in seen]
    over = len(lex) + len(sem) - limit
    if over > 0:
        cut = min(over, len(lex))
        lex = lex[: len(lex) - cut]
        sem = sem[: len(sem) - (over - cut)] if over > cut else sem
    return lex, sem
