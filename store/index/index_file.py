"""A versioned file of named numpy arrays, checksummed, written atomically and read memory-mapped.

Layout: an 8-byte magic, the header length (u64 little-endian), the header's CRC-32 (u32), the
header (UTF-8 JSON: the file's kind and format, what it was built from, and per array its dtype,
shape, byte offset and CRC-32), then the arrays, each starting on a 64-byte boundary. Arrays are
read as views of one read-only `mmap` of the file, so every process reading the same file shares
its pages through the page cache, and nothing is copied until it is written to.

A file is never trusted on its word: `read_arrays` checks the magic, the header checksum, that
every array lies inside the file, and every array's checksum, and raises `IndexFileRejected`
with a short reason otherwise. `write_arrays` writes a staging file in the same directory,
syncs it and renames it over the old one, so a reader sees the old file or the new, never half.
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"TGRIDX\x00\x01"
_PREFIX = struct.Struct("<8sQI")
ALIGN = 64
MAX_HEADER = 1 << 20
CHECK_CHUNK = 1 << 22  # bytes read at a time by the checksum pass
_MAPPED: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()  # every file mapping `read_arrays` opened that is alive


class IndexFileRejected(Exception):
    """The file cannot be used: missing, damaged, or another format; the message is a short reason."""


def _crc(buf: Any) -> int:
    return zlib.crc32(buf) & 0xFFFF_FFFF


def _bytes_of(arr: np.ndarray) -> memoryview:
    return arr.reshape(-1).view(np.uint8).data


def write_arrays(path: Path, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> int:
    """Write `arrays` with `header` to `path` atomically; returns the file's size in bytes."""
    layout: dict[str, dict[str, Any]] = {}
    parts: list[np.ndarray] = []
    offset = 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        offset = -(-offset // ALIGN) * ALIGN
        layout[name] = {
            "dtype": arr.dtype.str,
            "shape": list(arr.shape),
            "offset": offset,
            "crc32": _crc(_bytes_of(arr)) if arr.nbytes else 0,
        }
        parts.append(arr)
        offset += arr.nbytes
    body = json.dumps({**header, "arrays": layout}, sort_keys=True, ensure_ascii=True).encode("ascii")
    start = -(-(_PREFIX.size + len(body)) // ALIGN) * ALIGN
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(path)
    # a name no other writer uses, also with several hosts on one shared directory
    staging = path.with_name(f"{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    try:
        with open(staging, "wb") as f:
            f.write(_PREFIX.pack(MAGIC, len(body), _crc(body)))
            f.write(body)
            written = _PREFIX.size + len(body)
            for (_name, spec), arr in zip(layout.items(), parts, strict=True):
                at = start + spec["offset"]
                f.write(b"\0" * (at - written))
                f.write(_bytes_of(arr) if arr.nbytes else b"")
                written = at + arr.nbytes
            f.flush()
            os.fsync(f.fileno())
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    _sync_dir(path.parent)
    return written


def strings_blob(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Strings as one UTF-8 byte array and their n+1 offsets into it (what `blob_strings` reads back)."""
    encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def blob_strings(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    """The strings `strings_blob` stored."""
    raw = blob.tobytes()
    cuts = offsets.tolist()
    return [raw[a:b].decode("utf-8", "surrogatepass") for a, b in zip(cuts, cuts[1:], strict=False)]


STALE_STAGING_SECS = 3600.0


def drop_context_files(index_dir: Path, cid: int) -> None:
    """Remove every file kept for context `cid` (`ctx-{cid}.<kind>`: its BM25 index and its images) once the
    context is deleted; a later context never has its id, and a file's header names its context anyway."""
    for path in index_dir.glob(f"ctx-{cid}.*"):
        path.unlink(missing_ok=True)


def _sweep_stale(path: Path) -> None:
    """Remove staging files of `path` a writer killed mid-write left behind (an hour old: no live writer's)."""
    now = time.time()
    for staging in path.parent.glob(f"{path.name}.*.tmp"):
        try:
            if now - staging.stat().st_mtime > STALE_STAGING_SECS:
                staging.unlink()
        except OSError:
            continue


def _sync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


Read = tuple[dict[str, Any], dict[str, np.ndarray]]
_FileKey = tuple[int, int, int, int]  # device, inode, size, modification time (ns)
_PREFETCHED: dict[Path, tuple[threading.Event, list[Any]]] = {}
_PREFETCH_LOCK = threading.Lock()


def _key(st: os.stat_result) -> _FileKey:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def prefetch(paths: list[Path]) -> None:
    """Start reading and checking these files, in this order, on a thread of their own, for the next
    `read_arrays` of each (a load names the files it will read before it parses the rows they are checked
    against: the reads and checksums release the interpreter lock, so they run beside the parsing). A
    prefetched result is used only if the file is still the one read (same inode, size and time)."""
    pending = []
    with _PREFETCH_LOCK:
        for path in paths:
            done: tuple[threading.Event, list[Any]] = (threading.Event(), [])
            _PREFETCHED[path] = done
            pending.append((path, done))

    def run() -> None:
        for path, (event, out) in pending:
            try:
                out.append(_read_keyed(path))
            except IndexFileRejected as exc:
                out.append(exc)
            finally:
                event.set()

    threading.Thread(target=run, name="index-prefetch", daemon=True).start()


def read_arrays(path: Path, keep: bool = False) -> Read:
    """The header and read-only array views of a file `write_arrays` wrote, or `IndexFileRejected`.

    `keep`: the result is held for the next `read_arrays` of the path too (used under the same
    condition as a prefetched one), so a load can look at a file before the step that installs it."""
    with _PREFETCH_LOCK:
        prefetched = _PREFETCHED.pop(path, None)
    keyed = None
    if prefetched is not None:
        event, out = prefetched
        event.wait()
        found = out[0]
        if not isinstance(found, IndexFileRejected):  # a rejection is simply read again (and rejected again)
            try:
                if found[0] == _key(os.stat(path)):
                    keyed = found
            except OSError:
                pass
    if keyed is None:
        keyed = _read_keyed(path)
    if keep:
        held = threading.Event()
        held.set()
        with _PREFETCH_LOCK:
            _PREFETCHED[path] = (held, [keyed])
    return keyed[1]


def _read_keyed(path: Path) -> tuple[_FileKey, Read]:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            size = st.st_size
            if size < _PREFIX.size:
                raise IndexFileRejected("truncated")
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            found = _checked(f.fileno(), mapped, size)
            _MAPPED.add(mapped)
            return _key(st), found
    except FileNotFoundError:
        raise IndexFileRejected("missing") from None
    except (OSError, ValueError) as exc:
        raise IndexFileRejected(f"unreadable ({type(exc).__name__})") from None


def _checked(fd: int, mapped: mmap.mmap, size: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    magic, n, crc = _PREFIX.unpack_from(mapped, 0)
    if magic != MAGIC:
        raise IndexFileRejected("not an index file of this format")
    if n > MAX_HEADER or _PREFIX.size + n > size or _crc(mapped[_PREFIX.size : _PREFIX.size + n]) != crc:
        raise IndexFileRejected("damaged header")
    try:
        header = json.loads(mapped[_PREFIX.size : _PREFIX.size + n])
        layout = header.pop("arrays")
        start = -(-(_PREFIX.size + n) // ALIGN) * ALIGN
        arrays = {name: _view(fd, mapped, start, size, name, spec) for name, spec in layout.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise IndexFileRejected(f"damaged header ({type(exc).__name__})") from None
    return header, arrays


def _mapping(arr: np.ndarray) -> mmap.mmap | None:
    base = arr.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return base if isinstance(base, mmap.mmap) else None


def _drop(mapped: mmap.mmap, start: int = 0, length: int = 0) -> None:
    try:
        if length:
            mapped.madvise(mmap.MADV_DONTNEED, start, length)
        else:
            mapped.madvise(mmap.MADV_DONTNEED)
    except (OSError, ValueError, AttributeError):
        pass


def release_pages(arrays: Mapping[str, np.ndarray]) -> None:
    """Drop this process's resident pages of the file `arrays` were read from (`read_arrays`), once a load
    has copied or checked what it needed: the views stay valid and fault their pages back from the page
    cache when read again, so only what later reads touch counts in the process's memory."""
    for arr in arrays.values():
        mapped = _mapping(arr)
        if mapped is not None:
            _drop(mapped)
            return


def release_mapped() -> int:
    """Drop this process's resident pages of every index file mapping still in use; returns how many.
    A supervisor that loaded contexts for its forked workers and serves nothing calls it before the fork,
    so the pages its own checks and sums touched are not counted in (or kept for) its memory."""
    live = list(_MAPPED)
    for mapped in live:
        _drop(mapped)
    return len(live)


def min_max(arr: np.ndarray) -> tuple[int, int]:
    """The least and greatest value of a non-empty mapped integer array, read a slice at a time, each
    slice's pages dropped after it is read (a check of a large array leaves no resident copy behind)."""
    mapped = _mapping(arr)
    flat = arr.reshape(-1)
    step = max(1, CHECK_CHUNK // max(1, flat.itemsize))
    lo, hi = None, None
    base = np.frombuffer(mapped, dtype=np.uint8, count=1).ctypes.data if mapped is not None else 0
    for at in range(0, len(flat), step):
        part = flat[at : at + step]
        a, b = int(part.min()), int(part.max())
        lo = a if lo is None else min(lo, a)
        hi = b if hi is None else max(hi, b)
        if mapped is not None:
            first = part.ctypes.data - base
            start = first - first % mmap.PAGESIZE
            # whole pages inside this slice only: a page shared with the next slice is read again there
            end = (first + part.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
            if end > start:
                _drop(mapped, start, end - start)
    if lo is None or hi is None:
        raise ValueError("empty array")
    return lo, hi


def _file_crc(fd: int, at: int, end: int) -> int:
    """CRC-32 of the file's bytes [at, end), read through the descriptor in chunks rather than through the
    mapping: the check brings the pages into the page cache without making them resident in this process,
    so a process's memory counts only the pages its reads touch."""
    buf = bytearray(min(CHECK_CHUNK, end - at))
    view = memoryview(buf)
    crc = 0
    while at < end:
        got = os.preadv(fd, [view[: min(len(buf), end - at)]], at)
        if got <= 0:
            raise IndexFileRejected("truncated")
        crc = zlib.crc32(view[:got], crc)
        at += got
    return crc & 0xFFFF_FFFF


def _view(fd: int, mapped: mmap.mmap, start: int, size: int, name: str, spec: Mapping[str, Any]) -> np.ndarray:
    dtype = np.dtype(spec["dtype"])
    shape = tuple(int(x) for x in spec["shape"])
    count = int(np.prod(shape)) if shape else 1
    at = start + int(spec["offset"])
    end = at + count * dtype.itemsize
    if at < start or end > size:
        raise IndexFileRejected(f"array {name} lies outside the file")
    if count and _file_crc(fd, at, end) != int(spec["crc32"]):
        raise IndexFileRejected(f"array {name} fails its checksum")
    if not count:
        return np.zeros(shape, dtype=dtype)
    return np.frombuffer(mapped, dtype=dtype, count=count, offset=at).reshape(shape)
