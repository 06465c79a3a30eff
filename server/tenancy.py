"""What a key with a context list may learn about groups: the reference's rules, or strict tenancy.

By default (the reference's behaviour) every key sees every group, with the members outside its
grant cut from the rows, and a write involving an outside context is refused naming the first such
context in name order. With `TAGURU_STRICT_TENANCY=1` a key with a context list sees only the groups
wholly inside its grant (`store.groups.visible_groups`); every group route, cross-context read and
group import resolves names against that view, so a group it cannot see answers exactly as a group
that does not exist, and a scope refusal names no context. Keys without a context list see the
store's groups unchanged in both modes.
"""

from __future__ import annotations

from collections.abc import Iterable

from taguru_server.server.call import Call
from taguru_server.store.errors import ApiError, Code
from taguru_server.store.persist.groups import Groups, NestingError, closure, visible_groups
from taguru_server.store.transfer.group_import import GroupLine, involved_contexts

MEMBERLESS = (
    "the group would hold no member context, which puts it outside the view of every key with a context list "
    "(TAGURU_STRICT_TENANCY); nothing was applied"
)


def strict(call: Call) -> bool:
    """Strict tenancy applies to this call: the setting is on and the key carries a context list."""
    return call.settings.strict_tenancy and call.principal.contexts is not None


def seen_groups(call: Call) -> Groups:
    """The groups this key resolves names against: the store's, or under strict tenancy its view of them."""
    groups = call.registry.groups
    return visible_groups(groups, call.principal.may_access) if strict(call) else groups


def scope_refusal(call: Call, context: str) -> ApiError:
    """403: the reference names the context; strict tenancy names none (the name may come from a group)."""
    key = call.principal.key
    named = "a context this request involves" if strict(call) else f"context '{context}'"
    return ApiError(Code.FORBIDDEN, f"key '{key}' has no grant on {named}; nothing was applied")


def check_scope(call: Call, involved: Iterable[str]) -> None:
    """A key with a grant list writes only what involves granted contexts; the first other one by name is refused."""
    principal = call.principal
    if principal.contexts is None:
        return
    for ctx in sorted(set(involved)):
        if not principal.may_access(ctx):
            raise scope_refusal(call, ctx)


def hidden_group(call: Call, seen: Groups, name: str) -> bool:
    """A group that exists in the store but is outside this key's view (never true outside strict tenancy)."""
    return name in call.registry.groups and name not in seen


def check_group_records(call: Call, lines: list[GroupLine]) -> None:
    """The scope check of `taguru_group` import records (docs/operations.md, "Tenancy"), before anything applies.

    Under strict tenancy a record may not replace a group the key cannot see (that group is someone
    else's), the involved contexts are taken over the key's view, so a child it cannot see is left
    to the restore's existence check, which answers as for a child that does not exist, and a record
    may not leave its group without a member context (the key could not see it afterwards).
    """
    if not lines or call.principal.contexts is None:
        return
    seen = seen_groups(call)
    if any(hidden_group(call, seen, line.name) for line in lines):
        raise scope_refusal(call, "")  # strict tenancy only: the text names nothing
    check_scope(call, involved_contexts(seen, lines))
    if strict(call):
        prospective = {**seen, **{line.name: line.record for line in lines}}
        for line in lines:
            if not closure(prospective, [line.name]):
                raise ApiError(Code.INVALID_ARGUMENT, f"group '{line.name}': {MEMBERLESS}", integrity="nothing_written")


def nesting_group(call: Call, seen: Groups, err: NestingError, own: Iterable[str] = ()) -> str | None:
    """The group a nesting refusal may name: the walk's group, or None when this key cannot see it."""
    if not strict(call) or err.group in seen or err.group in set(own):
        return err.group
    return None
