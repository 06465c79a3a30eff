"""The passage-store body (`POST …/sources`): every problem collected as an issue, then the validated parts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

from taguru_server.server.decode import MAX_NAME_BYTES, MAX_U64, NON_EMPTY, is_u32, json_type
from taguru_server.store.errors import Issue, collected
from taguru_server.store.model.operations import PassageIn
from taguru_server.store.text import utf8_len

PARAGRAPH_INDEX = "a non-negative integer paragraph index"
MAX_QUESTIONS_PER_PARAGRAPH = 8
MAX_TAGS = 32
MAX_TAG_BYTES = 128
LOCATOR_CAPS = (("kind", 64), ("value", 512))

Markers = dict[str, list[tuple[int, Any]]]


@attrs.frozen
class PassageStore:
    """A validated passage-store body: texts by source and each source's markers, tags and date."""

    texts: dict[str, str]
    questions: Markers
    sections: Markers
    locators: Markers
    tags: dict[str, list[str]]
    dates: dict[str, int]

    def passages(self, stored_at: int) -> list[PassageIn]:
        """The passages to store, in body order, each stamped `stored_at`."""
        return [
            PassageIn(
                src,
                text,
                self.questions.get(src, []),
                self.sections.get(src, []),
                [(p, k, v) for p, (k, v) in self.locators.get(src, [])],
                self.tags.get(src, []),
                stored_at,
                self.dates.get(src),
            )
            for src, text in self.texts.items()
        ]


def read_passage_store(body: dict[str, Any]) -> PassageStore:
    """Validate the whole body, raising one 400 that lists every issue found (in body order)."""
    issues: list[Issue] = []
    passages = body.get("passages")
    texts = _passage_texts(passages, issues)
    sources = set(passages) if isinstance(passages, dict) else set()
    questions = _marker_list(body, "questions", "question", 512, issues, sources)
    sections = _marker_list(body, "sections", "section", 512, issues, sources)
    locators = _marker_list(body, "locators", "locator", 0, issues, sources)
    tags = _tags(body, sources, issues)
    dates = _dates(body, sources, issues)
    if issues:
        raise collected("the passage store", issues)
    return PassageStore(texts, questions, sections, locators, tags, dates)


def _unknown_reference(path: str) -> Issue:
    return Issue(
        path,
        "unknown_reference",
        "a source id present in this request's own `passages`",
        "not present in this request",
    )


def _per_source(
    body: dict[str, Any], key: str, sources: set[str], issues: list[Issue]
) -> Iterator[tuple[str, Any, str]]:
    """The (source, value, path) entries of a per-source map whose source this request stores; records the rest."""
    raw = body.get(key)
    if raw is None:
        return
    if not isinstance(raw, dict):
        issues.append(Issue(key, "type", "an object", json_type(raw)))
        return
    for src, value in raw.items():
        path = f"{key}['{src}']"
        if src in sources:
            yield src, value, path
        else:
            issues.append(_unknown_reference(path))


def _passage_texts(passages: Any, issues: list[Issue]) -> dict[str, str]:
    texts: dict[str, str] = {}
    if passages is None:
        issues.append(Issue("passages", "missing", "an object", "absent"))
    elif not isinstance(passages, dict):
        issues.append(Issue("passages", "type", "an object", json_type(passages)))
    else:
        for src, text in passages.items():
            path = f"passages['{src}']"
            if not src:
                issues.append(Issue(path, "empty", NON_EMPTY, "an empty string"))
            elif utf8_len(src) > MAX_NAME_BYTES:
                issues.append(Issue(path, "too_long", f"at most {MAX_NAME_BYTES} bytes", f"{utf8_len(src)} bytes"))
            elif not isinstance(text, str):
                issues.append(Issue(path, "type", "a string", json_type(text)))
            else:
                texts[src] = text
    return texts


def _marker_list(
    body: dict[str, Any], key: str, field: str, cap: int, issues: list[Issue], sources: set[str]
) -> Markers:
    """One marker map (questions, sections or locators): per known source, its valid (paragraph, value) pairs."""
    out: Markers = {}
    for src, items, base in _per_source(body, key, sources, issues):
        if isinstance(items, list):
            out[src] = _markers(items, base, field, cap, issues)
        else:
            issues.append(Issue(base, "type", "an array", json_type(items)))
    return out


def _markers(items: list[Any], base: str, field: str, cap: int, issues: list[Issue]) -> list[tuple[int, Any]]:
    kept: list[tuple[int, Any]] = []
    per_paragraph: dict[int, int] = {}
    for i, item in enumerate(items):
        ipath = f"{base}[{i}]"
        if not isinstance(item, dict):
            issues.append(Issue(ipath, "type", "an object", json_type(item)))
            continue
        p: Any = item.get("paragraph")
        ok = _paragraph_ok(p, ipath, issues)
        if field == "locator":
            locator = _locator(item, ipath, issues)
            if ok and locator is not None:
                kept.append((p, locator))
            continue
        value = _text_marker(item, ipath, field, cap, issues)
        if value is None:
            continue
        if field == "question" and ok:
            per_paragraph[p] = per_paragraph.get(p, 0) + 1
            if per_paragraph[p] > MAX_QUESTIONS_PER_PARAGRAPH:
                issues.append(
                    Issue(
                        f"{ipath}.paragraph",
                        "over_limit",
                        f"at most {MAX_QUESTIONS_PER_PARAGRAPH} questions per paragraph",
                        f"{per_paragraph[p]} questions",
                    )
                )
                continue
        if ok:
            kept.append((p, value))
    return kept


def _paragraph_ok(p: Any, ipath: str, issues: list[Issue]) -> bool:
    if p is None:
        issues.append(Issue(f"{ipath}.paragraph", "missing", PARAGRAPH_INDEX, "absent"))
        return False
    if not is_u32(p):
        issues.append(Issue(f"{ipath}.paragraph", "type", PARAGRAPH_INDEX, json_type(p)))
        return False
    return True


def _locator(item: dict[str, Any], ipath: str, issues: list[Issue]) -> tuple[str, str] | None:
    """The (kind, value) of a locator marker, or None after recording why it is refused."""
    loc = item.get("locator")
    if not isinstance(loc, dict):
        missing = loc is None
        issues.append(
            Issue(
                f"{ipath}.locator",
                "missing" if missing else "type",
                "an object",
                "absent" if missing else json_type(loc),
            )
        )
        return None
    ok = True
    for sub, subcap in LOCATOR_CAPS:
        v = loc.get(sub)
        spath = f"{ipath}.locator.{sub}"
        if v is None:
            issues.append(Issue(spath, "missing", "a string", "absent"))
            ok = False
        elif not isinstance(v, str):
            issues.append(Issue(spath, "type", "a string", json_type(v)))
            ok = False
        elif utf8_len(v) > subcap:
            issues.append(Issue(spath, "too_long", f"at most {subcap} bytes", f"{utf8_len(v)} bytes"))
            ok = False
    return (loc["kind"], loc["value"]) if ok else None


def _text_marker(item: dict[str, Any], ipath: str, field: str, cap: int, issues: list[Issue]) -> str | None:
    """A question's or section's text, or None after recording why it is refused."""
    v = item.get(field)
    fpath = f"{ipath}.{field}"
    expected = NON_EMPTY if field == "question" else "a string"
    if v is None:
        issues.append(Issue(fpath, "missing", expected, "absent"))
    elif not isinstance(v, str):
        issues.append(Issue(fpath, "type", expected, json_type(v)))
    elif field == "question" and not v:
        issues.append(Issue(fpath, "empty", NON_EMPTY, "an empty string"))
    elif utf8_len(v) > cap:
        issues.append(Issue(fpath, "too_long", f"at most {cap} bytes", f"{utf8_len(v)} bytes"))
    else:
        return v
    return None


def _tags(body: dict[str, Any], sources: set[str], issues: list[Issue]) -> dict[str, list[str]]:
    tags: dict[str, list[str]] = {}
    for src, values, path in _per_source(body, "tags", sources, issues):
        if not isinstance(values, list):
            issues.append(Issue(path, "type", "an array", json_type(values)))
        elif len(values) > MAX_TAGS:
            issues.append(Issue(path, "over_limit", f"at most {MAX_TAGS} tags", f"{len(values)} tags"))
        else:
            tags[src] = _tag_list(values, path, issues)
    return tags


def _tag_list(values: list[Any], path: str, issues: list[Issue]) -> list[str]:
    good = []
    for i, tag in enumerate(values):
        tpath = f"{path}[{i}]"
        if not isinstance(tag, str):
            issues.append(Issue(tpath, "type", NON_EMPTY, json_type(tag)))
        elif not tag:
            issues.append(Issue(tpath, "empty", NON_EMPTY, "an empty string"))
        elif utf8_len(tag) > MAX_TAG_BYTES:
            issues.append(Issue(tpath, "too_long", f"at most {MAX_TAG_BYTES} bytes", f"{utf8_len(tag)} bytes"))
        else:
            good.append(tag)
    return good


def _dates(body: dict[str, Any], sources: set[str], issues: list[Issue]) -> dict[str, int]:
    dates: dict[str, int] = {}
    for src, value, path in _per_source(body, "dates", sources, issues):
        if type(value) is not int or not 0 <= value <= MAX_U64:
            issues.append(Issue(path, "type", "a non-negative integer (epoch seconds)", json_type(value)))
        else:
            dates[src] = value
    return dates
