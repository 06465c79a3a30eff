"""`taguru serve`: bind the address, check the store, run the server (one process, or a supervisor
and its workers); a refused configuration or address is one line in the log format chosen."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from taguru_server.cli.datadir import DataDirLock
from taguru_server.cli.environ import EXIT_FAIL, EXIT_OK, EXIT_USAGE, command_environment, configuration_or_exit, say

LISTEN_BACKLOG = 1024  # connections the kernel queues before the server accepts them (aiohttp's default: 128)


def _listen_address(addr: str, refuse: Callable[[str], None] = say) -> tuple[str, int]:
    """HOST:PORT from TAGURU_ADDR, or one line on stderr and exit 2."""
    host, sep, port = addr.rpartition(":")
    if sep and port.isdigit() and int(port) <= 65535:
        return host.strip("[]") or "127.0.0.1", int(port)
    refuse(f"TAGURU_ADDR must be HOST:PORT (for example 127.0.0.1:8248), got '{addr}'")
    raise SystemExit(EXIT_USAGE)


def log_format_before_settings(config: str | None, env: dict[str, str]) -> str:
    """The log format as far as it can be told when the settings themselves are refused: a valid
    TAGURU_LOG_FORMAT from the environment, else from the config file, else json unless a terminal."""
    from taguru_server.client.config import config_file_path, with_config_file
    from taguru_server.server.logging import default_format, parse_log_format

    raw = env.get("TAGURU_LOG_FORMAT", "")
    if not raw.strip():  # the file's value alone: a blank one in the environment does not hide it here
        try:
            raw = with_config_file({}, config_file_path(config, env)).get("TAGURU_LOG_FORMAT", "")
        except (OSError, ValueError):
            pass
    try:
        return parse_log_format(raw) or default_format()
    except ValueError:
        return default_format()


def _quotas_or_refuse(raw: str | None, refuse: Callable[[str], None]) -> dict[str, Any] | None:
    """TAGURU_CONTEXT_QUOTAS (read by `serve` alone, at boot), or None once `refuse` said why not."""
    from taguru_server.server.cache_config import QuotaRefused, parse_quotas

    try:
        return parse_quotas(raw)
    except QuotaRefused as exc:
        refuse(f"refusing to start with a broken quota declaration: {exc}")
        return None


def _serve_refusal(config: str | None, worker: bool, env: dict[str, str]) -> Callable[[str], None]:
    """How `serve` says that its configuration is refused: one `config.refused` JSON event (the text in
    `error`) under the json log format, the plain line `taguru: …` under console."""

    def refuse(message: str) -> None:
        from taguru_server.server.logging import configure_logging, lenient_log_settings

        fmt = log_format_before_settings(config, env)
        configure_logging(worker=worker, fmt=fmt, logs=lenient_log_settings(env), final=False)
        _refused("config.refused", message, fmt)

    return refuse


def flag_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The variables `--addr` and `--data-dir` stand for (a flag beats the environment and the config file)."""
    out: dict[str, str] = {}
    if getattr(args, "addr", None):
        out["TAGURU_ADDR"] = args.addr
    if getattr(args, "data_dir", None):
        out["TAGURU_DATA_DIR"] = args.data_dir
    return out


class ListenFailed(Exception):
    """The address could not be bound; the message is the one line to print."""


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    import attrs
    import structlog
    from aiohttp import web

    from taguru_server.cli.workers import forced_exit
    from taguru_server.client.config import config_file_path
    from taguru_server.server.app import build_app, open_registry, report_check
    from taguru_server.server.logging import configure_logging, lenient_log_settings
    from taguru_server.server.protocol import AppRunner, accept_error_handler
    from taguru_server.server.reload import Reloader, arm, shell_keys
    from taguru_server.server.state import KEYS_KEY, METRICS_KEY
    from taguru_server.store.errors import StoreRefused
    from taguru_server.store.persist.registry import Registry

    overrides = flag_overrides(args)
    if overrides:
        args.environment = {**command_environment(args), **overrides}
    env = command_environment(args)
    if hasattr(signal, "SIGHUP"):  # until the reload handler is in place, a SIGHUP must not end the process
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # the settings' own warnings, in the same form
    configure_logging(worker=args.worker, logs=lenient_log_settings(env), final=False)
    refuse = _serve_refusal(args.config, args.worker, env)
    configuration, settings = configuration_or_exit(args, refuse)
    quotas = _quotas_or_refuse(configuration.values.get("TAGURU_CONTEXT_QUOTAS"), refuse)
    if quotas is None:
        return EXIT_USAGE
    settings = attrs.evolve(settings, quotas=quotas)
    configure_logging(worker=args.worker, logs=settings.logging)
    log = structlog.get_logger("taguru.serve")
    if quotas and not args.worker:
        log.info("per-context quotas declared", contexts=len(quotas))
        if any(q.cache_bytes is not None for q in quotas.values()):
            log.info("quota.cache_not_enforced", reason="contexts are preloaded and never evicted")
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
        app = build_app(settings, registry, rerank=configuration.rerank(), environ=configuration.environ)
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

        def on_stop() -> None:
            if stop.is_set():  # a second SIGINT/SIGTERM while draining: exit at once
                forced_exit()
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_stop)
            except (NotImplementedError, RuntimeError, ValueError) as exc:  # the other signal still stops it
                log.warning(
                    "server.signal_unavailable",
                    message="could not register a shutdown signal handler",
                    signal=sig.name,
                    error=type(exc).__name__,
                )
        reloader = Reloader(app[KEYS_KEY], app[METRICS_KEY], config_file_path(args.config, env), shell_keys(env))
        watch = arm(loop, reloader)
        try:
            await stop.wait()
            log.info("server.stopping")
        finally:
            if watch is not None:
                watch.cancel()
            await runner.cleanup()
        log.info("server.stopped")

    if worker:  # the supervisor holds the data-dir lock and checked the store
        registry = open_registry(settings, checked=True, report=report_check)
        from taguru_server.cli.shared_start import adopt_inherited

        adopt_inherited(registry)  # a forked worker starts with what the supervisor loaded
        return _serve_until_stopped(run, registry, settings.log_format)
    try:
        # PostgreSQL: every process is a replica, so nothing is exclusive to this one
        lock = DataDirLock(settings.data_dir).__enter__() if not settings.database_url else None
    except OSError as exc:
        print(f"taguru: the data dir {settings.data_dir} cannot be used: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAIL
    try:
        try:
            registry = open_registry(settings, report=report_check)
        except StoreRefused as exc:
            print(f"taguru: {exc}", file=sys.stderr)
            return EXIT_FAIL
        if workers > 1:
            registry.close()  # opened to check (and migrate) the store once, before any worker starts
            from taguru_server.cli.workers import supervise
            from taguru_server.server.variables import export

            for name, value in overrides.items():  # every worker, forked or started, reads its flags' values
                export(name, value)
            shared = settings if settings.worker_start == "fork" else None
            return supervise(host, port, workers, args.config, settings.data_dir, shared, args.entry)
        return _serve_until_stopped(run, registry, settings.log_format)
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)


def _serve_until_stopped(run: Callable[[Any], Coroutine[Any, Any, None]], registry: Any, log_format: str | None) -> int:
    """Run the server on `registry` until a stop signal, then close the registry; the exit status (a refused
    address is its one line and a failure)."""
    import asyncio

    try:
        asyncio.run(run(registry))
    except ListenFailed as exc:
        _listen_refused(str(exc), log_format)
        return EXIT_FAIL
    finally:
        registry.close()
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
        say(message)


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


def installed_version() -> str:
    """The installed distribution's version (the one `/health` and `/version` report)."""
    try:
        return importlib.metadata.version("taguru-server")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
