"""Strict loading of `eval.jsonl` (docs/evaluate.md) and the shared `normalize_entry`."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from taguru_server.store.wire import describe_value

MAX_U32 = 2**32 - 1
MAX_U64 = 2**64 - 1
UNSET: Any = object()  # `section` absent (null means "outside every section")


class EvalError(Exception):
    """An eval file that cannot be used; the message is printed verbatim (exit 2)."""


def normalize_entry(s: str) -> str:
    """Trim, per-character lowercase, NFKC, lowercase again, katakana → hiragana."""
    s = s.strip()
    s = "".join(c.lower() for c in s)
    s = unicodedata.normalize("NFKC", s)
    s = "".join(c.lower() for c in s)
    return "".join(chr(ord(c) - 0x60) if 0x30A1 <= ord(c) <= 0x30F6 else c for c in s)


@dataclass
class ExpectedSource:
    source: str
    paragraphs: list[int]
    relevance: int


@dataclass
class ExpectedAssociation:
    subject: str
    label: str
    object: str


@dataclass
class ExpectedCitation:
    source: str
    paragraph: int
    section: Any = UNSET  # UNSET, None or a string
    quote: str | None = None


@dataclass
class Options:
    limit: int | None = None
    floor: float | None = None
    tags: list[str] | None = None
    since: int | None = None
    until: int | None = None


@dataclass
class Case:
    case_id: str
    query: str
    cues: list[str] = field(default_factory=list)
    expected_sources: list[ExpectedSource] = field(default_factory=list)
    expected_concepts: list[str] = field(default_factory=list)
    expected_labels: list[str] = field(default_factory=list)
    expected_associations: list[ExpectedAssociation] = field(default_factory=list)
    expected_citations: list[ExpectedCitation] = field(default_factory=list)
    options: Options = field(default_factory=Options)
    line: int = 0

    @property
    def limit(self) -> int:
        return self.options.limit if self.options.limit is not None else 10

    @property
    def effective_cues(self) -> list[str]:
        return list(self.cues) if self.cues else [self.query]


@dataclass
class EvalSet:
    path: str
    name: str | None
    cases: list[Case]


class _Bad(Exception):
    """A type/shape error inside one record (mapped to a line error by the caller)."""


def unknown_field(obj: dict[str, Any], allowed: tuple[str, ...]) -> str | None:
    """The refusal of the first key of `obj` that is not in `allowed` (serde's wording), or None."""
    for k in obj:
        if k not in allowed:
            return f"unknown field `{k}`, expected one of {', '.join('`' + a + '`' for a in allowed)}"
    return None


def _obj(v: Any, what: str, allowed: tuple[str, ...], where: str = "") -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Bad(f"{where}invalid type: {describe_value(v)}, expected {what}")
    refusal = unknown_field(v, allowed)
    if refusal is not None:
        raise _Bad(where + refusal)
    return v


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise _Bad(f"{where}: invalid type: {describe_value(v)}, expected a string")
    return v


def _uint(v: Any, where: str, top: int) -> int:
    if type(v) is not int or v < 0 or v > top:
        kind = "u32" if top == MAX_U32 else "u64"
        if type(v) is int:
            raise _Bad(f"{where}: invalid value: integer `{v}`, expected {kind}")
        raise _Bad(f"{where}: invalid type: {describe_value(v)}, expected {kind}")
    return v


def _str_list(v: Any, where: str) -> list[str]:
    if not isinstance(v, list):
        raise _Bad(f"{where}: invalid type: {describe_value(v)}, expected a sequence")
    return [_str(x, f"{where}[{i}]") for i, x in enumerate(v)]


def _required(obj: dict[str, Any], key: str) -> Any:
    if key not in obj:
        raise _Bad(f"missing field `{key}`")
    return obj[key]


CASE_KEYS = (
    "case_id",
    "query",
    "cues",
    "expected_sources",
    "expected_concepts",
    "expected_labels",
    "expected_associations",
    "expected_citations",
    "options",
)
OPTION_KEYS = ("limit", "floor", "tags", "since", "until")


def _base_case(rec: Any) -> tuple[Case, dict[str, Any]]:
    """The fields shared with `taguru benchmark search` (errors: `not a valid eval case: …`)."""
    obj = _obj(rec, "struct EvalCase", CASE_KEYS)
    case_id = _str(_required(obj, "case_id"), "case_id")
    query = _str(_required(obj, "query"), "query")
    case = Case(case_id=case_id, query=query)
    if "cues" in obj:
        case.cues = _str_list(obj["cues"], "cues")
    if "expected_sources" in obj:
        raw = obj["expected_sources"]
        if not isinstance(raw, list):
            raise _Bad(f"expected_sources: invalid type: {describe_value(raw)}, expected a sequence")
        for i, e in enumerate(raw):
            where = f"expected_sources[{i}]"
            eo = _obj(e, "struct ExpectedSource", ("source", "paragraphs", "relevance"), where + ": ")
            src = _str(_required(eo, "source"), where + ".source")
            pars: list[int] = []
            if "paragraphs" in eo:
                p = eo["paragraphs"]
                if not isinstance(p, list):
                    raise _Bad(f"{where}.paragraphs: invalid type: {describe_value(p)}, expected a sequence")
                pars = [_uint(x, f"{where}.paragraphs[{j}]", MAX_U32) for j, x in enumerate(p)]
            rel = 1
            if eo.get("relevance") is not None:
                rel = _uint(eo["relevance"], where + ".relevance", MAX_U32)
            case.expected_sources.append(ExpectedSource(src, pars, rel))
    if "expected_concepts" in obj:
        case.expected_concepts = _str_list(obj["expected_concepts"], "expected_concepts")
    if "options" in obj:
        oo = _obj(obj["options"], "struct EvalOptions", OPTION_KEYS, "options: ")
        opt = Options()
        if oo.get("limit") is not None:
            opt.limit = _uint(oo["limit"], "options.limit", MAX_U32)
        if oo.get("floor") is not None:
            f = oo["floor"]
            if isinstance(f, bool) or not isinstance(f, (int, float)):
                raise _Bad(f"options.floor: invalid type: {describe_value(f)}, expected f32")
            opt.floor = float(f)
        if oo.get("tags") is not None:
            opt.tags = _str_list(oo["tags"], "options.tags")
        if oo.get("since") is not None:
            opt.since = _uint(oo["since"], "options.since", MAX_U64)
        if oo.get("until") is not None:
            opt.until = _uint(oo["until"], "options.until", MAX_U64)
        case.options = opt
    return case, obj


def _extensions(case: Case, obj: dict[str, Any]) -> None:
    """The evaluate-only fields (errors: `case 'ID': {field}: …`)."""
    cid = case.case_id

    def bad(fieldname: str, detail: str) -> EvalError:
        return EvalError(f"case '{cid}': {fieldname}: {detail}")

    if obj.get("expected_labels") is not None:
        try:
            case.expected_labels = _str_list(obj["expected_labels"], "expected_labels")
        except _Bad as exc:
            raise bad("expected_labels", str(exc)) from None
    if obj.get("expected_associations") is not None:
        raw = obj["expected_associations"]
        try:
            if not isinstance(raw, list):
                raise _Bad(f"invalid type: {describe_value(raw)}, expected a sequence")
            for i, e in enumerate(raw):
                eo = _obj(e, "struct ExpectedAssociation", ("subject", "label", "object"), f"[{i}]: ")
                case.expected_associations.append(
                    ExpectedAssociation(
                        _str(_required(eo, "subject"), f"[{i}].subject"),
                        _str(_required(eo, "label"), f"[{i}].label"),
                        _str(_required(eo, "object"), f"[{i}].object"),
                    )
                )
        except _Bad as exc:
            raise bad("expected_associations", str(exc)) from None
    if obj.get("expected_citations") is not None:
        raw = obj["expected_citations"]
        try:
            if not isinstance(raw, list):
                raise _Bad(f"invalid type: {describe_value(raw)}, expected a sequence")
            for i, e in enumerate(raw):
                eo = _obj(e, "struct ExpectedCitation", ("source", "paragraph", "section", "quote"), f"[{i}]: ")
                cit = ExpectedCitation(
                    _str(_required(eo, "source"), f"[{i}].source"),
                    _uint(_required(eo, "paragraph"), f"[{i}].paragraph", MAX_U32),
                )
                if "section" in eo:
                    cit.section = None if eo["section"] is None else _str(eo["section"], f"[{i}].section")
                if eo.get("quote") is not None:
                    cit.quote = _str(eo["quote"], f"[{i}].quote")
                case.expected_citations.append(cit)
        except _Bad as exc:
            raise bad("expected_citations", str(exc)) from None


def _check(case: Case, seen: set[str]) -> None:
    cid = case.case_id
    if not cid.strip():
        raise EvalError("case_id must not be empty")
    if not case.query.strip():
        raise EvalError(f"case '{cid}': query must not be empty")
    if cid in seen:
        raise EvalError(f"duplicate case_id '{cid}'")
    for e in case.expected_sources:
        if not e.source.strip():
            raise EvalError(f"case '{cid}': expected_sources: source must not be empty")
    for e in case.expected_sources:
        if e.relevance > 3:
            raise EvalError(f"case '{cid}': expected_sources relevance must be 0..=3, got {e.relevance}")
    for lab in case.expected_labels:
        if not lab.strip():
            raise EvalError(f"case '{cid}': expected_labels: entries must not be empty")
    for a in case.expected_associations:
        if not (a.subject.strip() and a.label.strip() and a.object.strip()):
            raise EvalError(f"case '{cid}': expected_associations: subject/label/object must not be empty")
    for c in case.expected_citations:
        if not c.source.strip():
            raise EvalError(f"case '{cid}': expected_citations: source must not be empty")
        if c.quote is not None and not c.quote.strip():
            raise EvalError(f"case '{cid}': expected_citations: quote must not be empty")
    f = case.options.floor
    if f is not None and not (0.0 <= f <= 1.0):
        raise EvalError(f"case '{cid}': options.floor must be 0.0..=1.0, got {f}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def load_eval(path: str) -> EvalSet:
    """Read and validate the whole file; the first error raises EvalError."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalError(f"cannot read {path}: {exc}") from None
    lines = [(n, raw.strip()) for n, raw in enumerate(text.split("\n"), start=1)]
    lines = [(n, s) for n, s in lines if s]
    if not lines:
        raise EvalError(f"{path}: empty file: expected a taguru_eval header line")
    name: str | None = None
    cases: list[Case] = []
    seen: set[str] = set()
    for idx, (n, line) in enumerate(lines):
        prefix = f"{path}: line {n}: "
        try:
            rec = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise EvalError(f"{prefix}not JSON: {exc}") from None
        if idx == 0:
            try:
                hdr = _obj(rec, "struct EvalHeader", ("taguru_eval", "name", "default_target"))
                stamp = _required(hdr, "taguru_eval")
                if type(stamp) is not int:
                    raise _Bad(f"taguru_eval: invalid type: {describe_value(stamp)}, expected u32")
                if hdr.get("name") is not None:
                    name = _str(hdr["name"], "name")
            except _Bad as exc:
                raise EvalError(f"{prefix}not a valid eval header: {exc}") from None
            if stamp != 1:
                raise EvalError(f"{prefix}taguru_eval must be 1, got {stamp}")
            continue
        try:
            case, obj = _base_case(rec)
        except _Bad as exc:
            raise EvalError(f"{prefix}not a valid eval case: {exc}") from None
        case.line = n
        try:
            _extensions(case, obj)
            _check(case, seen)
        except EvalError as exc:
            raise EvalError(f"{prefix}{exc}") from None
        seen.add(case.case_id)
        cases.append(case)
    if not cases:
        raise EvalError(f"{path}: no cases: expected at least one case line after the header")
    return EvalSet(path=path, name=name, cases=cases)
