"""The `taguru` command: serve, import, export, demo."""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taguru_server.cli.datadir import LOCKED, DataDirBusy, DataDirLock
from taguru_server.cli.environ import command_environment as environment
from taguru_server.client.http import (
    NotEnvelope,
    ServerError,
    TaguruClient,
    TransportError,
    bearer_token,
)
from taguru_server.client.urls import url_refusal
from taguru_server.server.variables import check_contracts_requested, process_environment

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
CHUNK_BUDGET = 4 * 1024 * 1024
IMPORT_TIMEOUT_SECS = 600
LISTEN_BACKLOG = 1024  # connections the kernel queues before the server accepts them (aiohttp's default: 128)

__all__ = ["LOCKED", "DataDirBusy", "DataDirLock", "main"]


def _say(message: str) -> None:
    print(f"taguru: {message}", file=sys.stderr)


def _settings(config: str | None, env: dict[str, str], refuse: Callable[[str], None] = _say) -> Any:
    """The settings, or `refuse` says why not (one line) and the process exits 2."""
    from taguru_server.server.config import ConfigError, load_settings

    try:
        return load_settings(env, config_file=config)
    except ConfigError as exc:
        refuse(f"configuration refused: {exc}")
        raise SystemExit(EXIT_USAGE) from None
    except (OSError, UnicodeDecodeError) as exc:
        path = config or env.get("TAGURU_CONFIG", "")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a UTF-8 text file"
        refuse(f"cannot read the config file {path}: {reason}")
        raise SystemExit(EXIT_USAGE) from None


def _listen_address(addr: str, refuse: Callable[[str], None] = _say) -> tuple[str, int]:
    """HOST:PORT from TAGURU_ADDR, or one line on stderr and exit 2."""
    host, sep, port = addr.rpartition(":")
    if sep and port.isdigit() and int(port) <= 65535:
        return host.strip("[]") or "127.0.0.1", int(port)
    refuse(f"TAGURU_ADDR must be HOST:PORT (for example 127.0.0.1:8248), got '{addr}'")
    raise SystemExit(EXIT_USAGE)


def _log_format_before_settings(config: str | None, env: dict[str, str]) -> str:
    """The log format as far as it can be told when the settings themselves are refused: a valid
    TAGURU_LOG_FORMAT from the environment, else from the config file, else json unless a terminal."""
    from taguru_server.client.config import read_config_file
    from taguru_server.server.logging import default_format, parse_log_format

    raw = env.get("TAGURU_LOG_FORMAT", "")
    config = config or env.get("TAGURU_CONFIG")
    if not raw.strip() and config:
        try:
            raw = read_config_file(config).get("TAGURU_LOG_FORMAT", "")
        except (OSError, UnicodeDecodeError):
            pass
    try:
        return parse_log_format(raw) or default_format()
    except ValueError:
        return default_format()


def _serve_refusal(config: str | None, worker: bool, env: dict[str, str]) -> Callable[[str], None]:
    """How `serve` says that its configuration is refused: one `config.refused` JSON event (the text in
    `error`) under the json log format, the plain line `taguru: …` under console."""

    def refuse(message: str) -> None:
        from taguru_server.server.logging import configure_logging

        fmt = _log_format_before_settings(config, env)
        configure_logging(worker=worker, fmt=fmt, env=env, final=False)
        _refused("config.refused", message, fmt)

    return refuse


class ListenFailed(Exception):
    """The address could not be bound; the message is the one line to print."""


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    import attrs
    import structlog
    from aiohttp import web

    from taguru_server.client.config import read_config_file
    from taguru_server.server.app import build_app, open_registry
    from taguru_server.server.logging import configure_logging
    from taguru_server.server.protocol import AppRunner, accept_error_handler
    from taguru_server.server.providers.reranker import rerank_settings
    from taguru_server.store.errors import StoreRefused
    from taguru_server.store.persist.registry import Registry

    env = environment(args)
    configure_logging(worker=args.worker, env=env, final=False)  # the settings' own warnings, in the same form
    refuse = _serve_refusal(args.config, args.worker, env)
    settings = _settings(args.config, env, refuse)
    configure_logging(worker=args.worker, fmt=settings.log_format, level=settings.log_level, env=env)
    log = structlog.get_logger("taguru.serve")
    process_env = env
    config_file = args.config or env.get("TAGURU_CONFIG")
    if config_file:
        merged = read_config_file(config_file)
        merged.update(env)
        env = merged
    host, port = _listen_address(settings.addr, refuse)

    workers = args.workers if args.workers is not None else settings.workers
    if workers < 1:
        refuse("--workers must be at least 1")
        return EXIT_USAGE
    # from here on the flag and TAGURU_WORKERS are one setting: every store the supervisor and the workers
    # open is shared alike, so the supervisor's load records its change-log position for the workers
    settings = attrs.evolve(settings, workers=workers)
    worker = args.worker
    # the address is bound first, so a busy port is one line and nothing else (no start-up, no load)
    try:
        sock = _bind(host, port, reuse_port=worker or workers > 1)
    except ListenFailed as exc:
        _listen_refused(str(exc), settings.log_format)
        return EXIT_FAIL
    if workers > 1 and not worker:
        sock.close()  # the supervisor only checked the address: each worker binds its own (SO_REUSEPORT)
    store = "postgresql" if settings.database_url else "sqlite"
    log.info("server.starting", version=installed_version(), workers=workers, worker=worker, store=store)
    if worker:  # one of N workers: the in-flight ceiling is divided among them
        ceiling = settings.max_concurrent_requests
        settings = attrs.evolve(settings, max_concurrent_requests=-(-ceiling // workers))

    async def run(registry: Registry) -> None:
        app = build_app(settings, registry, rerank=rerank_settings(env), environ=process_env)
        runner = AppRunner(app, access_log=None)
        await runner.setup()
        # every worker listens on the address with SO_REUSEPORT; the kernel spreads connections over them
        await _start(web.SockSite(runner, sock, backlog=LISTEN_BACKLOG), runner, f"{host}:{port}")
        if worker:
            log.info("worker.ready")
        else:
            bound = runner.addresses[0] if runner.addresses else (host, port)
            # the one plain line: launchers (the official SDK's harness) read it from stdout
            print(f"listening on {bound[0]}:{bound[1]}", flush=True)
            log.info("server.listening", url=f"http://{bound[0]}:{bound[1]}", data_dir=settings.data_dir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(accept_error_handler())
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
            log.info("server.stopping")
        finally:
            await runner.cleanup()
        log.info("server.stopped")

    if worker:  # the supervisor holds the data-dir lock and checked the store
        registry = open_registry(settings)
        from taguru_server.cli.shared_start import adopt_inherited

        adopt_inherited(registry)  # a forked worker starts with what the supervisor loaded
        try:
            asyncio.run(run(registry))
        except ListenFailed as exc:
            _listen_refused(str(exc), settings.log_format)
            return EXIT_FAIL
        finally:
            registry.close()
        return EXIT_OK
    try:
        # PostgreSQL: every process is a replica, so nothing is exclusive to this one
        lock = DataDirLock(settings.data_dir).__enter__() if not settings.database_url else None
    except OSError as exc:
        print(f"taguru: the data dir {settings.data_dir} cannot be used: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAIL
    try:
        try:
            registry = open_registry(settings)
        except StoreRefused as exc:
            print(f"taguru: {exc}", file=sys.stderr)
            return EXIT_FAIL
        if workers > 1:
            registry.close()  # opened to check (and migrate) the store once, before any worker starts
            from taguru_server.cli.workers import supervise

            shared = settings if settings.worker_start == "fork" else None
            return supervise(host, port, workers, args.config, settings.data_dir, shared, main)
        try:
            asyncio.run(run(registry))
        except ListenFailed as exc:
            _listen_refused(str(exc), settings.log_format)
            return EXIT_FAIL
        finally:
            registry.close()
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)
    return EXIT_OK


def _bind(host: str, port: int, reuse_port: bool) -> Any:
    """A listening socket on host:port, or ListenFailed naming the address and the reason."""
    import socket

    from taguru_server.cli.workers import listen_failure

    where = f"{host}:{port}"
    try:
        if not host and socket.has_dualstack_ipv6():  # every address, both families
            sock = socket.create_server(
                ("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=LISTEN_BACKLOG, reuse_port=reuse_port
            )
        else:
            family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
            sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG, reuse_port=reuse_port)
    except OSError as exc:
        raise ListenFailed(listen_failure(where, exc)) from None
    sock.setblocking(False)
    return sock


def _refused(event: str, message: str, log_format: str | None) -> None:
    """One line saying why `serve` will not start: a JSON event (the text in `error`) under the json
    log format, the plain `taguru: …` otherwise."""
    import structlog

    from taguru_server.server.logging import default_format

    if (log_format or default_format()) == "json":
        structlog.get_logger("taguru.serve").error(event, error=message)
    else:
        _say(message)


def _listen_refused(message: str, log_format: str | None) -> None:
    """The one line of a refused address."""
    _refused("server.listen_failed", message, log_format)


async def _start(site: Any, runner: Any, where: str) -> None:
    """site.start(), or ListenFailed naming the address and the reason (a busy port, a bad host)."""
    from taguru_server.cli.workers import listen_failure

    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ListenFailed(listen_failure(where, exc)) from None


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply the store's pending schema migrations alone (boot applies them too) and say what was done."""
    from taguru_server.store.errors import StoreRefused

    settings = _settings(args.config, environment(args))
    try:
        if settings.database_url:
            from taguru_server.store.persist.postgres import LATEST, PostgresPersistence

            store = PostgresPersistence(settings.database_url, migrate=False, check=False)
            try:
                applied = store.migrate()
                copied = _copy_sqlite(args.from_sqlite, store) if args.from_sqlite else None
            finally:
                store.close()
            done = ", ".join(map(str, applied)) if applied else "none (already current)"
            print(f"taguru migrate: PostgreSQL schema at version {LATEST}; applied: {done}", file=sys.stderr)
            if copied is not None:
                rows = ", ".join(f"{table} {n}" for table, n in copied.items())
                print(f"taguru migrate: copied from {args.from_sqlite}: {rows}", file=sys.stderr)
            return EXIT_OK
        if args.from_sqlite:
            print("taguru: --from-sqlite needs TAGURU_DATABASE_URL (the PostgreSQL store to fill)", file=sys.stderr)
            return EXIT_USAGE
        from taguru_server.store.persist.sqlite import FORMAT_VERSION, SqlitePersistence

        with DataDirLock(settings.data_dir):
            SqlitePersistence(settings.data_dir).close()  # opening migrates an older format in one transaction
        print(f"taguru migrate: SQLite store {settings.data_dir} at format {FORMAT_VERSION}", file=sys.stderr)
        return EXIT_OK
    except StoreRefused as exc:
        print(f"taguru: {exc}", file=sys.stderr)
        return EXIT_FAIL


def _copy_sqlite(data_dir: str, store: Any) -> dict[str, int]:
    """Open (and so check, and migrate to the current format) the SQLite store under its lock, then copy it."""
    from taguru_server.store.persist.postgres import copy_from_sqlite
    from taguru_server.store.persist.sqlite import SqlitePersistence

    with DataDirLock(data_dir):
        source = SqlitePersistence(data_dir)
        try:
            return copy_from_sqlite(str(source.file), store)
        finally:
            source.close()


def _input_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(sorted(path.glob("*.jsonl")))
        else:
            files.append(path)
    return files


def cmd_import(args: argparse.Namespace) -> int:
    from taguru_server.store.transfer.importer import parse_stream

    if args.no_embed and args.url:
        print("taguru import: --no-embed cannot be combined with --url", file=sys.stderr)
        return EXIT_USAGE
    files = _input_files(args.paths)
    if not files:
        print("taguru import: no input files", file=sys.stderr)
        return EXIT_USAGE
    if args.url:
        bad_url = url_refusal(args.url)
        if bad_url is not None:
            print(f"taguru import: {bad_url}", file=sys.stderr)
            return EXIT_USAGE
        return _import_remote(args, files)
    parsed: list[tuple[Path, str, list[Any]]] = []

    def parse(f: Path) -> None:
        text = f.read_bytes().decode("utf-8")  # bytes: a lone \r must not become a line break
        parsed.append((f, text, parse_stream(text)))

    refusal = _validate_files(files, parse)
    if refusal is not None:
        return _finish(args, [], refusal)
    return _import_offline(args, parsed)


def _validate_files(files: list[Path], check: Callable[[Path], object]) -> str | None:
    """Run `check` on every file, printing one line per refused file; the refusal text if any was refused."""
    from taguru_server.store.transfer.importer import ParseError

    refused = 0
    for f in files:
        try:
            check(f)
        except (OSError, UnicodeDecodeError, ParseError) as exc:
            refused += 1
            print(f"taguru import: {f.name}: {exc}", file=sys.stderr)
        except (ArithmeticError, ValueError, RecursionError):
            refused += 1
            print(f"taguru import: {f.name}: a line holds a value the importer cannot read", file=sys.stderr)
    if refused:
        return f"{refused} of {len(files)} file(s) refused during validation; nothing was applied"
    return None


def _import_progress(args: argparse.Namespace, total: int) -> Any:
    from taguru_server.client.progress import Progress

    verb = "checking" if args.dry_run else "importing"
    return Progress(f"taguru import: {verb}", total, sys.stderr, unit="batches")


def _finish(args: argparse.Namespace, batches: list[Any], error: str | None) -> int:
    if args.json:
        doc: dict[str, Any] = {"dry_run": bool(args.dry_run), "batches": batches}
        if error:
            doc["error"] = error
        print(json.dumps(doc, ensure_ascii=False))
    elif error:
        print(f"taguru import: {error}", file=sys.stderr)
    else:
        verb = "previewed" if args.dry_run else "imported"
        print(f"taguru import: {verb} {len(batches)} batch(es)", file=sys.stderr)
    return EXIT_FAIL if error else EXIT_OK


def _import_offline(args: argparse.Namespace, parsed: list[tuple[Path, str, list[Any]]]) -> int:
    from taguru_server.server.app import open_registry
    from taguru_server.store.errors import ApiError, StoreRefused

    settings = _settings(args.config, environment(args))
    outcomes: list[Any] = []
    try:
        # with PostgreSQL, replicas may be serving: the import takes the store's write lock instead
        lock = DataDirLock(settings.data_dir).__enter__() if not settings.database_url else None
    except DataDirBusy as exc:
        return _finish(args, outcomes, exc.reason)
    except OSError as exc:
        return _finish(args, outcomes, f"the data dir {settings.data_dir} cannot be used: {exc.strerror or exc}")
    try:
        try:
            registry = open_registry(settings)
        except StoreRefused as exc:
            return _finish(args, outcomes, str(exc))
        try:
            # a preview runs every file as one stream, so contexts an earlier file creates count as existing
            streams = [[b for _f, _t, bs in parsed for b in bs]] if args.dry_run else [bs for _f, _t, bs in parsed]
            progress = _import_progress(args, sum(len(bs) for bs in streams))
            for batches in streams:
                on_commit = functools.partial(_advance, progress, len(outcomes))
                try:
                    outcomes.extend(_run_offline(registry, batches, args.dry_run, on_commit))
                except ApiError as exc:
                    progress.close()
                    return _finish(args, outcomes, exc.message)
                progress.update(len(outcomes))
            progress.close()
            said: list[str] = []
            failed: list[str] = []
            if not args.dry_run and not args.no_embed:
                from taguru_server.cli.embed import embed_imported

                touched = list(dict.fromkeys(o["context"] for o in outcomes))
                said, failed = embed_imported(settings, registry, touched)
        finally:
            registry.close()
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)
    code = _finish(args, outcomes, None)
    if not args.json:
        for line in said:
            print(line, file=sys.stderr)
    for line in failed:
        print(line, file=sys.stderr)
    return EXIT_FAIL if failed else code


def _advance(progress: Any, before: int, landed: int) -> None:
    progress.update(before + landed)


def _run_offline(
    registry: Any, batches: list[Any], dry_run: bool, on_commit: Callable[[int], None] | None = None
) -> list[dict[str, Any]]:
    """One stream into the store; a shared store (other processes may write it) in one write section."""
    import asyncio

    from taguru_server.store.transfer.group_import import restore_groups
    from taguru_server.store.transfer.importer import run_import

    def both(commit_every: int) -> list[dict[str, Any]]:
        outcomes = run_import(registry, batches, dry_run=dry_run, commit_every=commit_every, on_commit=on_commit)
        if not dry_run:  # the stream's group records, after every batch (a parsed stream carries them)
            restore_groups(registry, getattr(batches, "groups", []), len(outcomes))
        return outcomes

    if not registry.shared:
        return both(2000)

    async def locked() -> list[dict[str, Any]]:
        async with registry.write_section(deadline=float("inf")):
            return both(len(batches) + 1)

    return asyncio.run(locked())


def _import_remote(args: argparse.Namespace, files: list[Path]) -> int:
    """Validate every file, then send each in stretches of whole batches: the client holds one
    stretch at a time (`cli/stream_import.py`), whatever the file's size."""
    from taguru_server.cli.stream_import import Budget, validate

    total = 0

    def count(f: Path) -> None:
        nonlocal total
        total += validate(f, CHUNK_BUDGET)

    refusal = _validate_files(files, count)
    if refusal is not None:
        return _finish(args, [], refusal)
    client = TaguruClient(args.url, bearer_token(environment(args)), timeout=IMPORT_TIMEOUT_SECS)
    path = "/import" + ("?dry_run=true" if args.dry_run else "")
    outcomes: list[Any] = []
    budget = Budget(CHUNK_BUDGET)
    progress = _import_progress(args, total)
    try:
        error = _send_files(args, client, path, files, budget, outcomes, progress)
    finally:
        progress.close()  # before the closing line, so the bar never overwrites it
    return _finish(args, outcomes, error)


def _send_files(
    args: argparse.Namespace,
    client: TaguruClient,
    path: str,
    files: list[Path],
    budget: Any,
    outcomes: list[Any],
    progress: Any,
) -> str | None:
    """Each file's batches in stretches, then its group records; the first error, or None."""
    from taguru_server.cli.stream_import import stretches

    for f in files:
        groups: list[str] = []
        for stretch in stretches(f, budget, groups):
            error = _send_pieces(args, client, path, stretch.pieces, budget, outcomes, progress)
            if error is not None:
                return error
        error = _send_groups(args, client, path, groups, outcomes, progress)
        if error is not None:
            return error
    return None


def _send_groups(
    args: argparse.Namespace, client: TaguruClient, path: str, groups: list[str], outcomes: list[Any], progress: Any
) -> str | None:
    """POST a file's group records in one request after its last batch (so their members exist); an error, or None."""
    if not groups:
        return None
    status, body = _post(client, path, ("\n".join(groups) + "\n").encode())
    if status != 200:
        return str(body.get("error", f"HTTP {status}"))
    return None


def _send_pieces(
    args: argparse.Namespace,
    client: TaguruClient,
    path: str,
    pieces: list[str],
    budget: Any,
    outcomes: list[Any],
    progress: Any,
) -> str | None:
    """POST whole batches in one request; on 413 halve the budget and send them in halves. An error, or None."""
    if not pieces:
        return None
    status, body = _post(client, path, "".join(pieces).encode())
    if status == 413:
        if len(pieces) <= 1:
            b = _reparse(pieces[0])[0]
            return (
                f"the batch for source '{b.source}' (context '{b.context}') "
                "is larger than the server's body cap (TAGURU_MAX_BODY_BYTES); it cannot be sent"
            )
        budget.size = max(budget.size // 2, 1)
        half = len(pieces) // 2
        return _send_pieces(args, client, path, pieces[:half], budget, outcomes, progress) or _send_pieces(
            args, client, path, pieces[half:], budget, outcomes, progress
        )
    if status != 200:
        return body.get("error", f"HTTP {status}")
    outcomes.extend(body["result"]["batches"])
    progress.update(len(outcomes))
    if not progress.enabled and not args.json:  # off a terminal: what is durable so far, for a script
        print(f"taguru import: {len(outcomes)} batch(es) acknowledged", file=sys.stderr, flush=True)
    return None


def _reparse(chunk: str) -> list[Any]:
    from taguru_server.store.transfer.importer import parse_stream

    return parse_stream(chunk)


def _post(client: TaguruClient, path: str, data: bytes) -> tuple[int, Any]:
    """POST one NDJSON chunk: (status, the envelope) or (status, {"error": …}); status 0 when no answer came."""
    try:
        reply = client.send_sync("POST", path, data=data, content_type="application/x-ndjson")
    except TransportError as exc:
        if not exc.reached:
            return 0, {"error": f"cannot reach the server: {exc.detail}"}
        return 0, {"error": f"the server connection failed: {exc.kind}"}
    if reply.status == 413:
        return 413, {}
    try:
        return 200, {"result": client.decode(reply, path)}
    except ServerError as exc:
        return exc.status or 0, {"error": exc.error if exc.error is not None else f"HTTP {exc.status}"}
    except NotEnvelope:
        return 0, {"error": "the server answered with something that is not JSON"}


def cmd_demo(args: argparse.Namespace) -> int:
    """Import the bundled demo corpus into a local store, start the server, show real answers."""
    from taguru_server.cli.demo.run import cmd_demo as run_demo

    return run_demo(args)


def installed_version() -> str:
    """The installed distribution's version (the one `/health` and `/version` report)."""
    try:
        return importlib.metadata.version("taguru-server")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


CONFIG_HELP = "KEY=VALUE settings file (default TAGURU_CONFIG); a variable set in the environment wins"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taguru",
        description="Taguru knowledge contexts and evidence assembly",
        epilog="Settings are TAGURU_* environment variables (all of them: docs/operations.md).",
    )
    parser.add_argument("--version", action="version", version=f"taguru {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "serve",
        help="run the HTTP server",
        description="Serve the contexts of TAGURU_DATA_DIR (or TAGURU_DATABASE_URL) on TAGURU_ADDR.",
        epilog="Address: TAGURU_ADDR (default 127.0.0.1:8248). Store: TAGURU_DATA_DIR (default ./data) or "
        "TAGURU_DATABASE_URL (postgresql://…). Auth: TAGURU_API_TOKEN / TAGURU_API_TOKENS / TAGURU_KEY_SCOPES. "
        "Every variable: docs/operations.md.",
    )
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes serving one address and data dir (default TAGURU_WORKERS, else 1)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser(
        "import",
        help="import JSONL batch files (offline into the data dir, or through a server with --url)",
        description="Import batch streams: JSONL files (.jsonl, UTF-8, one JSON object a line). Each batch starts "
        'with a header line {"taguru_batch": 1, "context": NAME, "source": ID, "create": {…} for a new context}, '
        "followed by its association, alias, passage and paragraph lines: the format `taguru export` writes and "
        "POST /import reads. A directory stands for the *.jsonl files in it, in name order. Every file is "
        "validated before anything is applied. Offline the store is TAGURU_DATA_DIR (or TAGURU_DATABASE_URL); "
        "with TAGURU_EMBED_URL set, the touched contexts are embedded afterwards.",
    )
    p.add_argument("paths", nargs="+", metavar="FILE|DIR", help="JSONL batch files, or directories of *.jsonl files")
    p.add_argument("--dry-run", action="store_true", help="validate and report what would change; write nothing")
    p.add_argument(
        "--no-embed",
        action="store_true",
        help="offline: skip the embedding refresh that follows when TAGURU_EMBED_URL is set",
    )
    p.add_argument("--json", action="store_true", help="print the per-batch outcomes as one JSON document")
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument(
        "--url",
        metavar="URL",
        help="import through the running server at URL (POST /import; token from TAGURU_API_TOKEN) "
        "instead of writing TAGURU_DATA_DIR, which a running server holds",
    )
    p.set_defaults(func=cmd_import)
    p = sub.add_parser(
        "migrate",
        help="bring the store's schema up to this build (PostgreSQL: TAGURU_DATABASE_URL; else the data dir)",
    )
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument(
        "--from-sqlite",
        metavar="DATA_DIR",
        help="copy the SQLite store of DATA_DIR, exactly, into the (empty) PostgreSQL store of TAGURU_DATABASE_URL",
    )
    p.set_defaults(func=cmd_migrate)
    p = sub.add_parser(
        "demo",
        help="serve the bundled demo corpus and show real answers",
        description="Import the bundled demo corpus (first run), start a server on --addr, ask it for evidence "
        "and print a summary; the server stops with the demo (Ctrl-C, SIGTERM, or with --exit at once).",
    )
    p.add_argument("--data-dir", default="data/demo", metavar="DIR", help="the demo's own store (default data/demo)")
    p.add_argument("--addr", default="127.0.0.1:8248", metavar="HOST:PORT", help="where to serve (default %(default)s)")
    p.add_argument("--exit", action="store_true", help="stop the server after showing the answers")
    p.add_argument("--json", action="store_true", help="print every answer as raw JSON instead of the summary")
    p.set_defaults(func=cmd_demo)
    from taguru_server.cli.evidence import add_parser as add_evidence

    add_evidence(sub)
    from taguru_server.cli.export import add_parser as add_export

    add_export(sub)
    from taguru_server.cli.evaluate import add_parser as add_evaluate

    add_evaluate(sub)
    from taguru_server.server.mcp.stdio import add_parser as add_mcp

    add_mcp(sub)
    from taguru_server.cli.communities import add_parser as add_communities

    add_communities(sub)
    return parser


def _warn_unknown_settings(args: argparse.Namespace, env: dict[str, str]) -> None:
    """A did-you-mean warning for each TAGURU_* name (environment or --config file) that nothing reads."""
    if getattr(args, "worker", False):
        return  # the supervisor already said it
    from taguru_server.cli.envcheck import warn_unknown

    names = set(env)
    config = getattr(args, "config", None) or env.get("TAGURU_CONFIG")
    if config:
        from taguru_server.client.config import read_config_file

        try:
            names.update(read_config_file(config))
        except (OSError, UnicodeDecodeError, ValueError):
            pass  # the command itself says why the file cannot be read
    if args.command == "serve" and _log_format_before_settings(config, env) == "json":
        _log_unknown_settings(names, env)  # every line `serve` writes is then one JSON object
        return
    warn_unknown(names, sys.stderr)


def _log_unknown_settings(names: set[str], env: dict[str, str]) -> None:
    """The did-you-mean warnings as `config.unknown_variable` events (the json log format)."""
    from taguru_server.cli.envcheck import unknown
    from taguru_server.server.logging import configure_logging

    found = unknown(names)
    if not found:
        return
    import structlog

    configure_logging(fmt="json", env=env, final=False)
    log = structlog.get_logger("taguru.serve")
    for name, close in found:
        hint = f" (did you mean {close}?)" if close else ""
        log.warning(
            "config.unknown_variable",
            message=f"{name} is not a taguru setting and is ignored{hint}",
            name=name,
            did_you_mean=close,
        )


def main(argv: list[str] | None = None) -> int:
    from taguru_server.cli.guard import guarded

    def run() -> int:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            return EXIT_USAGE if exc.code else EXIT_OK
        env = process_environment()  # the one read of the environment; the command takes it from `args`
        args.environment = env
        if check_contracts_requested(env):
            from taguru_server.pipeline import check_contracts

            check_contracts(True)
        _warn_unknown_settings(args, env)
        return int(args.func(args))

    return guarded(run)
