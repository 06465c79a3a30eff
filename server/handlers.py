"""Endpoint handlers: decode and validate the request, call the store, shape the result."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

import attrs

from taguru_server.server import decode as S
from taguru_server.server.auth import Principal
from taguru_server.server.config import Settings
from taguru_server.server.decode import MAX_NAME_BYTES, MAX_U64, NON_EMPTY, Spec, check_name, parse_json, require_json
from taguru_server.server.decode import is_u32 as _is_u32
from taguru_server.server.decode import json_type as _json_type
from taguru_server.server.decode import name_issue as _name_issue
from taguru_server.store import lanes
from taguru_server.store.context import CONCEPT, LABEL, AliasRefused, Context, Meta
from taguru_server.store.errors import ApiError, Issue, collected, malformed, no_context, too_many_items
from taguru_server.store.importer import ParseError, parse_stream, run_import
from taguru_server.store.registry import CommitFailed, Registry
from taguru_server.store.text import utf8_len
from taguru_server.store.wire import F32, format_number

VERSION = "0.1.0"
MAX_CONTEXT_NAME_BYTES = 64
MAX_DESCRIPTION_BYTES = 4096
MAX_INPUT_ITEMS = 1000
MAX_MATCH_LIMIT = 1000
DEFAULT_MATCH_LIMIT = 100
MAX_ASSOCIATIONS = 10000
MAX_PASSAGES = 1000
MAX_WEIGHT = 1e6


@attrs.define
class Call:
    """One request as the handlers see it."""

    method: str
    path: str
    name: str | None
    query: dict[str, str]
    headers: Any
    body: bytes
    registry: Registry
    settings: Settings
    principal: Principal
    deadline: float
    app_state: dict[str, Any] = attrs.field(factory=dict)

    def json(self) -> Any:
        return require_json(self.headers.get("Content-Type"), self.body)

    def decode(self, spec: Spec) -> dict[str, Any]:
        """Decode the typed body with the same spec `/openapi.json` publishes."""
        return spec.read(self.headers.get("Content-Type"), self.body)

    def context(self) -> Context:
        assert self.name is not None
        ctx = self.registry.get(self.name)
        if ctx is None:
            raise no_context(self.name)
        return ctx

    def commit(self, *contexts: Context) -> None:
        try:
            self.registry.commit(contexts)
        except CommitFailed as exc:
            code = "storage_full" if "full" in str(exc).lower() else "internal"
            raise ApiError(code, "the write could not be made durable; nothing was applied") from None


Handler = Callable[[Call], Awaitable[Any]]


def _limit(value: int | None, default: int, ceiling: int = MAX_MATCH_LIMIT) -> int:
    return min(default if value is None else value, ceiling)


def _count_read(ctx: Context, empty: bool) -> None:
    ctx.meta.record_read(empty)


# ----- probes --------------------------------------------------------------------


def version_body() -> dict[str, Any]:
    return {
        "server": VERSION,
        "http_contract": {"current": 1, "supported": [1]},
        "mcp_contract": {"current": 1, "supported": [1]},
        "mcp_protocol": {"supported": ["2024-11-05", "2025-03-26", "2025-06-18"]},
        "batch_formats": [1],
        "schema_formats": [],
        "image_formats": [],
        "communities_formats": [1],
    }


# ----- contexts ------------------------------------------------------------------


def _floor(value: float | None) -> float | None:
    return None if value is None else min(max(value, 0.0), 1.0)


async def put_context(call: Call) -> Any:
    name = call.name or ""
    fields: dict[str, Any] = {}
    if call.body.strip():
        try:
            value = parse_json(call.body)
        except ApiError as exc:
            raise ApiError(
                "malformed_request", "the request body is not valid JSON: " + exc.message.split(": ", 1)[-1], status=400
            ) from None
        fields = S.CONTEXT_CONFIG.decode(value, call.body)
    size = utf8_len(name)
    if size > MAX_CONTEXT_NAME_BYTES:
        raise ApiError(
            "invalid_argument", f"the context name is {size} bytes, over the 64-byte cap; nothing was applied"
        )
    desc = fields.get("description") or ""
    if utf8_len(desc) > MAX_DESCRIPTION_BYTES:
        raise ApiError(
            "invalid_argument",
            f"the description is {utf8_len(desc)} bytes, over the 4096-byte cap; nothing was applied",
        )
    if call.registry.exists(name):
        raise ApiError("already_exists", f"context '{name}' already exists")
    if not name:
        raise ApiError("invalid_argument", "the context name must not be empty")
    meta = Meta(
        description=desc,
        pinned=bool(fields.get("pinned") or False),
        dice_floor=_floor(fields.get("dice_floor")),
        semantic_floor=_floor(fields.get("semantic_floor")),
    )
    ctx = call.registry.create(name, meta)
    try:
        call.commit(ctx)
    except ApiError:
        call.registry.rollback([ctx])
        raise
    return True


async def patch_context(call: Call) -> Any:
    args = call.decode(S.CONTEXT_PATCH)
    description, pinned, dice, semantic = (args[k] for k in ("description", "pinned", "dice_floor", "semantic_floor"))
    if description is not None and utf8_len(description) > MAX_DESCRIPTION_BYTES:
        raise ApiError(
            "invalid_argument",
            f"the description is {utf8_len(description)} bytes, over the 4096-byte cap; nothing was applied",
        )
    ctx = call.context()
    m = ctx.meta
    if description is not None:
        m.description = description
    if pinned is not None:
        m.pinned = pinned
    if dice is not None:
        m.dice_floor = _floor(dice)
    if semantic is not None:
        m.semantic_floor = _floor(semantic)
    m.rev_config += 1
    ctx.dirty.meta = True
    call.commit(ctx)
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
        "stats": ctx.stats(),
        "usage": {
            "reads": m.reads,
            "empty_reads": m.empty_reads,
            "writes": m.writes,
            "last_read_epoch": m.last_read_epoch,
            "last_write_epoch": m.last_write_epoch,
        },
        "revision": revision(ctx),
        "schema_mode": None,
    }


def revision(ctx: Context) -> dict[str, int]:
    return {"graph": ctx.meta.rev_graph, "passages": ctx.meta.rev_passages, "config": ctx.meta.rev_config}


async def get_context(call: Call) -> Any:
    return directory_entry(call.context())


async def delete_context(call: Call) -> Any:
    assert call.name is not None
    if not call.registry.delete(call.name):
        raise no_context(call.name)
    return True


def _query_int(call: Call, key: str) -> int | None:
    raw = call.query.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise malformed(
            f"Failed to deserialize query string: {key}: invalid digit found in string", status=400
        ) from None
    if value < 0:
        raise malformed(f"Failed to deserialize query string: {key}: invalid digit found in string", status=400)
    return value


def _keyset_limit(call: Call) -> int:
    return max(1, _limit(_query_int(call, "limit"), MAX_MATCH_LIMIT))


async def list_contexts(call: Call) -> Any:
    limit = _keyset_limit(call)
    after = call.query.get("after")
    pinned_raw = call.query.get("pinned")
    pinned = None
    if pinned_raw is not None:
        if pinned_raw not in ("true", "false"):
            raise malformed(
                "Failed to deserialize query string: pinned: provided string was not `true` or `false`", status=400
            )
        pinned = pinned_raw == "true"
    entries = []
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


# ----- associations --------------------------------------------------------------


async def post_associations(call: Call) -> Any:
    body = call.json()
    if isinstance(body, list) and len(body) > MAX_ASSOCIATIONS:
        raise ApiError(
            "over_limit", f"batch of {len(body)} associations exceeds the per-request limit of 10000; split the ingest"
        )
    issues: list[Issue] = []
    items: list[tuple[str, str, str, float, str | None, int | None]] = []
    if not isinstance(body, list):
        issues.append(Issue("associations", "type", "an array", _json_type(body)))
    else:
        for i, item in enumerate(body):
            base = f"associations[{i}]"
            if not isinstance(item, dict):
                issues.append(Issue(base, "type", "an object", _json_type(item)))
                continue
            found = [
                _name_issue(f"{base}.subject", item.get("subject")),
                _name_issue(f"{base}.label", item.get("label")),
                _name_issue(f"{base}.object", item.get("object")),
            ]
            w = item.get("weight")
            if w is None:
                found.append(Issue(f"{base}.weight", "missing", "a finite number with |weight| <= 1000000", "absent"))
            elif isinstance(w, bool) or not isinstance(w, (int, float)):
                found.append(Issue(f"{base}.weight", "type", "a finite number with |weight| <= 1000000", _json_type(w)))
            elif not abs(w) <= MAX_WEIGHT:
                found.append(
                    Issue(
                        f"{base}.weight",
                        "range",
                        "a finite number with |weight| <= 1000000",
                        f"number {format_number(w)}",
                    )
                )
            found.append(_name_issue(f"{base}.source", item.get("source"), optional=True))
            p = item.get("paragraph")
            if p is not None and not _is_u32(p):
                found.append(
                    Issue(f"{base}.paragraph", "type", "a non-negative integer paragraph index", _json_type(p))
                )
            real = [f for f in found if f is not None]
            if real:
                issues.extend(real)
            else:
                items.append((item["subject"], item["label"], item["object"], float(w), item.get("source"), p))  # type: ignore[arg-type]
    if issues:
        raise collected("the associations batch", issues)
    ctx = call.context()
    for s, lab, o, w, src, p in items:
        ctx.assert_association(s, lab, o, w, src, p if src is not None else None)
    if items:
        ctx.meta.record_write()
    call.commit(ctx)
    return len(items)


def _triple(call: Call) -> tuple[str, str, str]:
    args = call.decode(S.TRIPLE)
    for key in ("subject", "label", "object"):
        check_name(args[key], key)
    return args["subject"], args["label"], args["object"]


async def retract_association(call: Call) -> Any:
    s, lab, o = _triple(call)
    ctx = call.context()
    retracted, removed = ctx.retract_association(s, lab, o)
    if retracted:
        ctx.meta.record_write()
        call.commit(ctx)
    return {"retracted": retracted, "attributions_removed": removed}


# ----- aliases and labels --------------------------------------------------------


async def post_aliases(call: Call) -> Any:
    args = call.decode(S.ALIASES)
    maps: list[tuple[int, dict[str, str]]] = [(CONCEPT, args["concepts"] or {}), (LABEL, args["labels"] or {})]
    n = sum(len(m) for _k, m in maps)
    if n > MAX_ASSOCIATIONS:
        raise ApiError("over_limit", f"batch of {n} aliases exceeds the per-request limit of 10000; split the ingest")
    for kind, m in maps:
        word = "concepts" if kind == CONCEPT else "labels"
        for alias, canonical in m.items():
            pair = ((f"a {word} alias", alias), (f"a {word} canonical", canonical))
            # each pair is checked for size, then for emptiness
            for what, value in pair:
                size = utf8_len(value)
                if size > MAX_NAME_BYTES:
                    raise ApiError(
                        "invalid_argument",
                        f"{what} is {size} bytes, over the {MAX_NAME_BYTES}-byte cap; nothing was applied",
                    )
            for what, value in pair:
                if not value:
                    raise ApiError("invalid_argument", f"{what} must not be empty; nothing was applied")
    ctx = call.context()
    applied = 0
    try:
        for kind, m in maps:
            word = "concept" if kind == CONCEPT else "label"
            for alias in sorted(m):
                try:
                    ctx.add_alias(kind, alias, m[alias])
                except AliasRefused as exc:
                    raise ApiError(
                        "conflict", f"applied {applied} aliases, then {word} alias '{alias}' → '{m[alias]}': {exc}"
                    ) from None
                applied += 1
    finally:
        if applied:
            ctx.meta.record_write()
        call.commit(ctx)
    return applied


async def delete_aliases(call: Call) -> Any:
    args = call.decode(S.ALIAS_REMOVAL)
    concepts = args["concepts"] or []
    label_list = args["labels"] or []
    if not concepts and not label_list:
        raise ApiError("invalid_argument", "the request names no aliases to remove")
    n = len(concepts) + len(label_list)
    if n > MAX_ASSOCIATIONS:
        raise ApiError(
            "over_limit", f"batch of {n} alias removals exceeds the per-request limit of 10000; split the request"
        )
    ctx = call.context()
    removed = 0
    try:
        for kind, names in ((CONCEPT, concepts), (LABEL, label_list)):
            word = "concept" if kind == CONCEPT else "label"
            for alias in names:
                if not ctx.remove_alias(kind, alias):
                    raise ApiError(
                        "conflict",
                        f"removed {removed} aliases, then '{alias}' is not a {word} alias "
                        "(canonical names cannot be removed this way)",
                    )
                removed += 1
    finally:
        if removed:
            ctx.meta.record_write()
        call.commit(ctx)
    return removed


async def list_aliases(call: Call) -> Any:
    limit = _keyset_limit(call)
    after = call.query.get("after")
    prefix = call.query.get("prefix") or ""
    _check_cursor(after, prefix)
    start: tuple[int, str] | None = None
    if after is not None:
        kind_word, sep, alias = after.partition(":")
        if not sep or kind_word not in ("concept", "label"):
            raise ApiError(
                "invalid_argument",
                "after must be 'concept:<alias>' or 'label:<alias>' — the last entry of the previous page",
            )
        start = (CONCEPT if kind_word == "concept" else LABEL, alias)
    ctx = call.context()
    out: dict[str, dict[str, str]] = {"concepts": {}, "labels": {}}
    total = 0
    taken = 0
    for kind, key in ((CONCEPT, "concepts"), (LABEL, "labels")):
        names = ctx.concepts if kind == CONCEPT else ctx.labels
        for alias in sorted(a for a in ctx.aliases[kind] if a.startswith(prefix)):
            total += 1
            if start is not None and (kind, alias) <= start:
                continue
            if taken < limit:
                out[key][alias] = names[ctx.aliases[kind][alias]]
                taken += 1
    return {"total": total, "concepts": out["concepts"], "labels": out["labels"]}


def _check_cursor(after: str | None, prefix: str | None) -> None:
    for what, value in (("after", after), ("prefix", prefix)):
        if value is not None and utf8_len(value) > 1032:
            raise ApiError(
                "invalid_argument", f"{what} is {utf8_len(value)} bytes, over the 1032-byte cap; nothing was applied"
            )


def _keyset_page(names: list[str], call: Call) -> tuple[int, list[str]]:
    limit = _keyset_limit(call)
    after = call.query.get("after")
    prefix = call.query.get("prefix") or ""
    _check_cursor(after, prefix)
    matching = sorted(n for n in names if n.startswith(prefix))
    page = [n for n in matching if after is None or n > after][:limit]
    return len(matching), page


async def list_labels(call: Call) -> Any:
    _check_cursor(call.query.get("after"), call.query.get("prefix"))
    _keyset_limit(call)
    ctx = call.context()
    total, page = _keyset_page(ctx.labels, call)
    return {"total": total, "labels": page}


# ----- passages ------------------------------------------------------------------


def _marker_list(
    body: dict[str, Any], key: str, field: str, cap: int, issues: list[Issue], sources: set[str]
) -> dict[str, list[tuple[int, Any]]]:
    out: dict[str, list[tuple[int, Any]]] = {}
    raw = body.get(key)
    if raw is None:
        return out
    if not isinstance(raw, dict):
        issues.append(Issue(key, "type", "an object", _json_type(raw)))
        return out
    for src, items in raw.items():
        base = f"{key}['{src}']"
        if src not in sources:
            issues.append(
                Issue(
                    base,
                    "unknown_reference",
                    "a source id present in this request's own `passages`",
                    "not present in this request",
                )
            )
            continue
        if not isinstance(items, list):
            issues.append(Issue(base, "type", "an array", _json_type(items)))
            continue
        kept: list[tuple[int, Any]] = []
        per_paragraph: dict[int, int] = {}
        for i, item in enumerate(items):
            ipath = f"{base}[{i}]"
            if not isinstance(item, dict):
                issues.append(Issue(ipath, "type", "an object", _json_type(item)))
                continue
            p = item.get("paragraph")
            ok = True
            if p is None:
                issues.append(
                    Issue(f"{ipath}.paragraph", "missing", "a non-negative integer paragraph index", "absent")
                )
                ok = False
            elif not _is_u32(p):
                issues.append(
                    Issue(f"{ipath}.paragraph", "type", "a non-negative integer paragraph index", _json_type(p))
                )
                ok = False
            if field == "locator":
                loc = item.get("locator")
                if not isinstance(loc, dict):
                    issues.append(
                        Issue(
                            f"{ipath}.locator",
                            "missing" if loc is None else "type",
                            "an object",
                            "absent" if loc is None else _json_type(loc),
                        )
                    )
                    continue
                for sub, subcap in (("kind", 64), ("value", 512)):
                    v = loc.get(sub)
                    spath = f"{ipath}.locator.{sub}"
                    if v is None:
                        issues.append(Issue(spath, "missing", "a string", "absent"))
                        ok = False
                    elif not isinstance(v, str):
                        issues.append(Issue(spath, "type", "a string", _json_type(v)))
                        ok = False
                    elif utf8_len(v) > subcap:
                        issues.append(Issue(spath, "too_long", f"at most {subcap} bytes", f"{utf8_len(v)} bytes"))
                        ok = False
                if ok:
                    kept.append((p, (loc["kind"], loc["value"])))
                continue
            v = item.get(field)
            fpath = f"{ipath}.{field}"
            if v is None:
                issues.append(Issue(fpath, "missing", NON_EMPTY if field == "question" else "a string", "absent"))
                continue
            if not isinstance(v, str):
                issues.append(Issue(fpath, "type", NON_EMPTY if field == "question" else "a string", _json_type(v)))
                continue
            if field == "question" and not v:
                issues.append(Issue(fpath, "empty", NON_EMPTY, "an empty string"))
                continue
            if utf8_len(v) > cap:
                issues.append(Issue(fpath, "too_long", f"at most {cap} bytes", f"{utf8_len(v)} bytes"))
                continue
            if field == "question" and ok:
                per_paragraph[p] = per_paragraph.get(p, 0) + 1
                if per_paragraph[p] > 8:
                    issues.append(
                        Issue(
                            f"{ipath}.paragraph",
                            "over_limit",
                            "at most 8 questions per paragraph",
                            f"{per_paragraph[p]} questions",
                        )
                    )
                    continue
            if ok:
                kept.append((p, v))
        out[src] = kept
    return out


async def post_sources(call: Call) -> Any:
    body = call.json()
    if isinstance(body, dict) and isinstance(body.get("passages"), dict) and len(body["passages"]) > MAX_PASSAGES:
        raise ApiError(
            "over_limit",
            f"batch of {len(body['passages'])} passages exceeds the per-request limit of 1000; split the store",
        )
    issues: list[Issue] = []
    if not isinstance(body, dict):
        raise collected("the passage store", [Issue("", "type", "an object", _json_type(body))])
    passages = body.get("passages")
    texts: dict[str, str] = {}
    if passages is None:
        issues.append(Issue("passages", "missing", "an object", "absent"))
    elif not isinstance(passages, dict):
        issues.append(Issue("passages", "type", "an object", _json_type(passages)))
    else:
        for src, text in passages.items():
            path = f"passages['{src}']"
            if not src:
                issues.append(Issue(path, "empty", NON_EMPTY, "an empty string"))
            elif utf8_len(src) > MAX_NAME_BYTES:
                issues.append(Issue(path, "too_long", f"at most {MAX_NAME_BYTES} bytes", f"{utf8_len(src)} bytes"))
            elif not isinstance(text, str):
                issues.append(Issue(path, "type", "a string", _json_type(text)))
            else:
                texts[src] = text
    sources = set(passages) if isinstance(passages, dict) else set()
    questions = _marker_list(body, "questions", "question", 512, issues, sources)
    sections = _marker_list(body, "sections", "section", 512, issues, sources)
    locators = _marker_list(body, "locators", "locator", 0, issues, sources)
    tags: dict[str, list[str]] = {}
    raw_tags = body.get("tags")
    if raw_tags is not None:
        if not isinstance(raw_tags, dict):
            issues.append(Issue("tags", "type", "an object", _json_type(raw_tags)))
        else:
            for src, values in raw_tags.items():
                path = f"tags['{src}']"
                if src not in sources:
                    issues.append(
                        Issue(
                            path,
                            "unknown_reference",
                            "a source id present in this request's own `passages`",
                            "not present in this request",
                        )
                    )
                elif not isinstance(values, list):
                    issues.append(Issue(path, "type", "an array", _json_type(values)))
                elif len(values) > 32:
                    issues.append(Issue(path, "over_limit", "at most 32 tags", f"{len(values)} tags"))
                else:
                    good = []
                    for i, tag in enumerate(values):
                        tpath = f"{path}[{i}]"
                        if not isinstance(tag, str):
                            issues.append(Issue(tpath, "type", NON_EMPTY, _json_type(tag)))
                        elif not tag:
                            issues.append(Issue(tpath, "empty", NON_EMPTY, "an empty string"))
                        elif utf8_len(tag) > 128:
                            issues.append(Issue(tpath, "too_long", "at most 128 bytes", f"{utf8_len(tag)} bytes"))
                        else:
                            good.append(tag)
                    tags[src] = good
    dates: dict[str, int] = {}
    raw_dates = body.get("dates")
    if raw_dates is not None:
        if not isinstance(raw_dates, dict):
            issues.append(Issue("dates", "type", "an object", _json_type(raw_dates)))
        else:
            for src, value in raw_dates.items():
                path = f"dates['{src}']"
                if src not in sources:
                    issues.append(
                        Issue(
                            path,
                            "unknown_reference",
                            "a source id present in this request's own `passages`",
                            "not present in this request",
                        )
                    )
                elif type(value) is not int or not 0 <= value <= MAX_U64:
                    issues.append(Issue(path, "type", "a non-negative integer (epoch seconds)", _json_type(value)))
                else:
                    dates[src] = value
    if issues:
        raise collected("the passage store", issues)
    ctx = call.context()
    now = int(time.time())
    totals = {
        "stored": 0,
        "questions_stored": 0,
        "questions_dropped": 0,
        "sections_stored": 0,
        "sections_dropped": 0,
        "locators_stored": 0,
        "locators_dropped": 0,
    }
    for src, text in texts.items():
        counts = ctx.store_passage(
            src,
            text,
            questions.get(src, []),
            sections.get(src, []),
            [(p, k, v) for p, (k, v) in locators.get(src, [])],
            tags.get(src, []),
            now,
            dates.get(src),
        )
        totals["stored"] += 1
        for key, value in attrs.asdict(counts).items():
            totals[key] += value
    if texts:
        ctx.meta.record_write()
    call.commit(ctx)
    return totals


async def lookup_sources(call: Call) -> Any:
    sources = call.decode(S.LOOKUP)["sources"]
    if len(sources) > MAX_INPUT_ITEMS:
        raise too_many_items("sources", len(sources))
    for s in sources:
        check_name(s, "source")
    ctx = call.context()
    found: dict[str, str] = {}
    missing: list[str] = []
    for s in sources:
        sid = ctx.find_source(s)
        passage = ctx.passages.get(sid) if sid is not None else None
        if passage is None:
            missing.append(s)
        else:
            found[s] = passage.text
    return {"passages": dict(sorted(found.items())), "missing": missing}


async def list_sources(call: Call) -> Any:
    _check_cursor(call.query.get("after"), call.query.get("prefix"))
    _keyset_limit(call)
    ctx = call.context()
    names = [ctx.sources[sid] for sid in ctx.passages]
    total, page = _keyset_page(names, call)
    entries = []
    for name in page:
        passage = ctx.passages[ctx.source_id[name]]
        entry: dict[str, Any] = {"name": name}
        if passage.stored_at is not None:
            entry["stored_at"] = passage.stored_at
        if passage.date is not None:
            entry["date"] = passage.date
        if passage.tags:
            entry["tags"] = passage.tags
        entries.append(entry)
    return {"total": total, "sources": page, "entries": entries}


async def retract_source(call: Call) -> Any:
    source = call.decode(S.RETRACT_SOURCE)["source"]
    check_name(source, "source")
    dry_run = call.query.get("dry_run") == "true"
    ctx = call.context()
    touched, removed = ctx.retract_source(source, dry_run=dry_run)
    if not dry_run and (touched or removed):
        ctx.meta.record_write()
        call.commit(ctx)
    return {"associations_touched": touched, "passage_removed": removed}


async def citations(call: Call) -> Any:
    args = call.decode(S.CITATION)
    source, paragraph = args["source"], args["paragraph"]
    check_name(source, "source")
    ctx = call.context()
    found = lanes.citation(ctx, source, paragraph)
    _count_read(ctx, isinstance(found, str))
    if found == "no_source":
        raise ApiError("no_source", f"source '{source}' not found in context '{ctx.name}'")
    if found == "no_paragraph":
        raise ApiError(
            "no_paragraph", f"paragraph {paragraph} out of range for source '{source}' in context '{ctx.name}'"
        )
    return found


# ----- graph reads ---------------------------------------------------------------


def _resolve(kind: int) -> Handler:
    async def handler(call: Call) -> Any:
        args = call.decode(S.RESOLVE)
        cue, dice = args["cue"], args["dice_floor"]
        limit = _limit(args["limit"], MAX_MATCH_LIMIT)
        ctx = call.context()
        floor = dice if dice is not None else ctx.meta.dice_floor if ctx.meta.dice_floor is not None else 0.3
        result = lanes.resolve(ctx, kind, cue, min(max(floor, 0.0), 1.0), limit)
        _count_read(ctx, not result)
        return result

    return handler


async def describe(call: Call) -> Any:
    concept = call.decode(S.DESCRIBE)["concept"]
    ctx = call.context()
    result = lanes.describe(ctx, concept)
    _count_read(ctx, result is None)
    return result


async def query(call: Call) -> Any:
    args = call.decode(S.QUERY)
    positions = {key: args[key] for key in ("subject", "label", "object")}
    limit = _limit(args["limit"], DEFAULT_MATCH_LIMIT)
    after = args["after"]
    # the whole shape decodes (422) before the handler's own 400s
    for key, values in positions.items():
        if values is not None and len(values) > MAX_INPUT_ITEMS:
            raise too_many_items(key, len(values))
    if all(v is None for v in positions.values()):
        raise ApiError("invalid_argument", "'subject', 'label', or 'object' must pin at least one value")
    ctx = call.context()
    edges = lanes.query_edges(ctx, positions["subject"], positions["label"], positions["object"])
    result = lanes.page_matches(ctx, edges, limit, after)
    _count_read(ctx, not result["matches"])
    return result


async def recall(call: Call) -> Any:
    args = call.decode(S.RECALL)
    cue = args["cue"]
    limit = _limit(args["limit"], DEFAULT_MATCH_LIMIT)
    after = args["after"]
    ctx = call.context()
    result = lanes.page_matches(ctx, lanes.recall_edges(ctx, cue), limit, after)
    _count_read(ctx, not result["matches"])
    return result


async def activate(call: Call) -> Any:
    args = call.decode(S.ACTIVATE)
    origins, decay = args["origins"], args["decay"]
    limit = _limit(args["limit"], 20)
    if len(origins) > MAX_INPUT_ITEMS:
        raise too_many_items("origins", len(origins))
    ctx = call.context()
    result = lanes.activate(ctx, origins, min(max(0.5 if decay is None else decay, 0.0), 1.0), limit)
    _count_read(ctx, not result["matches"])
    return result


async def search_sources(call: Call) -> Any:
    args = call.decode(S.SEARCH)
    query_text, tags, since, until = args["query"], args["tags"], args["since"], args["until"]
    limit = _limit(args["limit"], 5)
    if tags is not None:
        if len(tags) > MAX_INPUT_ITEMS:
            raise too_many_items("tags", len(tags))
        for tag in tags:
            check_name(tag, "a filter tag", 128)
    if since is not None and until is not None and since >= until:
        raise ApiError(
            "invalid_argument",
            f"since {since} is not before until {until} — the window is half-open [since, until) and this one "
            "selects nothing",
        )
    if tags is not None and len(set(tags)) > 32:
        raise ApiError("over_limit", f"{len(set(tags))} distinct filter tags where at most 32 may be named")
    ctx = call.context()
    result = lanes.search_passages(ctx, query_text, limit, tags, since, until)
    _count_read(ctx, not result["hits"])
    return result


# ----- import --------------------------------------------------------------------


async def import_stream(call: Call) -> Any:
    dry_run = call.query.get("dry_run") == "true"
    try:
        batches = parse_stream(call.body)
    except (ParseError, UnicodeDecodeError) as exc:
        raise ApiError("malformed_request", str(exc), status=400, integrity="nothing_written", retryable=True) from None
    except (ArithmeticError, ValueError, RecursionError):
        # a stream the parser could not classify (e.g. a number past the f64 range): still a parse
        # refusal, never a 500; the text names no request content
        raise ApiError(
            "malformed_request",
            "the stream could not be parsed: a line holds a value outside the JSON the "
            "importer accepts (for example a number past the f64 range)",
            status=400,
            integrity="nothing_written",
            retryable=True,
        ) from None
    for batch in batches:
        if not call.principal.may_access(batch.context):
            raise ApiError(
                "forbidden",
                f"key '{call.principal.key}' has no grant on context '{batch.context}' (batch source "
                f"'{batch.source}'); nothing was applied",
                integrity="nothing_written",
            )
    try:
        outcomes = run_import(
            call.registry,
            batches,
            dry_run=dry_run,
            deadline=call.deadline,
            timeout_secs=call.settings.request_timeout_secs,
        )
    except CommitFailed:
        raise ApiError("internal", "the import could not be made durable; the landed prefix is intact") from None
    return {"batches": outcomes}


def parse_query_string(raw: str) -> dict[str, str]:
    return dict(parse_qsl(raw, keep_blank_values=True))
