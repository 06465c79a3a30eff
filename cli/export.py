"""`taguru export NAME [-o FILE] [--data-dir DIR | --url URL]`: one context as an import batch stream
(`taguru export --out DIR [CONTEXT...]`, every context and group as files: `cli/export_dir.py`).

Offline (the default) it reads the store under the data dir lock, like an offline `taguru import`,
so a running server must be stopped (or use `--url`); it renders exactly the bytes
`GET /contexts/{name}/export` would. With `--url` it streams that route's body to the file. Either
way memory stays constant, and a file is written atomically (a temporary sibling, fsync, rename),
so an export that fails never leaves a partial file behind. Without `-o` (or with `-o -`) the
stream goes to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote

from taguru_server.cli.datadir import DataDirRefused, take_lock
from taguru_server.cli.environ import add_server_options, command_environment, remote_url
from taguru_server.cli.export_common import EXPORT_TIMEOUT_SECS, ExportFailed, schema_format_check, store_settings
from taguru_server.cli.export_dir import cmd_export_out
from taguru_server.client.http import (
    SetupError,
    TaguruClient,
    TransportError,
    bearer_token,
    check_url,
    environment,
    server_error,
)

if TYPE_CHECKING:
    pass

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


@contextmanager
def _output(target: str | None) -> Iterator[IO[bytes]]:
    """stdout, or a temporary sibling of `target` renamed over it only when the body completed."""
    if target is None or target == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    path = Path(target)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=path.parent or Path("."), prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ExportFailed(f"cannot write {target}: {exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _offline(args: argparse.Namespace, sink: Callable[[], Any]) -> str:
    from taguru_server.store.errors import ApiError
    from taguru_server.store.persist.sqlite import DB_NAME
    from taguru_server.store.transfer.export import ContextExport

    settings = None if args.data_dir else store_settings(args)
    database_url = settings.database_url if settings is not None else None
    if database_url:  # the shared PostgreSQL store: a read-only snapshot, no data-dir lock to take
        try:
            export = ContextExport.open(database_url, args.name)
        except ApiError as exc:
            raise ExportFailed(exc.message) from None
        return _write_out(export, sink)
    data_dir = args.data_dir if settings is None else settings.data_dir
    db_file = Path(data_dir) / DB_NAME
    if not db_file.is_file():
        raise ExportFailed(f"the data dir {data_dir} holds no store")
    try:
        lock = take_lock(data_dir)
    except DataDirRefused as exc:
        raise ExportFailed(exc.reason) from None
    try:
        try:
            export = ContextExport.open(db_file, args.name)
        except ApiError as exc:
            raise ExportFailed(exc.message) from None
        return _write_out(export, sink)
    finally:
        lock.__exit__(None, None, None)


def _write_out(export: Any, sink: Callable[[], Any]) -> str:
    with sink() as out:
        for chunk in export.chunks():
            out.write(chunk)
    counts = f"{export.batches} batch(es), {export.associations} association line(s), {export.aliases} alias(es)"
    return counts + f", {export.passages} passage(s)"


class _Counting:
    """A sink that counts what passes through."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return self.inner.write(data)


def _remote(args: argparse.Namespace, sink: Callable[[], Any]) -> str:
    try:
        env = environment(args.config, command_environment(args))
        check_url(args.url)
    except SetupError as exc:
        raise ExportFailed(str(exc)) from None
    client = TaguruClient(args.url, bearer_token(env), timeout=EXPORT_TIMEOUT_SECS)
    path = "/contexts/" + quote(args.name, safe="") + "/export"
    schema_format_check(client, args.url)
    with sink() as out:
        counting = _Counting(out)
        try:
            reply = client.download_sync(path, counting)  # type: ignore[arg-type]
        except TransportError as exc:
            if not exc.reached:
                raise ExportFailed(f"cannot reach the server: {exc.detail}") from None
            raise ExportFailed(f"the export stream broke off: {exc.detail}") from None
        if reply.status != 200:
            error = server_error(reply, client.base + path)
            raise ExportFailed(error.error if error.error is not None else f"HTTP {reply.status}")
    return f"{counting.size} byte(s)"


def cmd_export(args: argparse.Namespace) -> int:
    if args.url and args.data_dir:
        print("taguru export: --url and --data-dir cannot be combined", file=sys.stderr)
        return EXIT_USAGE
    args.url = remote_url(args)
    if args.out is not None:
        if args.output is not None:
            print("taguru: export: --out and -o cannot be combined — try 'taguru export --help'", file=sys.stderr)
            return EXIT_USAGE
        if args.data_dir:
            args.environment = {**command_environment(args), "TAGURU_DATA_DIR": args.data_dir}
        return cmd_export_out(args)
    if len(args.names) != 1:
        print(
            "taguru: export: name one context (or use --out DIR [CONTEXT...] for several) — try 'taguru export --help'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    args.name = args.names[0]
    where = args.output if args.output not in (None, "-") else "stdout"

    def sink() -> Any:
        return _output(args.output)

    try:
        summary = _remote(args, sink) if args.url else _offline(args, sink)
    except ExportFailed as exc:
        print(f"taguru export: context '{args.name}': {exc}", file=sys.stderr)
        return EXIT_FAIL
    except BrokenPipeError:
        if where == "stdout":
            raise  # the reader of the pipe stopped reading (`| head`): a quiet end, not an error
        print(f"taguru export: context '{args.name}': cannot write {where}: broken pipe", file=sys.stderr)
        return EXIT_FAIL
    except OSError as exc:
        print(f"taguru export: context '{args.name}': cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAIL
    print(f"taguru export: context '{args.name}' → {where}: {summary}", file=sys.stderr)
    return EXIT_OK


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "export", help="write one context as JSONL import batches (offline, or from a server with --url)"
    )
    p.add_argument(
        "names",
        metavar="CONTEXT",
        nargs="*",
        help="the context to export (with --out: the contexts to export; none means every context and group)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: stdout)")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write one {stem}.jsonl per context (and {stem}.group.jsonl per group) into DIR; a full export "
        "removes the other *.jsonl files there",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="read this data dir (default: TAGURU_DATA_DIR, else ./data; with TAGURU_DATABASE_URL, that store)",
    )
    add_server_options(
        p,
        "export from the running server at URL (GET /contexts/NAME/export; token from TAGURU_API_TOKEN) "
        "instead of the data dir, which a running server holds",
    )
    p.set_defaults(func=cmd_export)
    return p
