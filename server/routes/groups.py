"""The group routes: list, create, read, update, delete, rename and export context groups.

`{name}` is a group here, so the path grant is not checked (`routing.authorize`); instead every
write is refused whole when it involves a context outside a scoped key's grant, and that check
always runs before any existence check, so a scoped key learns nothing about names beyond it.
Names resolve against the groups the key sees (`tenancy.seen_groups`: every group, or under strict
tenancy only those wholly inside its grant); writes are applied to the store's records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from taguru_server.server.call import Call, Handler, Route, not_durable, note_write
from taguru_server.server.decode import Spec, parse_json
from taguru_server.server.errors import HttpError
from taguru_server.server.reply import Raw
from taguru_server.server.routes.common import MAX_DESCRIPTION_BYTES, MAX_INPUT_ITEMS, before_start, keyset_limit
from taguru_server.server.tenancy import MEMBERLESS, check_scope, nesting_group, seen_groups, strict
from taguru_server.server.wire.groups import GROUP_CREATE, GROUP_PATCH, GROUP_RENAME
from taguru_server.store.errors import ApiError, Code, too_many_items
from taguru_server.store.persist.groups import (
    MAX_GROUP_MEMBERS,
    MAX_GROUP_NAME_BYTES,
    GroupRecord,
    Groups,
    NestingError,
    child_renamed,
    closure,
    export_line,
    fingerprint,
    validate_nesting,
    without_child,
)
from taguru_server.store.persist.registry import CommitFailed, Registry
from taguru_server.store.text import utf8_len

MAX_CURSOR_BYTES = 1032


def no_group(name: str, applied: bool = False) -> ApiError:
    return ApiError(Code.NO_GROUP, f"group '{name}' not found" + ("; nothing was applied" if applied else ""))


def revision_of(registry: Registry, name: str) -> tuple[int, int, int] | None:
    meta = registry.known_meta(name)
    return None if meta is None else (meta.rev_graph, meta.rev_passages, meta.rev_config)


def group_entry(call: Call, groups: Groups, name: str) -> dict[str, Any]:
    """The GroupEntry row of one of the groups this key sees: its granted members only, a fingerprint over them."""
    registry = call.registry
    record = groups[name]
    allows = call.principal.may_access
    return {
        "name": name,
        "description": record.description,
        "contexts": [c for c in record.contexts if allows(c)],
        "groups": list(record.groups),
        "fingerprint": fingerprint(groups, name, allows, lambda c: revision_of(registry, c)),
    }


def nesting_refusal(err: NestingError, group: str | None) -> ApiError:
    """The nesting refusal naming `group`; None (a group outside a strict-tenancy key's view) names none."""
    if err.kind == "cycle":
        where = "" if group is None else f" into group '{group}'"
        return ApiError(Code.INVALID_ARGUMENT, f"the nesting would loop back{where}; nothing was applied")
    where = "" if group is None else f" (through group '{group}')"
    return ApiError(Code.OVER_LIMIT, f"the nesting would stack more than 3 groups{where}; nothing was applied")


def _validated(call: Call, seen: Groups, name: str, record: GroupRecord, written: GroupRecord | None = None) -> None:
    """Strict tenancy's one rule more over `record` (the group as the key sees it), then the nesting of the
    whole store with `written` (the group as stored, default `record`) as group `name`."""
    if strict(call) and not closure({**seen, name: record}, [name]):
        raise ApiError(Code.INVALID_ARGUMENT, MEMBERLESS)
    try:
        validate_nesting({**call.registry.groups, name: record if written is None else written})
    except NestingError as err:
        raise nesting_refusal(err, nesting_group(call, seen, err, [name])) from None


def _bundle_cap(what: str) -> ApiError:
    return ApiError(
        Code.OVER_LIMIT,
        f"the group would bundle more than {MAX_GROUP_MEMBERS} {what}; nothing was applied — split into nested "
        "child groups",
    )


def _description_cap(description: str) -> None:
    size = utf8_len(description)
    if size > MAX_DESCRIPTION_BYTES:
        raise ApiError(
            Code.INVALID_ARGUMENT, f"the description is {size} bytes, over the 4096-byte cap; nothing was applied"
        )


def _missing_members(
    registry: Registry, seen: Groups, contexts: Iterable[str], groups: Iterable[str], skip: str = ""
) -> None:
    """404 for the first unregistered context, then the first child group not among `seen`, in name order."""
    for c in sorted(set(contexts)):
        if not registry.exists(c):
            raise ApiError(Code.NO_CONTEXT, f"context '{c}' not found; nothing was applied")
    for g in sorted(set(groups)):
        if g != skip and g not in seen:
            raise no_group(g, applied=True)


async def _persist(call: Call, upserts: dict[str, GroupRecord], deletes: Iterable[str] = ()) -> None:
    gone = list(deletes)
    try:  # in the writer thread; reads naming no context (the cross-context reads over groups) wait for it
        await call.registry.apply_off_loop(set(), lambda: call.registry.write_groups(upserts, gone))
    except CommitFailed as exc:
        raise not_durable(exc, "the group change could not be made durable; nothing was applied") from None
    note_write()


def _optional_body(call: Call) -> dict[str, Any]:
    """An optional body: empty means every default; anything else must decode, or it is a 400 (never 415/422)."""
    raw = call.body
    value: Any = {}
    try:
        if raw:  # whitespace alone is a body, and not JSON
            value = parse_json(raw)
        return GROUP_CREATE.decode(value, raw)
    except ApiError as exc:
        detail = exc.message.split(": ", 1)[-1]
        raise HttpError(Code.MALFORMED_REQUEST, "the request body is not valid JSON: " + detail, status=400) from None


# ----- routes --------------------------------------------------------------------------------


async def list_groups(call: Call) -> Any:
    limit = keyset_limit(call)
    after = call.query.get("after")
    prefix = call.query.get("prefix")
    for what, value in (("prefix", prefix), ("after", after)):
        if value is not None and utf8_len(value) > MAX_CURSOR_BYTES:
            raise ApiError(
                Code.INVALID_ARGUMENT, f"{what} is {utf8_len(value)} bytes, over the 1032-byte cap; nothing was applied"
            )
    before_start(call)
    seen = seen_groups(call)
    names = sorted(seen)
    rows: list[dict[str, Any]] = []
    for name in names:
        if after is not None and name <= after:
            continue
        if len(rows) >= limit:
            break
        before_start(call)
        rows.append(group_entry(call, seen, name))
    return {"total": len(names), "groups": rows}


async def get_group(call: Call) -> Any:
    name = call.name or ""
    seen = seen_groups(call)
    if name not in seen:
        raise no_group(name)
    before_start(call)
    return group_entry(call, seen, name)


async def put_group(call: Call) -> Any:
    name = call.name or ""
    args = _optional_body(call)
    description, contexts, children = args["description"], list(args["contexts"]), list(args["groups"])
    size = utf8_len(name)
    if size > MAX_GROUP_NAME_BYTES:
        raise ApiError(
            Code.INVALID_ARGUMENT, f"the group name is {size} bytes, over the 64-byte cap; nothing was applied"
        )
    _description_cap(description)
    for field, values in (("contexts", contexts), ("groups", children)):
        if len(values) > MAX_INPUT_ITEMS:
            raise too_many_items(field, len(values))
    registry = call.registry
    seen = seen_groups(call)
    check_scope(call, set(contexts) | closure(seen, children))
    before_start(call)
    if not name:
        raise ApiError(Code.INVALID_ARGUMENT, "the group name must not be empty")
    if name in registry.groups:  # one namespace: a name taken by a group outside the key's view is taken too
        raise ApiError(Code.ALREADY_EXISTS, f"group '{name}' already exists")
    record = GroupRecord.of(description, contexts, children)
    if len(record.contexts) > MAX_GROUP_MEMBERS:
        raise _bundle_cap("member contexts")
    if len(record.groups) > MAX_GROUP_MEMBERS:
        raise _bundle_cap("child groups")
    _missing_members(registry, seen, record.contexts, record.groups)
    _validated(call, seen, name, record)
    await _persist(call, {name: record})
    return True


async def patch_group(call: Call) -> Any:
    name = call.name or ""
    args = await call.decode(GROUP_PATCH)
    description = args["description"]
    if description is not None:
        _description_cap(description)
    deltas = {k: list(args[k]) for k in ("add_contexts", "remove_contexts", "add_groups", "remove_groups")}
    for field, values in deltas.items():
        if len(values) > MAX_INPUT_ITEMS:
            raise too_many_items(field, len(values))
    registry = call.registry
    seen = seen_groups(call)
    reach = closure(seen, [name, *deltas["add_groups"], *deltas["remove_groups"]])
    check_scope(call, reach | set(deltas["add_contexts"]) | set(deltas["remove_contexts"]))
    before_start(call)
    current = seen.get(name)
    if current is None:
        raise no_group(name)
    contexts = (set(current.contexts) - set(deltas["remove_contexts"])) | set(deltas["add_contexts"])
    children = (set(current.groups) - set(deltas["remove_groups"])) | set(deltas["add_groups"])
    unseen = set(registry.groups[name].groups) - set(current.groups)  # children outside the key's view stay
    if (deltas["add_contexts"] or deltas["remove_contexts"]) and len(contexts) > MAX_GROUP_MEMBERS:
        raise _bundle_cap("member contexts")
    if (deltas["add_groups"] or deltas["remove_groups"]) and len(children | unseen) > MAX_GROUP_MEMBERS:
        raise _bundle_cap("child groups")
    _missing_members(registry, seen, deltas["add_contexts"], deltas["add_groups"], skip=name)
    kept = current.description if description is None else description
    record = GroupRecord.of(kept, contexts, children | unseen)
    _validated(call, seen, name, GroupRecord.of(kept, contexts, children), record)
    await _persist(call, {name: record})
    return group_entry(call, seen_groups(call), name)


async def delete_group(call: Call) -> Any:
    name = call.name or ""
    registry = call.registry
    seen = seen_groups(call)
    check_scope(call, closure(seen, [name]))
    before_start(call)
    if name not in seen:
        raise no_group(name)
    await _persist(call, without_child(registry.groups, name), [name])
    return True


async def rename_group(call: Call) -> Any:
    name = call.name or ""
    to = (await call.decode(GROUP_RENAME))["to"]
    size = utf8_len(to)
    if size > MAX_GROUP_NAME_BYTES:
        raise ApiError(
            Code.INVALID_ARGUMENT, f"the destination name is {size} bytes, over the 64-byte cap; nothing was applied"
        )
    registry = call.registry
    seen = seen_groups(call)
    check_scope(call, closure(seen, [name]))
    before_start(call)
    if not to:
        raise ApiError(Code.INVALID_ARGUMENT, "the destination name must not be empty")
    if name not in seen:
        raise no_group(name)
    if to == name:
        return True
    if to in registry.groups:  # one namespace, as for a create
        raise ApiError(Code.ALREADY_EXISTS, f"group '{to}' already exists")
    await _persist(call, {**child_renamed(registry.groups, name, to), to: registry.groups[name]}, [name])
    return True


async def export_group(call: Call) -> Raw:
    name = call.name or ""
    record = seen_groups(call).get(name)
    if record is None:
        raise no_group(name)
    visible = [c for c in record.contexts if call.principal.may_access(c)]
    return Raw(200, export_line(name, record, visible), "application/x-ndjson; charset=utf-8")


def on_group(
    method: str,
    template: str,
    handler: Handler,
    role: str,
    *,
    response: str,
    request: Spec | None = None,
    optional_body: bool = False,
) -> Route:
    """A route whose `{name}` is a group: the path grant is not checked (the handler checks the members)."""
    return Route(
        method,
        template,
        handler,
        role,
        request=request,
        response=response,
        optional_body=optional_body,
        group_name=True,
    )


ROUTES: list[Route] = [
    Route("GET", "/groups", list_groups, "read", response="GroupList"),
    on_group("PUT", "/groups/{name}", put_group, "write", request=GROUP_CREATE, response="bool", optional_body=True),
    on_group("GET", "/groups/{name}", get_group, "read", response="GroupEntry"),
    on_group("PATCH", "/groups/{name}", patch_group, "write", request=GROUP_PATCH, response="GroupEntry"),
    on_group("DELETE", "/groups/{name}", delete_group, "admin", response="bool"),
    on_group("POST", "/groups/{name}/rename", rename_group, "admin", request=GROUP_RENAME, response="bool"),
    on_group("GET", "/groups/{name}/export", export_group, "read", response="ndjson"),
]
