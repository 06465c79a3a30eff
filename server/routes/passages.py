"""The passage routes: store, list, look up, search and retract sources; cite a paragraph."""

from __future__ import annotations

import time
from typing import Any

import attrs

from taguru_server.server import decode as S
from taguru_server.server.call import Call, Route
from taguru_server.server.decode import MAX_NAME_BYTES, MAX_U64, NON_EMPTY, check_name
from taguru_server.server.decode import is_u32 as _is_u32
from taguru_server.server.decode import json_type as _json_type
from taguru_server.server.routes.common import (
    MAX_INPUT_ITEMS,
    MAX_PASSAGES,
    _check_cursor,
    _count_read,
    _keyset_limit,
    _keyset_page,
    _limit,
)
from taguru_server.store import lanes
from taguru_server.store.errors import ApiError, Issue, collected, too_many_items
from taguru_server.store.text import utf8_len


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
            p: Any = item.get("paragraph")
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


ROUTES: list[Route] = [
    Route("POST", "/contexts/{name}/sources", post_sources, "write"),
    Route("GET", "/contexts/{name}/sources", list_sources, "read"),
    Route("POST", "/contexts/{name}/sources/lookup", lookup_sources, "read"),
    Route("POST", "/contexts/{name}/sources/search", search_sources, "read"),
    Route("POST", "/contexts/{name}/sources/retract", retract_source, "write"),
    Route("POST", "/contexts/{name}/citations", citations, "read"),
]
