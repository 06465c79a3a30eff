"""`taguru import`: validate JSONL batch files, then apply them offline to the store or send them to a
running server in stretches of whole batches."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taguru_server.cli.datadir import DataDirRefused, take_lock
from taguru_server.cli.environ import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    command_environment,
    remote_url,
    settings_or_exit,
)
from taguru_server.client.http import (
    NotEnvelope,
    ServerError,
    TaguruClient,
    TransportError,
    bearer_token,
)
from taguru_server.client.urls import url_refusal

CHUNK_BUDGET = 4 * 1024 * 1024
IMPORT_TIMEOUT_SECS = 600


def _input_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            # a directory `taguru export --out` wrote: the contexts first, then the groups naming them
            files.extend(sorted(path.glob("*.jsonl"), key=lambda p: (p.name.endswith(".group.jsonl"), p.name)))
        else:
            files.append(path)
    return files


def cmd_import(args: argparse.Namespace) -> int:
    from taguru_server.store.transfer.importer import parse_stream

    if args.url and getattr(args, "data_dir", None):
        print("taguru import: --url and --data-dir cannot be combined", file=sys.stderr)
        return EXIT_USAGE
    args.url = remote_url(args)
    if getattr(args, "data_dir", None):
        args.environment = {**command_environment(args), "TAGURU_DATA_DIR": args.data_dir}
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
    stated: set[str] = set()

    def parse(f: Path) -> None:
        text = f.read_bytes().decode("utf-8")  # bytes: a lone \r must not become a line break
        stream = parse_stream(text)
        _one_record_per_context(stream.schemas, stated)
        parsed.append((f, text, stream))

    refusal = _validate_files(files, parse)
    if refusal is not None:
        return _finish(args, [], refusal)
    return _import_offline(args, parsed)


def _one_record_per_context(records: list[Any], stated: set[str]) -> None:
    """Across the files of one run, one `taguru_schema` record owns one context's schema."""
    from taguru_server.store.transfer.importer import ParseError

    for rec in records:
        if rec.context in stated:
            raise ParseError(
                f"context '{rec.context}' schema is already stated by an earlier file — one record owns one "
                "context's schema"
            )
        stated.add(rec.context)


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


def _finish(
    args: argparse.Namespace, batches: list[Any], error: str | None, extra: dict[str, Any] | None = None
) -> int:
    if args.json:
        doc: dict[str, Any] = {"dry_run": bool(args.dry_run), "batches": batches, **(extra or {})}
        if error:
            doc["error"] = error
        print(json.dumps(doc, ensure_ascii=False))
    elif error:
        print(f"taguru import: {error}", file=sys.stderr)
    else:
        verb = "previewed" if args.dry_run else "imported"
        warnings = sum(int(b.get("schema_violations", 0)) for b in batches if isinstance(b, dict))
        said = f", {warnings} schema warning(s)" if warnings else ""
        print(f"taguru import: {verb} {len(batches)} batch(es){said}", file=sys.stderr)
    return EXIT_FAIL if error else EXIT_OK


def _import_offline(args: argparse.Namespace, parsed: list[tuple[Path, str, list[Any]]]) -> int:
    settings = settings_or_exit(args)
    outcomes: list[Any] = []
    report = SchemaReport(args)
    if args.dry_run and not settings.database_url and not _store_exists(settings.data_dir):
        # a preview never creates the store it previews: an absent data dir reads as an empty one
        import tempfile

        import attrs

        with tempfile.TemporaryDirectory(prefix="taguru-preview-") as scratch:
            return _import_offline_in(args, parsed, attrs.evolve(settings, data_dir=scratch), outcomes, report)
    return _import_offline_in(args, parsed, settings, outcomes, report)


def _store_exists(data_dir: str) -> bool:
    from taguru_server.store.persist.sqlite import DB_NAME

    return (Path(data_dir) / DB_NAME).exists()


def _import_offline_in(
    args: argparse.Namespace, parsed: list[tuple[Path, str, list[Any]]], settings: Any, outcomes: list[Any], report: Any
) -> int:
    from taguru_server.server.app import open_registry
    from taguru_server.store.errors import ApiError, StoreRefused

    try:
        # with PostgreSQL, replicas may be serving: the import takes the store's write lock instead
        lock = take_lock(settings.data_dir) if not settings.database_url else None
    except DataDirRefused as exc:
        return _finish(args, outcomes, exc.reason)
    try:
        try:
            registry = open_registry(settings)
        except StoreRefused as exc:
            return _finish(args, outcomes, str(exc))
        try:
            # a preview runs every file as one stream, so contexts an earlier file creates count as existing
            streams = [[b for _f, _t, bs in parsed for b in bs]] if args.dry_run else [bs for _f, _t, bs in parsed]
            progress = _import_progress(args, sum(len(bs) for bs in streams))
            names = ["(all files)"] if args.dry_run else [f.name for f, _t, _bs in parsed]
            for name, batches in zip(names, streams, strict=True):
                on_commit = functools.partial(_advance, progress, len(outcomes))
                try:
                    outcomes.extend(_run_offline(registry, batches, args.dry_run, on_commit, report.file(name)))
                except ApiError as exc:
                    progress.close()
                    return _finish(args, outcomes, exc.message, report.extra())
                progress.update(len(outcomes))
            progress.close()
            said, failed = _after_import(args, settings, registry, outcomes)
        finally:
            registry.close()
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)
    code = _finish(args, outcomes, None, report.extra())
    if not args.json:
        for line in said:
            print(line, file=sys.stderr)
    for line in failed:
        print(line, file=sys.stderr)
    return EXIT_FAIL if failed or report.failed() else code


def _after_import(
    args: argparse.Namespace, settings: Any, registry: Any, outcomes: list[Any]
) -> tuple[list[str], list[str]]:
    """After the last batch: the imported contexts' vectors (unless `--no-embed`), then their persisted
    indexes; what the embedding said and what failed. A preview does neither."""
    said: list[str] = []
    failed: list[str] = []
    if args.dry_run:
        return said, failed
    touched = list(dict.fromkeys(o["context"] for o in outcomes))
    if not args.no_embed:
        from taguru_server.cli.embed import embed_imported

        said, failed = embed_imported(settings, registry, touched)
    _keep_indexes(registry, touched)
    return said, failed


def _keep_indexes(registry: Any, names: list[str]) -> None:
    """Leave each imported context's persisted BM25 index, edge image and activation image where the server
    looks for them, at the change-log position the store is at after the import's last commit, so the next
    start maps them instead of tokenizing every paragraph and rebuilding its graph. From the context in
    memory when its index is numbered as a load numbers it (a fresh context), else from a load of its rows
    (which writes the files as a server start does); the spellings' file from the context's names in a
    load's order. No index directory (PostgreSQL without TAGURU_INDEX_DIR, or `off`): nothing is kept. A
    file that cannot be written is left to the next start to rebuild."""
    from taguru_server.store.index.bm25_snapshot import save_live
    from taguru_server.store.index.lexicon_image import save_lexicons
    from taguru_server.store.persist.edge_image import write_image
    from taguru_server.store.read.activation_image import save_activation_image, warm_activation

    store = registry.persistence
    index_dir = getattr(store, "index_dir", None)
    if index_dir is None:
        return
    for name in names:
        ctx = registry.get(name)
        if ctx is None:
            continue  # deleted by the stream itself
        identity = {"store": store.store_id, "context": ctx.cid, "seq": store.index_seq(ctx.cid)}
        try:
            if not save_live(ctx, index_dir, identity):
                loaded, _seq = store.load(ctx.cid, name, ctx.meta)  # writes both files, as a server start does
                warm_activation(loaded)  # and its warm-up the activation image
            else:
                write_image(ctx, index_dir, identity)
                save_activation_image(ctx)
                save_lexicons(ctx.fresh_lexicons(), index_dir, ctx.cid)
        except (OSError, ValueError):
            pass


def _advance(progress: Any, before: int, landed: int) -> None:
    progress.update(before + landed)


class SchemaReport:
    """What the schema did to an offline import: refused batches (skipped, the rest applied), warned ones, and
    the stream's `taguru_schema` records installed or not; printed as it goes, summed for `--json`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.refused: list[dict[str, str]] = []
        self.installed: list[dict[str, Any]] = []
        self.records = 0
        self.record_failures = 0
        self.name = ""

    def file(self, name: str) -> SchemaReport:
        self.name = name
        return self

    def batch_refused(self, batch: Any, err: Any) -> None:
        self.refused.append({"context": batch.context, "source": batch.source, "error": err.message})
        print(f"taguru: import: {self.name}: {err.message}", file=sys.stderr)

    def warned(self, outcomes: list[dict[str, Any]]) -> None:
        for o in outcomes:
            if o["schema_violations"] and not self.args.json:
                print(
                    f"{self.name}: context '{o['context']}', source '{o['source']}' imported, "
                    f"schema warnings: {o['schema_violations']}"
                )

    def install(self, registry: Any, records: list[Any]) -> None:
        """Each record on its own, in stream order (a failure does not stop the next)."""
        from taguru_server.store.transfer.schema_records import SchemaOutcome, install_one

        for rec in records:
            self.records += 1
            got = install_one(registry, rec)
            if isinstance(got, SchemaOutcome):
                self.installed.append(
                    {"context": got.context, "mode": got.mode, "types": got.types, "relations": got.relations}
                )
                if not self.args.json:
                    print(f"{self.name}: context '{rec.context}' schema installed (mode: {got.mode})")
            else:
                self.record_failures += 1
                print(f"taguru: import: {self.name}: context '{rec.context}': {got}", file=sys.stderr)
        if records and not self.args.json:
            print(f"import: {len(self.installed)} of {self.records} schema record(s) installed")

    def failed(self) -> bool:
        return bool(self.refused or self.record_failures)

    def extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.refused:
            out["failed_batches"] = self.refused
        if self.installed:
            out["schemas"] = self.installed
        return out


def _run_offline(
    registry: Any,
    batches: list[Any],
    dry_run: bool,
    on_commit: Callable[[int], None] | None = None,
    report: SchemaReport | None = None,
) -> list[dict[str, Any]]:
    """One stream into the store; a shared store (other processes may write it) in one write section."""
    import asyncio

    from taguru_server.server.wire.render.imports import batches_out
    from taguru_server.store.transfer.group_import import restore_groups
    from taguru_server.store.transfer.importer import run_import

    def both(commit_every: int) -> list[dict[str, Any]]:
        outcomes = run_import(
            registry,
            batches,
            dry_run=dry_run,
            commit_every=commit_every,
            on_commit=on_commit,
            on_schema_refused=None if report is None else report.batch_refused,
        )
        out = batches_out(outcomes)
        if report is not None:
            report.warned(out)
        if not dry_run:  # the stream's schema records, then its group records, after every batch
            if report is not None:
                report.install(registry, getattr(batches, "schemas", []))
            restore_groups(registry, getattr(batches, "groups", []), len(outcomes))
        return out

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
    stated: set[str] = set()

    def count(f: Path) -> None:
        nonlocal total
        mine: set[str] = set()
        total += validate(f, CHUNK_BUDGET, mine)
        _one_record_per_context([_Named(c) for c in sorted(mine)], stated)

    refusal = _validate_files(files, count)
    if refusal is not None:
        return _finish(args, [], refusal)
    client = TaguruClient(args.url, bearer_token(command_environment(args)), timeout=IMPORT_TIMEOUT_SECS)
    if stated:
        refused = _schema_preflight(client, args.url)
        if refused is not None:
            print(f"taguru: import: {refused}", file=sys.stderr)
            return EXIT_FAIL
    path = "/import" + ("?dry_run=true" if args.dry_run else "")
    outcomes: list[Any] = []
    budget = Budget(CHUNK_BUDGET)
    progress = _import_progress(args, total)
    try:
        error = _send_files(args, client, path, files, budget, outcomes, progress)
    finally:
        progress.close()  # before the closing line, so the bar never overwrites it
    return _finish(args, outcomes, error)


class _Named:
    """A schema record's context, as the cross-file check reads it."""

    def __init__(self, context: str) -> None:
        self.context = context


def _schema_preflight(client: TaguruClient, base: str) -> str | None:
    """Before a stream with schema records is sent: the server must read schema format 1 (`GET /version`)."""
    try:
        reply = client.send_sync("GET", "/version")
        formats = json.loads(reply.body).get("schema_formats") if reply.status == 200 else None
    except (TransportError, ValueError, AttributeError):
        return None  # the first batch request reports an unreachable server
    if formats is None:
        return (
            f"this CLI writes schema format 1 but the server at {base} does not report a schema_formats — nothing "
            "was sent; upgrade the server, or import without the taguru_schema record"
        )
    if 1 not in formats:
        return (
            f"this CLI writes schema format 1 but the server at {base} reads {json.dumps(formats)} — nothing was "
            "sent; upgrade the server, or import without the taguru_schema record"
        )
    return None


def _compact_records(lines: list[str]) -> list[str]:
    """Schema records as compact lines (the server re-checks them)."""
    return [json.dumps(json.loads(line), ensure_ascii=False, separators=(",", ":")) for line in lines]


def _send_files(
    args: argparse.Namespace,
    client: TaguruClient,
    path: str,
    files: list[Path],
    budget: Any,
    outcomes: list[Any],
    progress: Any,
) -> str | None:
    """Each file's batches in stretches, then its schema and group records; the first error, or None."""
    from taguru_server.cli.stream_import import stretches

    for f in files:
        groups: list[str] = []
        schemas: list[str] = []
        for stretch in stretches(f, budget, groups, schemas):
            error = _send_pieces(args, client, path, stretch.pieces, budget, outcomes, progress)
            if error is not None:
                return error
        error = _send_groups(args, client, path, _compact_records(schemas) + groups, outcomes, progress)
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
