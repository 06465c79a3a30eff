"""The spelling indexes of a loaded context as a file: what indexing every concept and label spelling builds, kept.

A load adds every spelling (canonical names in id order, then aliases in the order they were
stored) to the context's two lexicons, and the first read indexes them: normalizes each one,
interns its bigrams and posts it per bigram and per character — at 300k paragraphs about 49k
spellings and the largest part of a load after the edges. Everything indexing builds is a function
of the sequence of (spelling, record) pairs alone, so the file is keyed on a digest of that
sequence (per lexicon) and the normalizer's version: a load whose lexicons hold exactly that
sequence, nothing indexed yet and nothing removed, takes the indexed structures from the file;
any other file is ignored and rewritten after the load indexes the spellings itself. The arrays
are `store.index.index_file`'s (checksummed, written atomically); the structures are rebuilt from
them as the lexicon's own lists and arrays, equal to what indexing builds.
"""

from __future__ import annotations

import hashlib
from array import array
from pathlib import Path

import numpy as np

from taguru_server.store.index.index_file import (
    IndexFileRejected,
    blob_strings,
    read_arrays,
    strings_blob,
    write_arrays,
)
from taguru_server.store.index.lexicon import Lexicon

KIND = "lexicon"
FORMAT = 1
# bump when `store.text.normalize` or `bigrams` change what a spelling indexes to: older files are rebuilt
NORMALIZER = 1


def lexicon_image_path(index_dir: Path, cid: int) -> Path:
    return index_dir / f"ctx-{cid}.{KIND}"


def _fresh(lex: Lexicon) -> bool:
    """Nothing indexed yet and nothing removed: the lexicon is its sequence of added spellings."""
    return lex._indexed == 0 and len(lex._spellings) == len(lex.records) == lex.n_live and not lex.norms


def _digest(lex: Lexicon) -> str:
    h = hashlib.blake2b(digest_size=16)
    for spelling, record in zip(lex._spellings, lex.records, strict=True):
        h.update(spelling.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f%d\x1e" % record)
    return h.hexdigest()


def _csr(posts: list[array[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(posts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in posts], out=ptr[1:])
    flat = np.frombuffer(b"".join(p.tobytes() for p in posts), dtype=np.int32) if posts else np.zeros(0, np.int32)
    return ptr, flat


def _lists(ptr: np.ndarray, flat: np.ndarray) -> list[array[int]]:
    raw = np.ascontiguousarray(flat, dtype=np.int32).tobytes()
    cuts = (ptr * 4).tolist()
    return [array("i", raw[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]


def _int32(values: array[int]) -> np.ndarray:
    return np.frombuffer(values, dtype=np.int32) if len(values) else np.zeros(0, np.int32)


def _arrays_of(lex: Lexicon, prefix: str) -> dict[str, np.ndarray]:
    norms, norm_offsets = strings_blob(lex.norms)
    grams, gram_offsets = strings_blob(list(lex.gram_id))
    chars, char_offsets = strings_blob(list(lex.char_post))
    gram_ptr, gram_flat = _csr(lex.gram_post)
    char_ptr, char_flat = _csr(list(lex.char_post.values()))
    arrays = {
        "norms": norms,
        "norm_offsets": norm_offsets,
        "grams": grams,
        "gram_offsets": gram_offsets,
        "gram_ptr": gram_ptr,
        "gram_post": gram_flat,
        "gram_df": _int32(lex.gram_df),
        "chars": chars,
        "char_offsets": char_offsets,
        "char_ptr": char_ptr,
        "char_post": char_flat,
        "entry_grams": np.frombuffer(lex.entry_grams, dtype=np.int32)
        if len(lex.entry_grams)
        else np.zeros(0, np.int32),
        "entry_ptr": np.frombuffer(lex.entry_ptr, dtype=np.int64),
    }
    return {f"{prefix}{name}": arr for name, arr in arrays.items()}


def _install(lex: Lexicon, arrays: dict[str, np.ndarray], prefix: str) -> str | None:
    """Give a fresh lexicon the indexed structures of the file's arrays; None when done, else why not
    (nothing was changed)."""
    a = {name[len(prefix) :]: arr for name, arr in arrays.items() if name.startswith(prefix)}
    norms = blob_strings(a["norms"], a["norm_offsets"])
    grams = blob_strings(a["grams"], a["gram_offsets"])
    chars = blob_strings(a["chars"], a["char_offsets"])
    n = len(lex.records)
    n_grams = len(grams)
    entry_ptr = a["entry_ptr"]
    if not (
        len(norms) == n
        and len(entry_ptr) == n + 1
        and int(entry_ptr[-1]) == len(a["entry_grams"])
        and len(a["gram_ptr"]) == n_grams + 1 == len(a["gram_df"]) + 1
        and int(a["gram_ptr"][-1]) == len(a["gram_post"])
        and len(a["char_ptr"]) == len(chars) + 1
        and int(a["char_ptr"][-1]) == len(a["char_post"])
        and (not len(a["entry_grams"]) or 0 <= int(a["entry_grams"].min()) <= int(a["entry_grams"].max()) < n_grams)
        and all(0 <= int(p.min()) <= int(p.max()) < n for p in (a["gram_post"], a["char_post"]) if len(p))
    ):
        return "damaged (array lengths)"
    by_norm: dict[str, list[int]] = {}
    for entry, norm in enumerate(norms):
        hits = by_norm.get(norm)
        if hits is None:
            by_norm[norm] = [entry]
        else:
            hits.append(entry)
    lex.norms = norms
    lex.by_norm = by_norm
    lex.gram_id = dict(zip(grams, range(n_grams), strict=True))
    lex.gram_post = _lists(a["gram_ptr"], a["gram_post"])
    lex.gram_df = array("i", np.ascontiguousarray(a["gram_df"], dtype=np.int32).tobytes())
    lex.char_post = dict(zip(chars, _lists(a["char_ptr"], a["char_post"]), strict=True))
    lex.entry_grams = array("i", np.ascontiguousarray(a["entry_grams"], dtype=np.int32).tobytes())
    lex.entry_ptr = array("q", np.ascontiguousarray(entry_ptr, dtype=np.int64).tobytes())
    lex._spellings = []
    lex._indexed = n
    lex._view = None
    return None


def index_lexicons(lexicons: tuple[Lexicon, ...], index_dir: Path, cid: int) -> tuple[str, str | None]:
    """Index a loaded context's lexicons from their file where it holds, else index them and write the file.

    Returns ("image", None), or ("built", why not the file)."""
    if not all(_fresh(lex) for lex in lexicons):
        return ("built", "not a fresh load")
    digests = [_digest(lex) for lex in lexicons]
    path = lexicon_image_path(index_dir, cid)
    reason = _restore(lexicons, path, digests)
    if reason is None:
        return ("image", None)
    for lex in lexicons:
        lex._flush()
    try:
        _write(lexicons, path, digests)
    except (OSError, ValueError) as exc:
        return ("built", f"{reason}; not saved ({type(exc).__name__})")
    return ("built", reason)


def save_lexicons(lexicons: tuple[Lexicon, ...], index_dir: Path, cid: int) -> bool:
    """Write the file for fresh lexicons (spellings added, none indexed: e.g. built in a load's order from
    a context in memory), indexing them; False when a lexicon is not fresh."""
    if not all(_fresh(lex) for lex in lexicons):
        return False
    digests = [_digest(lex) for lex in lexicons]
    for lex in lexicons:
        lex._flush()
    _write(lexicons, lexicon_image_path(index_dir, cid), digests)
    return True


def _restore(lexicons: tuple[Lexicon, ...], path: Path, digests: list[str]) -> str | None:
    try:
        header, arrays = read_arrays(path)
    except IndexFileRejected as exc:
        return str(exc)
    if header.get("kind") != KIND or header.get("format") != FORMAT or header.get("normalizer") != NORMALIZER:
        return "another format"
    if header.get("digests") != digests:
        return "other spellings"
    try:
        for i, lex in enumerate(lexicons):
            reason = _install(lex, arrays, f"{i}.")
            if reason is not None:
                return reason  # an earlier lexicon may hold the file's structures: they equal what indexing builds
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
        return f"damaged ({type(exc).__name__})"
    return None


def _write(lexicons: tuple[Lexicon, ...], path: Path, digests: list[str]) -> int:
    arrays: dict[str, np.ndarray] = {}
    for i, lex in enumerate(lexicons):
        arrays |= _arrays_of(lex, f"{i}.")
    header = {"kind": KIND, "format": FORMAT, "normalizer": NORMALIZER, "digests": digests}
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_arrays(path, header, arrays)
