"""The embedding refresh of one context: re-embed what is missing or stale, carry the rest, prune the gone.

Two halves, each publishing a new store on the context's `vectors` and marking it for the next
commit (`Dirty.vectors`): the gloss half (one text per interned concept and label, the gloss
resolve attaches) and the passage half (one row per paragraph text and per stored question).
A store is identified by `(model, width)`: a store of another model is discarded and rebuilt; a
width change under the same model is found by the width probe (one provider call when nothing
else was embedded) and rebuilds too. Rows that landed before a failure are kept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import numpy as np

from taguru_server.store.index.vectors import GlossStore, GlossTable, PassageStore, RowKey, fnv1a64
from taguru_server.store.model.context import Context
from taguru_server.store.read.gloss import concept_gloss, label_gloss

CHUNK = 128  # inputs per provider call
# texts -> unit f32 vectors (purpose "index"); raises RefreshFailed
Embed = Callable[[list[str]], Awaitable[list[np.ndarray]]]


class RefreshFailed(Exception):
    """A provider call (or the store) failed; `message` is the wire text after the route's prefix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@attrs.define
class Half:
    """What one half did: rows embedded, rows now stored, rows cut by the limit, whether the serving changed."""

    embedded: int = 0
    total: int = 0
    skipped_over_limit: int = 0
    changed: bool = False
    width_rebuilt: bool = False
    error: str | None = None


@attrs.define
class _Batch:
    """Texts to embed, and what the landed vectors were (None: not landed)."""

    texts: list[str]
    vectors: list[np.ndarray | None] = attrs.field(init=False)
    width: int | None = None
    error: str | None = None

    def __attrs_post_init__(self) -> None:
        self.vectors = [None] * len(self.texts)

    @property
    def landed(self) -> int:
        return sum(v is not None for v in self.vectors)


async def _embed_all(embed: Embed, batch: _Batch) -> None:
    """Chunks of 128, in order, stopping at the first failure; a row of another width than the first is dropped."""
    for start in range(0, len(batch.texts), CHUNK):
        try:
            got = await embed(batch.texts[start : start + CHUNK])
        except RefreshFailed as exc:
            batch.error = exc.message
            return
        for i, vec in enumerate(got):
            if batch.width is None:
                batch.width = int(vec.shape[0])
            if int(vec.shape[0]) == batch.width:
                batch.vectors[start + i] = np.asarray(vec, dtype=np.float32)


async def _probe(embed: Embed, text: str) -> int | None:
    """The provider's current width (one call), or None when the probe failed."""
    try:
        got = await embed([text])
    except RefreshFailed:
        return None
    return int(got[0].shape[0]) if got else None


# ----- glosses ---------------------------------------------------------------------------------


def gloss_lists(ctx: Context) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(name, gloss) of every interned concept, then of every label, in id order."""
    concepts = [(name, concept_gloss(ctx, c)) for c, name in enumerate(ctx.concepts)]
    labels = [(name, label_gloss(ctx, lab)) for lab, name in enumerate(ctx.labels)]
    return concepts, labels


def _stale(items: list[tuple[str, str]], table: GlossTable | None, rebuild: bool) -> list[int]:
    if table is None or rebuild:
        return list(range(len(items)))
    return [i for i, (name, gloss) in enumerate(items) if table.hashes.get(name) != fnv1a64(gloss)]


async def refresh_glosses(ctx: Context, model: str, embed: Embed) -> Half:
    """The gloss half: publish the new store on `ctx.vectors.glosses` (and mark it dirty) when anything changed."""
    lists = gloss_lists(ctx)
    stored = ctx.vectors.glosses
    fresh = stored is None or stored.model != model
    tables = (None, None) if stored is None else (stored.concepts, stored.labels)
    picks = [_stale(items, table, fresh) for items, table in zip(lists, tables, strict=True)]
    batches = [_Batch([items[i][1] for i in pick]) for items, pick in zip(lists, picks, strict=True)]
    width: int | None = None
    error: str | None = None
    for batch in batches:
        batch.width = width
        await _embed_all(embed, batch)
        width = batch.width
        if batch.error is not None:
            error = batch.error
            break
    out = Half(error=error)
    if error is None and not fresh and stored is not None:
        seen = width
        if seen is None and (stored.concepts.rows or stored.labels.rows):
            first = lists[0][0][1] if lists[0] else lists[1][0][1] if lists[1] else None
            seen = None if first is None else await _probe(embed, first)
        if seen is not None and seen != stored.width:  # a dimensions setting changed behind the model's name
            out.width_rebuilt = fresh = True
            picks = [list(range(len(items))) for items in lists]
            batches = [_Batch([gloss for _n, gloss in items]) for items in lists]
            width = None
            for batch in batches:
                batch.width = width
                await _embed_all(embed, batch)
                width = batch.width
                if batch.error is not None:
                    out.error = batch.error
                    break
    _publish_glosses(ctx, model, width, lists, picks, batches, fresh, out)
    return out


def _publish_glosses(
    ctx: Context,
    model: str,
    width: int | None,
    lists: tuple[list[tuple[str, str]], list[tuple[str, str]]],
    picks: list[list[int]],
    batches: list[_Batch],
    fresh: bool,
    out: Half,
) -> None:
    stored = ctx.vectors.glosses
    base = None if fresh else stored
    if base is not None:
        width = base.width
    new = GlossStore(model, width or 0)
    pruned = 0
    for items, pick, batch, old, table in zip(
        lists,
        picks,
        batches,
        (None, None) if base is None else (base.concepts, base.labels),
        (new.concepts, new.labels),
        strict=True,
    ):
        landed = {
            items[i][0]: (fnv1a64(items[i][1]), v) for i, v in zip(pick, batch.vectors, strict=True) if v is not None
        }
        out.embedded += len(landed)
        current = {name for name, _g in items}
        if old is not None:
            pruned += sum(name not in current for name in old.rows)
        for name, _gloss in items:
            got = landed.get(name)
            if got is not None:
                table.hashes[name], table.rows[name] = got
            elif old is not None and name in old.rows:
                table.hashes[name], table.rows[name] = old.hashes[name], old.rows[name]
    rows = len(new.concepts.rows) + len(new.labels.rows)
    out.total = rows
    published = new if rows and width else None
    identity_changed = (stored is None) != (published is None) or (
        stored is not None and published is not None and (stored.model, stored.width) != (model, published.width)
    )
    out.changed = out.embedded > 0 or pruned > 0
    if out.changed or identity_changed:
        ctx.vectors.glosses = published
        ctx.dirty.vectors.add("glosses")


# ----- passages --------------------------------------------------------------------------------


def passage_rows(ctx: Context) -> list[tuple[RowKey, str]]:
    """Every non-empty row in walk order: sources by byte order, paragraphs, the text row, then its questions."""
    out: list[tuple[RowKey, str]] = []
    order = sorted(ctx.passages, key=lambda sid: ctx.sources[sid].encode("utf-8"))
    for sid in order:
        passage = ctx.passages[sid]
        source = ctx.sources[sid]
        questions: dict[int, list[str]] = {}
        for p, q in sorted(passage.questions, key=lambda pq: pq[0]):
            questions.setdefault(p, []).append(q)
        for i, text in enumerate(passage.paragraphs):
            h = fnv1a64(text)
            if text:
                out.append((RowKey(source, i, h, None), text))
            for q in questions.get(i, ()):
                if q:
                    out.append((RowKey(source, i, h, fnv1a64(q)), q))
    return out


async def refresh_passages(ctx: Context, model: str, embed: Embed, limit: int) -> Half:
    """The passage half: the store is rebuilt from the current rows (carried or embedded) in walk order."""
    rows = passage_rows(ctx)
    out = Half()
    if len(rows) > limit:
        out.skipped_over_limit = len(rows) - limit
        rows = rows[:limit]
    stored = ctx.vectors.passages
    fresh = stored is None or stored.model != model
    carried = _carry(stored) if stored is not None and not fresh else {}
    todo = [i for i, (key, _t) in enumerate(rows) if key not in carried]
    batch = _Batch([rows[i][1] for i in todo])
    await _embed_all(embed, batch)
    out.error = batch.error
    if out.error is None and stored is not None and not fresh and stored.rows:
        seen = batch.width if todo else await _probe_rows(embed, rows)
        if seen is not None and seen != stored.width:  # a dimensions setting changed: rebuild
            out.width_rebuilt = fresh = True
            carried = {}
            todo = list(range(len(rows)))
            batch = _Batch([text for _k, text in rows])
            await _embed_all(embed, batch)
            out.error = batch.error
    width = batch.width if fresh or stored is None else stored.width
    _publish_passages(ctx, model, width, rows, todo, batch, carried, fresh, out)
    return out


async def _probe_rows(embed: Embed, rows: list[tuple[RowKey, str]]) -> int | None:
    first = next((text for key, text in rows if key.question_hash is None), None)
    return None if first is None else await _probe(embed, first)


def _publish_passages(
    ctx: Context,
    model: str,
    width: int | None,
    rows: list[tuple[RowKey, str]],
    todo: list[int],
    batch: _Batch,
    carried: dict[RowKey, Any],
    fresh: bool,
    out: Half,
) -> None:
    stored = ctx.vectors.passages
    landed = {i: v for i, v in zip(todo, batch.vectors, strict=True) if v is not None}
    keys: list[RowKey] = []
    matrix: list[np.ndarray] = []
    for i, (key, _text) in enumerate(rows):
        vec = landed.get(i)
        if vec is None:
            vec = carried.get(key)
        if vec is not None:
            keys.append(key)
            matrix.append(vec)
    out.embedded = len(landed)
    out.total = len(keys)
    published = None
    if keys and width is not None:
        published = PassageStore(model, width, keys, np.vstack(matrix).astype(np.float32))
    before = 0 if stored is None else stored.rows
    out.changed = out.embedded > 0 or out.total != before or (out.width_rebuilt and out.total > 0)
    if out.changed or (stored is not None and (published is None or fresh)):
        ctx.vectors.passages = published
        ctx.dirty.vectors.add("passages")


def _carry(store: PassageStore) -> dict[RowKey, Any]:
    return {key: store.matrix[i] for i, key in enumerate(store.keys)}


def index_embed(embedder: Any, deadline: float | None) -> Embed:
    """A provider's `embed` for refreshes (purpose `index`): its failures become RefreshFailed(message)."""

    async def embed(texts: list[str]) -> list[np.ndarray]:
        try:
            got = await embedder.embed(texts, "index", deadline)
        except Exception as exc:
            message = getattr(exc, "message", None)
            if isinstance(message, str) and hasattr(exc, "kind"):  # the provider's failure
                raise RefreshFailed(message) from None
            raise
        return [np.asarray(v, dtype=np.float32) for v in got]

    return embed


def commit_half(registry: Any, ctx: Context, half: Half) -> bool:
    """Commit what a half published (with its change-log row); a serving change bumps revision.config.
    Returns whether anything was committed."""
    if half.changed:
        ctx.meta.rev_config += 1
        ctx.dirty.meta = True
    if not ctx.dirty.any():
        return False
    registry.commit([ctx])
    return True
