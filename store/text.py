"""Text rules shared by every lane: normalization, paragraph split, the search tokenizer."""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, Any

import regex

if TYPE_CHECKING:
    import numpy as np

# Unicode White_Space, used for the blank-line test of the paragraph split.
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"
)

_KANA_FOLD = {cp: cp - 0x60 for cp in range(0x30A1, 0x30F7)}
_WORD_OR_RUN = regex.compile(r"[A-Za-z0-9]+|[[\p{Alphabetic}\p{N}]--[A-Za-z0-9]]+", regex.V1)
_HAS_UPPER = regex.compile(r"[A-Z]")
# ASCII-alphanumeric runs with an uppercase letter after their first character: only these
# can split into two or more camelCase pieces.
_CAMEL_RUN = regex.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9][A-Za-z0-9]*?[A-Z][A-Za-z0-9]*")


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


_SPACE_ONLY_LINE = re.compile(
    "(?m)^[" + "".join(f"\\u{ord(c):04x}" for c in WHITE_SPACE if c not in "\n\r") + "]+$"
)  # a non-empty line of White_Space only (the stdlib engine is faster on this one)
_BLANK_RUN = re.compile(r"\n\n+")
_WHITE_NOT_EOL = frozenset(c for c in WHITE_SPACE if c not in "\n\r")
_SPACE_CLASS = "[" + "".join(f"\\u{ord(c):04x}" for c in sorted(_WHITE_NOT_EOL)) + "]+(?=\n|\\Z)"
_SPACE_ONLY_AFTER_LF = re.compile("\n" + _SPACE_CLASS)  # such a line after the first, found from its LF (fast)
_SPACE_ONLY_FIRST = re.compile(_SPACE_CLASS)  # the first line, when it is one (matched at 0)


def split_paragraphs(text: str) -> list[str]:
    """Split a passage into paragraphs: maximal runs of non-blank lines, split on LF only."""
    if "\r" not in text and not _SPACE_ONLY_LINE.search(text):
        # every blank line is an empty one: paragraphs are what runs of newlines separate
        return [p for p in _BLANK_RUN.split(text.strip("\n")) if p]
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


def split_many(texts: list[str]) -> list[list[str]]:
    """`[split_paragraphs(t) for t in texts]`, faster where no text has a CR or a line of white space only
    (the common case: a load splits every stored passage)."""
    out = []
    split = _BLANK_RUN.split
    for t in texts:
        if "\r" in t or _SPACE_ONLY_AFTER_LF.search(t) or (t[:1] in _WHITE_NOT_EOL and _SPACE_ONLY_FIRST.match(t)):
            out.append(split_paragraphs(t))
            continue
        t = t.strip("\n")
        if "\n\n\n" in t:
            out.append([p for p in split(t) if p])
        else:  # every blank run is exactly two LFs, none at either end: str.split gives the same pieces
            out.append(t.split("\n\n") if t else [])
    return out


def paragraph_counts(texts: list[str]) -> list[int]:
    """`[len(p) for p in split_many(texts)]` without building the paragraphs where the fast path of
    `split_many` holds (counted: one less than its pieces' separators plus one)."""
    out = []
    for t in texts:
        if "\r" in t or _SPACE_ONLY_AFTER_LF.search(t) or (t[:1] in _WHITE_NOT_EOL and _SPACE_ONLY_FIRST.match(t)):
            out.append(len(split_paragraphs(t)))
            continue
        t = t.strip("\n")
        if "\n\n\n" in t:
            out.append(sum(1 for p in _BLANK_RUN.split(t) if p))
        else:
            out.append(t.count("\n\n") + 1 if t else 0)
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
    for m in _CAMEL_RUN.finditer(text):
        run = m.group()
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
            out.extend(run[a:b].lower() for a, b in zip(bounds, bounds[1:], strict=False))
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


def name_problem(label: str, value: str, cap: int) -> str | None:
    """Why `value` cannot be a `label` of at most `cap` UTF-8 bytes (over the cap, or empty), or None."""
    size = utf8_len(value)
    if size > cap:
        return f"{label} of {size} bytes exceeds the {cap}-byte cap"
    return None if value else f"{label} must not be empty"


# ----- bulk document tokenization --------------------------------------------------------
#
# The BM25 index needs, per document, only the multiset of its terms (document terms keep
# duplicates and their order never matters), so documents are tokenized in bulk: each part
# is normalized on its own (NFKC is fast on text that passes its quick check), the parts are
# joined, and pairs and lone characters are found over the code points with numpy. ASCII
# words and camelCase pieces stay in Python. `terms()` remains the definition; the scale
# tests check that this path yields the same multiset for every document.

_CLASS_TABLE: Any = None  # uint8 per BMP code point: 1 ASCII alphanumeric, 2 other alphanumeric
_ALNUM = regex.compile(r"[\p{Alphabetic}\p{N}]", regex.V1)
_DOC_SEP = "\x00"
_PART_SEP = "\x01"


def _class_table() -> np.ndarray[Any, Any]:
    global _CLASS_TABLE
    if _CLASS_TABLE is None:
        import numpy as np

        table = np.zeros(0x10000, dtype=np.uint8)
        bmp = "".join(" " if 0xD800 <= c < 0xE000 else chr(c) for c in range(0x10000))
        for m in _ALNUM.finditer(bmp):
            table[m.start()] = 2
        for c in b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz":
            table[c] = 1
        _CLASS_TABLE = table
    return _CLASS_TABLE


def _normalize_unfolded(s: str) -> str:
    """normalize() without the final kana fold (the bulk path folds code points itself)."""
    if s.isascii():
        return s.lower()
    return lower_each(unicodedata.normalize("NFKC", lower_each(s)))


def _camel_candidate(raw: str) -> bool:
    """Whether NFKC(raw) holds an ASCII uppercase letter (only then can camel pieces exist)."""
    if raw.isascii() or unicodedata.is_normalized("NFKC", raw):
        return _HAS_UPPER.search(raw) is not None
    return _HAS_UPPER.search(unicodedata.normalize("NFKC", raw)) is not None


def bulk_term_counts(
    docs: list[list[str]],
) -> tuple[list[str], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Term counts of many documents at once; a document is a list of texts (paragraph, questions).

    Returns ``(terms, post_term, post_doc, post_tf, doc_len)``: the distinct terms met, then one
    entry per (document, distinct term) with the index into ``terms``, the document's position
    in ``docs`` and its term frequency (sorted by term, then document), then each document's
    term count with duplicates.
    """
    import numpy as np

    n_docs = len(docs)
    if n_docs == 0:
        e = np.empty(0, dtype=np.int64)
        return [], e, e, np.empty(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
    table = _class_table()
    norm_parts: list[str] = []
    extra: list[tuple[int, list[str]]] = []  # (doc, camel pieces)
    for d, parts in enumerate(docs):
        normed = []
        for p in parts:
            part = _normalize_unfolded(p)
            if _DOC_SEP in part:
                part = part.replace(_DOC_SEP, _PART_SEP)
            normed.append(part)
            if _camel_candidate(p):
                pieces = camel_terms(p)
                if pieces:
                    extra.append((d, pieces))
        norm_parts.append(_PART_SEP.join(normed))
    joined = _DOC_SEP.join(norm_parts)
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    # kana fold on code points (the last step of normalize)
    kana = (cps >= 0x30A1) & (cps <= 0x30F6)
    if kana.any():
        cps = cps.copy()
        cps[kana] -= 0x60
    big = cps >= 0x10000
    cls = table[np.where(big, 0, cps)]
    if big.any():
        for cp in np.unique(cps[big]).tolist():
            if _ALNUM.match(chr(cp)):
                cls[cps == cp] = 2
    doc_of = np.cumsum(cps == 0, dtype=np.int64)  # a separator belongs to the document it ends
    n = len(cps)
    is_x = cls == 2
    prev_x = np.zeros(n, dtype=bool)
    prev_x[1:] = is_x[:-1]
    next_x = np.zeros(n, dtype=bool)
    next_x[:-1] = is_x[1:]
    pair_pos = np.flatnonzero(is_x & next_x)
    lone_pos = np.flatnonzero(is_x & ~prev_x & ~next_x)
    c64 = cps.astype(np.uint64)
    keys = np.concatenate(((c64[pair_pos] << np.uint64(21)) | c64[pair_pos + 1], c64[lone_pos]))
    key_doc = np.concatenate((doc_of[pair_pos], doc_of[lone_pos]))
    doc_len = np.bincount(key_doc, minlength=n_docs).astype(np.int64)
    # ASCII words (runs of ASCII alphanumerics) and camel pieces, counted in Python
    is_a = cls == 1
    prev_a = np.zeros(n, dtype=bool)
    prev_a[1:] = is_a[:-1]
    next_a = np.zeros(n, dtype=bool)
    next_a[:-1] = is_a[1:]
    w_start = np.flatnonzero(is_a & ~prev_a)
    w_end = np.flatnonzero(is_a & ~next_a) + 1
    words = [joined[a:b] for a, b in zip(w_start.tolist(), w_end.tolist(), strict=False)]
    word_doc = doc_of[w_start]
    if extra:
        words.extend(p for _d, pieces in extra for p in pieces)
        word_doc = np.concatenate((word_doc, np.array([d for d, pieces in extra for _p in pieces], dtype=np.int64)))
    if words:
        doc_len += np.bincount(word_doc, minlength=n_docs)
    # (key, document) pairs with their counts
    if n_docs >= 1 << 22:
        raise ValueError("too many documents for one bulk call")
    comb = np.sort((keys << np.uint64(22)) | key_doc.astype(np.uint64))
    starts = np.flatnonzero(np.diff(comb, prepend=comb[:1] ^ np.uint64(1))) if len(comb) else np.empty(0, np.int64)
    tf_k = np.diff(np.append(starts, len(comb)))
    uniq = comb[starts]
    post_doc_k = (uniq & np.uint64((1 << 22) - 1)).astype(np.int64)
    post_key = uniq >> np.uint64(22)
    kstarts = (
        np.flatnonzero(np.diff(post_key, prepend=post_key[:1] ^ np.uint64(1)))
        if len(post_key)
        else np.empty(0, np.int64)
    )
    term_keys = post_key[kstarts].tolist()
    terms_out = [chr(k >> 21) + chr(k & 0x1FFFFF) if k >= 1 << 21 else chr(k) for k in term_keys]
    post_term_k = np.repeat(np.arange(len(kstarts), dtype=np.int64), np.diff(np.append(kstarts, len(post_key))))
    if words:
        w_index: dict[str, int] = {}
        base = len(terms_out)
        w_ids = np.array([w_index.setdefault(w, len(w_index)) for w in words], dtype=np.int64)
        terms_out.extend(w_index)
        wc = np.sort(w_ids * n_docs + word_doc)
        ws = np.flatnonzero(np.diff(wc, prepend=wc[:1] ^ 1))
        tf_w = np.diff(np.append(ws, len(wc)))
        wu = wc[ws]
        post_term = np.concatenate((post_term_k, wu // n_docs + base))
        post_doc = np.concatenate((post_doc_k, wu % n_docs))
        post_tf = np.concatenate((tf_k, tf_w)).astype(np.float32)
    else:
        post_term, post_doc, post_tf = post_term_k, post_doc_k, tf_k.astype(np.float32)
    return terms_out, post_term, post_doc, post_tf, doc_len
