"""Text rules shared by every lane: normalization, paragraph split, the search tokenizer."""

from __future__ import annotations

import unicodedata

import regex

# Unicode White_Space, used for the blank-line test of the paragraph split.
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)

_KANA_FOLD = {cp: cp - 0x60 for cp in range(0x30A1, 0x30F7)}
_WORD_OR_RUN = regex.compile(r"[A-Za-z0-9]+|[[\p{Alphabetic}\p{N}]--[A-Za-z0-9]]+", regex.V1)
_ASCII_RUN = regex.compile(r"[A-Za-z0-9]+")
_HAS_UPPER = regex.compile(r"[A-Z]")


def lower_each(s: str) -> str:
    """Lowercase every character on its own (no final-sigma context rule)."""
    if "\u03a3" in s:
        return "".join(c.lower() for c in s)
    return s.lower()


def normalize(s: str) -> str:
    """The resolve/search normalization: fold_kana(lower_each(NFKC(lower_each(s))))."""
    if s.isascii():
        return s.lower()
    return lower_each(unicodedata.normalize("NFKC", lower_each(s))).translate(_KANA_FOLD)


def split_paragraphs(text: str) -> list[str]:
    """Split a passage into paragraphs: maximal runs of non-blank lines, split on LF only."""
    out: list[str] = []
    start: int | None = None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        content = line[:-1] if line.endswith("\r") else line
        blank = not content.strip(WHITE_SPACE)
        if blank:
            if start is not None:
                out.append(_join(lines, start, i - 1))
                start = None
        elif start is None:
            start = i
    if start is not None:
        out.append(_join(lines, start, len(lines) - 1))
    return out


def _join(lines: list[str], first: int, last: int) -> str:
    tail = lines[last]
    if tail.endswith("\r"):
        tail = tail[:-1]
    if first == last:
        return tail
    return "\n".join(lines[first:last]) + "\n" + tail


def text_terms(normalized: str) -> list[str]:
    """Step 1 of the tokenizer over already-normalized text: ASCII words, pairs, lone chars."""
    out: list[str] = []
    for m in _WORD_OR_RUN.finditer(normalized):
        run = m.group()
        c0 = run[0]
        if c0 < "\x80":
            out.append(run)
        elif len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def camel_terms(raw: str) -> list[str]:
    """Step 2: camelCase pieces of each ASCII-alphanumeric run of NFKC(raw), lowercased."""
    text = raw if raw.isascii() else unicodedata.normalize("NFKC", raw)
    if not _HAS_UPPER.search(text):
        return []
    out: list[str] = []
    for m in _ASCII_RUN.finditer(text):
        run = m.group()
        if run.islower() or run.isdigit():
            continue
        starts = [0]
        n = len(run)
        for i in range(1, n):
            c = run[i]
            if "A" <= c <= "Z":
                p = run[i - 1]
                if ("a" <= p <= "z") or p.isdigit():
                    starts.append(i)
                elif "A" <= p <= "Z" and i + 1 < n and "a" <= run[i + 1] <= "z":
                    starts.append(i)
        if len(starts) >= 2:
            bounds = starts + [n]
            out.extend(run[a:b].lower() for a, b in zip(bounds, bounds[1:]))
    return out


def terms(raw: str) -> list[str]:
    """Document terms of a text, duplicates kept, in emission order."""
    return text_terms(normalize(raw)) + camel_terms(raw)


def query_terms(raw: str) -> list[str]:
    """Query terms: document terms deduplicated, first occurrence wins."""
    return list(dict.fromkeys(terms(raw)))


def bigrams(s: str) -> list[str]:
    """Distinct adjacent code-point pairs of s, in first-occurrence order."""
    return list(dict.fromkeys(s[i : i + 2] for i in range(len(s) - 1)))


def utf8_len(s: str) -> int:
    """Length in UTF-8 bytes."""
    return len(s) if s.isascii() else len(s.encode("utf-8"))
