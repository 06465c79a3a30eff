"""The schema routes: GET and PUT …/schema (the document), POST …/schema/audit and …/schema/validate.

PUT checks the document before it looks up the context (an invalid document is a 400 on any
name), then refuses while a persisted label alias resolves to the reserved `schema:type`. The
audit and validate judge every live association as if the document were strict; both hold a
heavy-operation permit from before their body is read and run over the quiesced context in a
worker thread.
"""

from __future__ import annotations

from typing import Any

from taguru_server.server.call import Call, Route
from taguru_server.server.routes.audits import apart, optional_body
from taguru_server.server.routes.common import before_start, count_read, permit
from taguru_server.server.wire.render.schema import audit_out
from taguru_server.server.wire.schema import SCHEMA_AUDIT, SCHEMA_DOCUMENT, SCHEMA_VALIDATE
from taguru_server.store.derive import schema_audit
from taguru_server.store.errors import ApiError, Code
from taguru_server.store.model import operations
from taguru_server.store.model.context import Context
from taguru_server.store.model.schema import SCHEMA_TYPE, Schema, SchemaRefused, from_document
from taguru_server.store.model.schema_check import label_alias_canonicals


def no_schema(name: str) -> ApiError:
    return ApiError(Code.NO_SCHEMA, f"context '{name}' has no schema document")


def installed(ctx: Context) -> Schema:
    """The context's schema, or the 404 `no_schema`."""
    schema = ctx.schema
    if schema is None:
        raise no_schema(ctx.name)
    return schema


def checked(doc: dict[str, Any]) -> Schema:
    """A decoded document through the install checks (400 with the check's text)."""
    try:
        return from_document(doc)
    except SchemaRefused as exc:
        raise ApiError(Code.INVALID_ARGUMENT, str(exc)) from None


def reserved_alias(ctx: Context) -> str | None:
    """The first persisted label alias (registration order) whose canonical is `schema:type`."""
    return next((a for a, c in label_alias_canonicals(ctx).items() if c == SCHEMA_TYPE), None)


def reserved_alias_text(alias: str) -> str:
    return (
        f"label alias '{alias}' resolves to 'schema:type', the relation label reserved for type assertions "
        "(ADR 0009 \u00a76.3) — rename the alias before installing this schema"
    )


async def get_schema(call: Call) -> Any:
    before_start(call)
    return installed(call.context()).document()


async def put_schema(call: Call) -> Any:
    schema = checked(await call.decode(SCHEMA_DOCUMENT))
    before_start(call)
    ctx = call.context()
    alias = reserved_alias(ctx)
    if alias is not None:
        raise ApiError(Code.INVALID_ARGUMENT, reserved_alias_text(alias))
    if operations.install_schema(ctx, schema):
        await call.commit(ctx)
    return schema.document()


async def _audit(call: Call, ctx: Context, schema: Schema, args: dict[str, Any]) -> Any:
    async with call.registry.quiesced():
        found = await apart(lambda: audit_out(ctx, schema_audit.audit(ctx, schema, args["limit"], args["after"])))
    count_read(ctx, False)
    return found


async def audit_schema(call: Call) -> Any:
    with permit(call.app_state):
        args = optional_body(SCHEMA_AUDIT, call.body)
        before_start(call)
        ctx = call.context()
        return await _audit(call, ctx, installed(ctx), args)


async def validate_schema(call: Call) -> Any:
    with permit(call.app_state):
        args = await call.decode(SCHEMA_VALIDATE)
        schema = checked(args["document"])
        before_start(call)
        return await _audit(call, call.context(), schema, args)


ROUTES: list[Route] = [
    Route("GET", "/contexts/{name}/schema", get_schema, "read", response="Schema"),
    Route("PUT", "/contexts/{name}/schema", put_schema, "write", request=SCHEMA_DOCUMENT, response="Schema"),
    Route(
        "POST",
        "/contexts/{name}/schema/audit",
        audit_schema,
        "read",
        request=SCHEMA_AUDIT,
        response="SchemaAudit",
        optional_body=True,
        heavy_before_body=True,
    ),
    Route(
        "POST",
        "/contexts/{name}/schema/validate",
        validate_schema,
        "read",
        request=SCHEMA_VALIDATE,
        response="SchemaAudit",
        heavy_before_body=True,
    ),
]
