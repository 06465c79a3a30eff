"""`taguru compact [--config FILE] [--url URL] [--parallel N] [--dry-run] [--json] [CONTEXT...]`.

Rebuilds contexts from their live content, shedding dead edges (the reference's exact lines and
exit codes). Offline (no `--url`, no TAGURU_URL) it opens the store itself: the SQLite data dir
under its lock (so never beside a running server), or PostgreSQL under the store's write lock,
and runs the rebuild the server's `POST /contexts/{name}/compact` runs. Through a server it sends
that request per named context, or one `POST /maintenance/compact` sweep for all of them.
`--dry-run` rewrites nothing and reports each context's dead weight instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import attrs

from taguru_server.cli.environ import EXIT_FAIL, EXIT_OK, EXIT_USAGE, command_environment
from taguru_server.cli.sizes import human_bytes
from taguru_server.client.config import MalformedConfig

USAGE = """\
usage: taguru compact [--config FILE] [--url URL] [--parallel N] [--dry-run] [--json] [CONTEXT...]

Rebuild contexts from their live content, shedding dead edges. No CONTEXT means every context.

  --config FILE   KEY=VALUE settings file (default $TAGURU_CONFIG); the environment wins
  --url URL       compact through the running server at URL (default $TAGURU_URL); without
                  either, the store of TAGURU_DATA_DIR (or TAGURU_DATABASE_URL) is opened
                  directly, which a running SQLite server holds (stop it, or use --url)
  --parallel N    offline: rebuild up to N contexts at once (the output is the same)
  --dry-run       rewrite nothing; report each context's dead weight
  --json          one JSON array on stdout instead of the lines

exit codes: 0 done, 1 a context failed (or nothing to compact), 2 usage error
"""
REMOTE_TIMEOUT_SECS = 3600.0  # a sweep over a large store runs as long as its server lets it
PAGE = 1000


class Usage(Exception):
    """A command line `compact` cannot act on (exit 2)."""


class Failed(Exception):
    """The run cannot go on (exit 1); the message is its one line."""


@attrs.define
class Options:
    """The parsed command line."""

    config: str | None = None
    url: str | None = None
    parallel: int = 1
    dry_run: bool = False
    json: bool = False
    contexts: list[str] = attrs.field(factory=list)


def _value(args: Iterator[str], need: str) -> str:
    """The value after a flag; a missing one, or one that looks like a flag, is the `need` usage error."""
    value = next(args, None)
    if value is None or value.startswith("-"):
        raise Usage(need)
    return value


VALUE_FLAGS = {
    "--config": "--config needs a file path",
    "--url": "--url needs a server URL",
    "--parallel": "--parallel needs an integer of at least 1",
}


def parse(argv: list[str]) -> Options | None:
    """The options, None for `--help`; Usage for anything else it cannot take."""
    opts = Options()
    seen: set[str] = set()
    args = iter(argv)
    for arg in args:
        if arg in ("--help", "-h"):
            return None
        if arg in VALUE_FLAGS:
            if arg in seen:
                raise Usage(f"{arg} given twice")
            seen.add(arg)
            value = _value(args, VALUE_FLAGS[arg])
            if arg == "--config":
                opts.config = value
            elif arg == "--url":
                opts.url = value.rstrip("/")
            elif not value.isdigit() or int(value) < 1:
                raise Usage(VALUE_FLAGS[arg])
            else:
                opts.parallel = int(value)
        elif arg in ("--dry-run", "--json"):
            setattr(opts, arg[2:].replace("-", "_"), True)
        elif arg.startswith("-") and arg != "-":
            raise Usage(f"unknown flag '{arg}'")
        else:
            opts.contexts.append(arg)
    return opts


def cmd_compact(args: argparse.Namespace) -> int:
    """The command: parse, apply the config file, then compact offline or through the server."""
    try:
        opts = parse(list(args.argv))
    except Usage as exc:
        print(f"taguru: compact: {exc} — try 'taguru compact --help'", file=sys.stderr)
        return EXIT_USAGE
    if opts is None:
        print(USAGE, end="")
        return EXIT_OK
    from taguru_server.server.config import ConfigError, load_configuration

    env = command_environment(args)
    try:
        configuration = load_configuration(env, opts.config)
    except MalformedConfig as exc:
        print(f"taguru: compact: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a UTF-8 text file"
        print(
            f"taguru: compact: cannot read the config file {opts.config or env.get('TAGURU_CONFIG')}: {reason}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    values = dict(configuration.values)
    url = opts.url or values.get("TAGURU_URL", "").strip().rstrip("/") or None
    try:
        if url is not None:
            return _remote(opts, url, values)
        try:
            settings = configuration.server()
        except ConfigError as exc:
            raise Failed(f"configuration refused: {exc}") from None
        return _offline(opts, settings)
    except Failed as exc:
        print(f"taguru: compact: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except Usage as exc:
        print(f"taguru: compact: {exc} — try 'taguru compact --help'", file=sys.stderr)
        return EXIT_USAGE


# ----- the lines ---------------------------------------------------------------------------------


def compacted_line(row: dict[str, Any]) -> str:
    """One context's success line."""
    dropped = int(row.get("aliases_dropped") or 0)
    aliases = f", {dropped} alias(es) dropped (canonical has no live association)" if dropped else ""
    persisted = "" if row.get("image_persisted", True) else " [not yet persisted to disk; the next flush will retry]"
    return (
        f"context '{row['name']}': {human_bytes(int(row['bytes_before']))} → {human_bytes(int(row['bytes_after']))} "
        f"({row['dead_edges']} dead edge(s) shed{aliases}){persisted}"
    )


def dry_row(name: str, stats: dict[str, Any], loaded: bool = True) -> dict[str, Any]:
    """A dry run's record of one context from its wire stats (`GET /contexts/{name}`'s `stats`)."""
    associations = int(stats.get("associations") or 0)
    dead = int(stats.get("dead_edges") or 0)
    return {
        "context": name,
        "associations": associations,
        "dead_edges": dead,
        "dead_ratio": dead / associations if associations else 0.0,
        "dead_attributions": int(stats.get("dead_attributions") or 0),
        "arena_slack": int(stats.get("arena_slack") or 0),
        "footprint_bytes": int(stats.get("footprint_bytes") or 0),
        "stats_are_snapshot": not loaded,
    }


def dry_line(row: dict[str, Any]) -> str:
    """One context's dry-run line."""
    snapshot = " (snapshot: context is not currently loaded)" if row["stats_are_snapshot"] else ""
    return (
        f"context '{row['context']}': {row['associations']} associations, {row['dead_edges']} dead edge(s) "
        f"({row['dead_ratio'] * 100:.1f}% dead), {row['dead_attributions']} unlinked attribution(s), "
        f"{human_bytes(row['arena_slack'])} arena slack{snapshot}"
    )


def _print_json(rows: list[dict[str, Any]]) -> None:
    print(json.dumps(rows, indent=2, ensure_ascii=False))


def _report_dry(opts: Options, rows: list[dict[str, Any]]) -> int:
    if opts.json:
        _print_json(rows)
        return EXIT_OK
    for row in rows:
        print(dry_line(row))
    carrying = sum(1 for row in rows if row["dead_edges"] > 0)
    print(f"dry run: {carrying} of {len(rows)} context(s) carry dead weight, nothing rewritten")
    return EXIT_OK


@attrs.define
class _Run:
    """A run over named contexts: each one's line as it is compacted (or its failure), then the report."""

    opts: Options
    rows: list[dict[str, Any]] = attrs.field(factory=list)
    failed: int = 0

    def compacted(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if not self.opts.json:
            print(compacted_line(row), flush=True)

    def refused(self, name: str, reason: object) -> None:
        self.failed += 1
        print(f"taguru: compact: context '{name}': {reason}", file=sys.stderr)

    def report(self, total: int) -> int:
        if self.opts.json:
            _print_json(self.rows)
        else:
            print(f"compact: {len(self.rows)} of {total} context(s) rewritten")
        return EXIT_FAIL if self.failed else EXIT_OK


# ----- offline -----------------------------------------------------------------------------------


def _offline(opts: Options, settings: Any) -> int:
    """Open the store (the data dir's lock, or PostgreSQL), then rebuild (or measure) the contexts."""
    from pathlib import Path

    from taguru_server.cli.datadir import DataDirRefused, take_lock
    from taguru_server.server.app import open_registry
    from taguru_server.store.errors import StoreRefused
    from taguru_server.store.persist.sqlite import DB_NAME

    if not settings.database_url and not (Path(settings.data_dir) / DB_NAME).exists():
        raise Failed("the data directory holds no contexts")  # nothing is created for a dry look
    try:
        lock = take_lock(settings.data_dir) if not settings.database_url else None
    except DataDirRefused as exc:
        raise Failed(exc.reason) from None
    try:
        try:
            registry = open_registry(settings)
        except StoreRefused as exc:
            raise Failed(str(exc)) from None
        try:
            return _offline_in(opts, registry)
        finally:
            registry.close()
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)


def _offline_in(opts: Options, registry: Any) -> int:
    import asyncio

    names = list(opts.contexts) or registry.names()
    if not names:
        raise Failed("the data directory holds no contexts")
    if opts.dry_run:
        from taguru_server.server.wire.render.contexts import stats_out

        rows = []
        for name in names:
            ctx = registry.get(name)
            if ctx is None:
                raise Failed(f"context '{name}': no such context")
            rows.append(dry_row(name, stats_out(ctx.stats())))
        return _report_dry(opts, rows)

    async def locked() -> int:
        async with registry.write_section(deadline=float("inf")):  # PostgreSQL: no replica writes meanwhile
            return _rebuild_all(opts, registry, names)

    return asyncio.run(locked())


def _rebuild_all(opts: Options, registry: Any, names: list[str]) -> int:
    """Rebuild each context (up to --parallel at once) and commit each in the order named."""
    from concurrent.futures import ThreadPoolExecutor

    from taguru_server.store.derive.maintenance import rebuild

    run = _Run(opts)
    with ThreadPoolExecutor(max_workers=opts.parallel) as pool:
        for chunk in _chunks(names, opts.parallel):
            present = {name: registry.get(name) for name in chunk}
            futures = {n: pool.submit(rebuild, c, float("inf")) for n, c in present.items() if c is not None}
            for name in chunk:
                ctx = present[name]
                if ctx is None:
                    run.refused(name, "no such context")
                    continue
                try:
                    row = _commit(registry, name, ctx, futures[name].result())
                except Failed as exc:
                    run.refused(name, exc)
                    continue
                run.compacted(row)
    return run.report(len(names))


def _chunks(names: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(names), size):
        yield names[start : start + size]


def _commit(registry: Any, name: str, old: Any, done: Any) -> dict[str, Any]:
    """Make one rebuilt context durable (as `POST /contexts/{name}/compact` does); its outcome record."""
    from taguru_server.store.persist.registry import CommitFailed

    try:
        registry.replace(done.context)
    except CommitFailed as exc:
        raise Failed(f"the compaction could not be made durable; nothing was applied ({exc})") from None
    purged = registry.persistence.purge_freed()
    return {
        "name": name,
        "bytes_before": done.bytes_before,
        "bytes_after": done.bytes_after,
        "dead_edges": done.dead_edges,
        "aliases_dropped": done.aliases_dropped,
        "passages_compacted": bool(purged and old.meta.rev_passages > 0),
        "image_persisted": True,
    }


# ----- through a server --------------------------------------------------------------------------


def _check_base(base: str) -> None:
    """Usage when the URL carries credentials, is not http(s), or does not parse."""
    try:
        parts = urlsplit(base)
        _ = parts.port
    except ValueError:
        raise Usage(f"'{base}' is not a usable base URL") from None
    if "@" in parts.netloc:
        raise Usage(
            "the URL must not carry credentials (user:password@…) — set TAGURU_API_TOKEN (or TAGURU_API_TOKENS) instead"
        )
    if parts.scheme.lower() not in ("http", "https"):
        raise Usage(f"'{base}' uses '{parts.scheme}', but --url only supports http/https")
    if not parts.hostname:
        raise Usage(f"'{base}' is not a usable base URL")


def _remote(opts: Options, base: str, env: dict[str, str]) -> int:
    from taguru_server.client.http import TaguruClient, bearer_token

    _check_base(base)
    print(f"compact{' --dry-run' if opts.dry_run else ''} → {base}", file=sys.stderr, flush=True)
    client = TaguruClient(base, bearer_token(env), timeout=REMOTE_TIMEOUT_SECS)
    _version_warning(client, base)
    if opts.dry_run:
        return _report_dry(opts, _remote_dry_rows(client, opts.contexts))
    if opts.contexts:
        run = _Run(opts)
        for name in opts.contexts:
            try:
                row = {"name": name, **_call(client, "POST", f"/contexts/{quote(name, safe='')}/compact", {})}
            except Failed as exc:
                run.refused(name, exc)
                continue
            run.compacted(row)
        return run.report(len(opts.contexts))
    return _remote_sweep(opts, client)


def _remote_sweep(opts: Options, client: Any) -> int:
    """One `POST /maintenance/compact` over every context."""
    sweep = _call(client, "POST", "/maintenance/compact", {})
    rows = [dict(row) for row in sweep.get("contexts", [])]
    if opts.json:
        _print_json(rows)
    else:
        for row in rows:
            print(compacted_line(row))
        print(f"compact: server sweep rewrote {len(rows)} context(s)")
    skipped = sweep.get("skipped", [])
    for entry in skipped:
        print(f"taguru: compact: context '{entry.get('name')}' was skipped: {entry.get('error')}", file=sys.stderr)
    if sweep.get("deadline_exceeded"):
        print(
            "taguru: compact: the sweep's deadline expired before every candidate was compacted — re-run to "
            "continue (compaction is safe to repeat)",
            file=sys.stderr,
        )
    return EXIT_FAIL if skipped or sweep.get("deadline_exceeded") else EXIT_OK


def _remote_dry_rows(client: Any, names: list[str]) -> list[dict[str, Any]]:
    """Each named context's record (`GET /contexts/{name}`), else every context's (`GET /contexts`, paged)."""
    entries: list[dict[str, Any]] = []
    if names:
        for name in names:
            entries.append(_call(client, "GET", f"/contexts/{quote(name, safe='')}"))
    else:
        after: str | None = None
        while True:
            query = f"?limit={PAGE}" + ("" if after is None else "&after=" + quote(after, safe=""))
            page = _call(client, "GET", "/contexts" + query).get("contexts", [])
            entries.extend(page)
            if len(page) < PAGE:
                break
            after = str(page[-1]["name"])
        if not entries:
            raise Failed("the server holds no contexts")
    return [dry_row(str(e["name"]), e.get("stats") or {}, bool(e.get("loaded", True))) for e in entries]


def _call(client: Any, method: str, path: str, body: Any = None) -> Any:
    """One request's `result`, or Failed with `{url} answered {status}: {error}` (a 503 is never retried)."""
    from taguru_server.client.http import CallError, TransportError

    try:
        reply = client.send_sync(method, path, body)
        return client.decode(reply, client.base + path)
    except (CallError, TransportError) as exc:
        raise Failed(str(exc)) from None


def _version_warning(client: Any, base: str) -> None:
    """Warn once when the server's major.minor differs from this CLI's (the run goes on)."""
    from taguru_server.cli.serve import installed_version

    try:
        reply = client.send_sync("GET", "/health")
        server = str(json.loads(reply.body).get("version") or "")
    except Exception:  # noqa: BLE001 - the first real request reports an unreachable server
        return
    cli = installed_version()
    if server and server.split(".")[:2] != cli.split(".")[:2]:
        print(
            f"taguru: compact: warning: this CLI is {cli} but the server at {base} runs {server} — minor versions "
            "differ, and pre-1.0 a minor may change response shapes; continuing anyway",
            file=sys.stderr,
        )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `compact` on the `taguru` command's subparsers."""
    from taguru_server.cli.passthrough import add_passthrough

    return add_passthrough(
        subparsers, "compact", "rebuild contexts, shedding dead edges (offline or --url)", cmd_compact
    )
