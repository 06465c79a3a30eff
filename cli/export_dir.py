"""`taguru export --out DIR [CONTEXT...]`: every context (and group) as its own import stream in DIR.

A full export (no CONTEXT) writes `{stem}.jsonl` per context and `{stem}.group.jsonl` per group,
then removes every other `*.jsonl` directly in DIR, so `taguru import DIR` on a fresh server
restores exactly what the source holds (a context or group deleted at the source does not come
back). A subset export writes the named contexts only and removes nothing. `{stem}` keeps the bytes
`[A-Za-z0-9_-]` and writes every other byte as `%XX`. Each file is written atomically (a temporary
sibling, fsync, rename, then the directory fsynced). Offline it reads the data dir under its lock
(or the PostgreSQL store directly); with `--url` it fetches each stream from the server and checks
it with the import parser before anything touches the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from taguru_server.cli.environ import command_environment
from taguru_server.store.atomic import write_atomically

EXIT_OK, EXIT_FAIL = 0, 1
SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
REMOTE_NOTE = (
    "taguru: export: note: each context's stream is internally consistent, but contexts are fetched one request "
    "at a time — this is not a point-in-time snapshot across contexts"
)


def stem(name: str) -> str:
    """A file stem for a name: `[A-Za-z0-9_-]` kept, every other UTF-8 byte `%XX` (so no stem ends in `.group`)."""
    return "".join(chr(b) if b in SAFE else f"%{b:02X}" for b in name.encode("utf-8"))


class Run:
    """One export run: what was written, what failed, and the report lines."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.expected: set[str] = set()
        self.contexts_ok = 0
        self.contexts = 0
        self.groups_ok = 0
        self.groups = 0
        self.failed = 0
        self.groups_unknown = False

    def context(self, name: str, write: Callable[[Path], str]) -> None:
        self.contexts += 1
        if self._write("context", name, self.out / f"{stem(name)}.jsonl", write):
            self.contexts_ok += 1

    def group(self, name: str, line: bytes, members: int, children: int) -> None:
        def write(path: Path) -> str:
            write_atomically(path, [line])
            return f"{members} member context(s), {children} child group(s)"

        self.groups += 1
        if self._write("group", name, self.out / f"{stem(name)}.group.jsonl", write):
            self.groups_ok += 1

    def group_failed(self, name: str, message: str) -> None:
        self.groups += 1
        self.expected.add(f"{stem(name)}.group.jsonl")
        self._failed("group", name, message)

    def _write(self, kind: str, name: str, path: Path, write: Callable[[Path], str]) -> bool:
        """Write one file: its line on stdout (what `write` says it wrote), or why not on stderr (a failure)."""
        self.expected.add(path.name)
        try:
            said = write(path)
        except ExportItemFailed as exc:
            self._failed(kind, name, str(exc))
            return False
        except OSError as exc:
            self._failed(kind, name, f"cannot write {path}: {exc.strerror or exc}")
            return False
        print(f"{path}: {kind} '{name}' → {said}")
        return True

    def _failed(self, kind: str, name: str, reason: str) -> None:
        self.failed += 1
        print(f"taguru: export: {kind} '{name}': {reason}", file=sys.stderr)

    def prune(self) -> None:
        """Remove every direct `*.jsonl` of DIR that this full export did not attempt."""
        try:
            entries = sorted(os.listdir(self.out))
        except OSError as exc:
            self.failed += 1
            print(f"taguru: export: cannot list {self.out}: {exc.strerror or exc}", file=sys.stderr)
            return
        for entry in entries:
            if not entry.endswith(".jsonl") or entry in self.expected:
                continue
            path = self.out / entry
            try:
                if path.is_dir():
                    raise IsADirectoryError(21, "Is a directory")
                path.unlink()
            except OSError as exc:
                self.failed += 1
                print(f"taguru: export: cannot remove stale {path}: {exc.strerror or exc}", file=sys.stderr)
                continue
            print(f"{path}: removed — no longer exists at the source")

    def summary(self, full: bool) -> int:
        groups = ""
        if self.groups_unknown:
            groups = " and groups: enumeration failed"
        elif full and (self.groups or self.failed):
            groups = f" and {self.groups_ok} of {self.groups} group(s)"
        print(f"export: {self.contexts_ok} of {self.contexts} context(s){groups} written to {self.out}")
        return EXIT_FAIL if self.failed else EXIT_OK


class ExportItemFailed(Exception):
    """One context's (or group's) export failed; the run goes on."""


def cmd_export_out(args: argparse.Namespace) -> int:
    """The `--out DIR` form of `taguru export`."""
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"taguru: export: cannot create {out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAIL
    run = Run(out)
    try:
        full = _remote(args, run) if args.url else _offline(args, run)
    except ExportItemFailed as exc:
        print(f"taguru: export: {exc}", file=sys.stderr)
        return EXIT_FAIL
    if full is None:
        return EXIT_FAIL
    if full and not run.groups_unknown:
        run.prune()
    return run.summary(full)


def _offline(args: argparse.Namespace, run: Run) -> bool | None:
    from taguru_server.cli.datadir import DataDirBusy, DataDirLock
    from taguru_server.cli.export_common import ExportFailed, store_settings
    from taguru_server.store.errors import ApiError
    from taguru_server.store.persist.groups import export_line
    from taguru_server.store.persist.sqlite import DB_NAME
    from taguru_server.store.transfer.export import ContextExport, store_directory

    try:
        settings = store_settings(args)
    except ExportFailed as exc:
        raise ExportItemFailed(str(exc)) from None
    store: Path | str
    lock = None
    if settings.database_url:
        store = settings.database_url
    else:
        store = Path(settings.data_dir) / DB_NAME
        if not store.is_file():
            raise ExportItemFailed(f"the data dir {settings.data_dir} holds no store")
        try:
            lock = DataDirLock(settings.data_dir).__enter__()
        except DataDirBusy as exc:
            raise ExportItemFailed(exc.reason) from None
    try:
        try:
            names, groups = store_directory(store)
        except ApiError as exc:
            raise ExportItemFailed(exc.message) from None
        wanted = list(args.names) or names
        if not wanted:
            raise ExportItemFailed("the data directory holds no contexts")

        def write(name: str) -> Callable[[Path], str]:
            def go(path: Path) -> str:
                try:
                    export = ContextExport.open(store, name)
                except ApiError as exc:
                    raise ExportItemFailed(exc.message) from None
                write_atomically(path, export.chunks())
                counts = f"{export.batches} batch(es), {export.associations} association line(s)"
                return counts + f", {export.aliases} alias(es), {export.passages} passage(s)"

            return go

        for name in wanted:
            run.context(name, write(name))
        if not args.names:
            for gname, record in groups.items():
                run.group(gname, export_line(gname, record), len(record.contexts), len(record.groups))
        return not args.names
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)


def _remote(args: argparse.Namespace, run: Run) -> bool | None:
    from taguru_server.cli.export_common import EXPORT_TIMEOUT_SECS, ExportFailed, schema_format_check
    from taguru_server.client.http import SetupError, TaguruClient, TransportError, bearer_token, check_url, environment

    try:
        env = environment(args.config, command_environment(args))
        check_url(args.url)
    except SetupError as exc:
        raise ExportItemFailed(str(exc)) from None
    base = args.url.rstrip("/")
    client = TaguruClient(base, bearer_token(env), timeout=EXPORT_TIMEOUT_SECS)
    try:
        schema_format_check(client, base)
    except ExportFailed as exc:
        raise ExportItemFailed(str(exc)) from None
    print(REMOTE_NOTE, file=sys.stderr)
    try:
        names = list(args.names) or _listed(client, "/contexts", "contexts")
    except (TransportError, RemoteRefused) as exc:
        raise ExportItemFailed(f"contexts: {exc}") from None
    if not names:
        raise ExportItemFailed(f"the server at {base} holds no contexts")
    for name in names:
        run.context(name, _fetch_context(client, name))
    if args.names:
        return False
    try:
        groups = _listed(client, "/groups", "groups")
    except (TransportError, RemoteRefused) as exc:
        run.groups_unknown = True
        run.failed += 1
        print(f"taguru: export: groups: {exc}", file=sys.stderr)
        return True
    for gname in groups:
        _fetch_group(client, run, gname)
    return True


class RemoteRefused(Exception):
    """The server answered with an error envelope (its text) or something that is not one."""


def _get(client: Any, path: str) -> bytes:
    reply = client.send_sync("GET", path)
    if reply.status != 200:
        try:
            error = json.loads(reply.body).get("error")
        except (ValueError, AttributeError):
            error = None
        raise RemoteRefused(error or f"HTTP {reply.status}")
    return bytes(reply.body)


def _listed(client: Any, path: str, key: str) -> list[str]:
    """Every name a keyset-paged listing holds."""
    names: list[str] = []
    after: str | None = None
    while True:
        query = "?limit=1000" + ("" if after is None else "&after=" + quote(after, safe=""))
        try:
            body = json.loads(_get(client, path + query))
            rows = body["result"][key]
        except (ValueError, KeyError, TypeError):
            raise RemoteRefused(f"GET {path} answered something that is not a listing") from None
        page = [row["name"] if isinstance(row, dict) else str(row) for row in rows]
        names.extend(page)
        if not page or len(page) < 1000:
            return names
        after = page[-1]


def _fetch_context(client: Any, name: str) -> Callable[[Path], str]:
    def go(path: Path) -> str:
        from taguru_server.client.http import TransportError
        from taguru_server.store.transfer.importer import ParseError, parse_stream

        try:
            body = _get(client, "/contexts/" + quote(name, safe="") + "/export")
        except (TransportError, RemoteRefused) as exc:
            raise ExportItemFailed(str(exc)) from None
        try:
            stream = parse_stream(body)
        except (ParseError, UnicodeDecodeError, ValueError) as exc:
            raise ExportItemFailed(f"not a taguru export stream: {exc}") from None
        other = next((b.context for b in stream if b.context != name), None)
        if other is not None:
            raise ExportItemFailed(f"not a taguru export stream: the response carries context '{other}'")
        if stream.groups:
            raise ExportItemFailed("not a taguru export stream: the response carries a taguru_group record")
        write_atomically(path, [body])
        lines = sum(1 for line in body.split(b"\n") if line.strip())
        return f"{len(stream)} batch(es), {lines} line(s)"  # the parser's batches: one per header line

    return go


def _fetch_group(client: Any, run: Run, name: str) -> None:
    from taguru_server.client.http import TransportError
    from taguru_server.store.transfer.importer import ParseError, parse_stream

    try:
        body = _get(client, "/groups/" + quote(name, safe="") + "/export")
    except (TransportError, RemoteRefused) as exc:
        run.group_failed(name, str(exc))
        return
    try:
        stream = parse_stream(body)
    except (ParseError, UnicodeDecodeError, ValueError) as exc:
        run.group_failed(name, f"not a taguru group record: {exc}")
        return
    if len(stream.groups) != 1 or len(stream) or len([x for x in body.split(b"\n") if x.strip()]) != 1:
        run.group_failed(name, "not a taguru group record: the response is not exactly one taguru_group line")
        return
    record = stream.groups[0]
    if record.name != name:
        run.group_failed(name, f"not a taguru group record: the response names group '{record.name}'")
        return
    run.group(name, body, len(record.record.contexts), len(record.record.groups))
