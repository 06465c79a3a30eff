"""The context routes: list, create, configure, read and delete a context; its directory entry."""

from __future__ import annotations

from typing import Any

from taguru_server.server.call import Call, Route, not_durable, note_write
from taguru_server.server.decode import parse_json
from taguru_server.server.errors import HttpError, malformed
from taguru_server.server.routes.common import MAX_CONTEXT_NAME_BYTES, MAX_DESCRIPTION_BYTES, keyset_limit
from taguru_server.server.wire import specs
from taguru_server.server.wire.render.contexts import stats_out
from taguru_server.store.errors import ApiError, Code, no_context
from taguru_server.store.model import operations
from taguru_server.store.model.context import Context, Meta
from taguru_server.store.persist.registry import CommitFailed
from taguru_server.store.text import utf8_len
from taguru_server.store.wire import F32


def _floor(value: float | None) -> float | None:
    return None if value is None else min(max(value, 0.0), 1.0)


async def put_context(call: Call) -> Any:
    name = call.name or ""
    fields: dict[str, Any] = {}
    if call.body.strip():
        try:
            value = parse_json(call.body)
        except ApiError as exc:
            raise HttpError(
                Code.MALFORMED_REQUEST,
                "the request body is not valid JSON: " + exc.message.split(": ", 1)[-1],
                status=400,
            ) from None
        fields = specs.CONTEXT_CONFIG.decode(value, call.body)
    size = utf8_len(name)
    if size > MAX_CONTEXT_NAME_BYTES:
        raise ApiError(
            Code.INVALID_ARGUMENT, f"the context name is {size} bytes, over the 64-byte cap; nothing was applied"
        )
    desc = fields.get("description") or ""
    if utf8_len(desc) > MAX_DESCRIPTION_BYTES:
        raise ApiError(
            Code.INVALID_ARGUMENT,
            f"the description is {utf8_len(desc)} bytes, over the 4096-byte cap; nothing was applied",
        )
    if call.registry.exists(name):
        raise ApiError(Code.ALREADY_EXISTS, f"context '{name}' already exists")
    if not name:
        raise ApiError(Code.INVALID_ARGUMENT, "the context name must not be empty")
    meta = Meta(
        description=desc,
        pinned=bool(fields.get("pinned") or False),
        dice_floor=_floor(fields.get("dice_floor")),
        semantic_floor=_floor(fields.get("semantic_floor")),
    )
    ctx = call.registry.create(name, meta)
    try:
        await call.commit(ctx)
    except ApiError:
        call.registry.rollback([ctx])
        raise
    return True


async def patch_context(call: Call) -> Any:
    args = await call.decode(specs.CONTEXT_PATCH)
    description, pinned, dice, semantic = (args[k] for k in ("description", "pinned", "dice_floor", "semantic_floor"))
    if description is not None and utf8_len(description) > MAX_DESCRIPTION_BYTES:
        raise ApiError(
            Code.INVALID_ARGUMENT,
            f"the description is {utf8_len(description)} bytes, over the 4096-byte cap; nothing was applied",
        )
    ctx = call.context()
    operations.configure(
        ctx, description=description, pinned=pinned, dice_floor=_floor(dice), semantic_floor=_floor(semantic)
    )
    await call.commit(ctx)
    m = ctx.meta
    return {
        "description": m.description,
        "pinned": m.pinned,
        "dice_floor": m.dice_floor,
        "semantic_floor": _f32_or_none(m.semantic_floor),
    }


def _f32_or_none(v: float | None) -> Any:
    return None if v is None else F32(v)


def directory_entry(ctx: Context) -> dict[str, Any]:
    m = ctx.meta
    return {
        "name": ctx.name,
        "description": m.description,
        "pinned": m.pinned,
        "loaded": True,
        "dice_floor": m.dice_floor,
        "semantic_floor": _f32_or_none(m.semantic_floor),
        "stats": stats_out(ctx.stats()),
        "usage": {
            "reads": m.reads,
            "empty_reads": m.empty_reads,
            "writes": m.writes,
            "last_read_epoch": m.last_read_epoch,
            "last_write_epoch": m.last_write_epoch,
        },
        "revision": revision(ctx),
        "schema_mode": None if ctx.schema is None else ctx.schema.mode,
    }


def revision(ctx: Context) -> dict[str, int]:
    return {"graph": ctx.meta.rev_graph, "passages": ctx.meta.rev_passages, "config": ctx.meta.rev_config}


async def get_context(call: Call) -> Any:
    return directory_entry(call.context())


async def delete_context(call: Call) -> Any:
    assert call.name is not None
    try:
        name = call.name
        deleted = await call.registry.apply_off_loop({name}, lambda: call.registry.delete(name))
    except CommitFailed as exc:
        raise not_durable(exc, "the delete could not be made durable; nothing was applied") from None
    if not deleted:
        raise no_context(call.name)
    note_write()
    return True


async def list_contexts(call: Call) -> Any:
    limit = keyset_limit(call)
    after = call.query.get("after")
    pinned_raw = call.query.get("pinned")
    pinned = None
    if pinned_raw is not None:
        if pinned_raw not in ("true", "false"):
            raise malformed(
                "Failed to deserialize query string: pinned: provided string was not `true` or `false`", status=400
            )
        pinned = pinned_raw == "true"
    entries: list[dict[str, Any]] = []
    total = 0
    for name in call.registry.names():
        if not call.principal.may_access(name):
            continue
        ctx = call.registry.get(name)
        assert ctx is not None
        if pinned is not None and ctx.meta.pinned != pinned:
            continue
        total += 1
        if after is not None and name <= after:
            continue
        if len(entries) < limit:
            entries.append(directory_entry(ctx))
    return {"total": total, "contexts": entries}


ROUTES: list[Route] = [
    Route("GET", "/contexts", list_contexts, "read", response="ContextList"),
    Route(
        "PUT",
        "/contexts/{name}",
        put_context,
        "write",
        request=specs.CONTEXT_CONFIG,
        response="bool",
        optional_body=True,
    ),
    Route("PATCH", "/contexts/{name}", patch_context, "write", request=specs.CONTEXT_PATCH, response="ContextPatch"),
    Route("GET", "/contexts/{name}", get_context, "read", response="DirectoryEntry"),
    Route("DELETE", "/contexts/{name}", delete_context, "admin", response="bool"),
]
