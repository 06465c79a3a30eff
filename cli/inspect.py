"""`taguru inspect PATH [--json]`: offline, read-only verification of a store (the backup check).

PATH is a data directory, a bare `taguru.sqlite3` file, or a PostgreSQL URL (`postgres://…`,
`postgresql://…`); with no PATH, TAGURU_DATABASE_URL (environment or TAGURU_CONFIG file). It runs
the boot's own checks without writing anything: SQLite is opened `mode=ro` (immutable when no
`-wal` file exists, so nothing appears beside a backup), the data dir's `LOCK` is not taken, and
PostgreSQL is read in read-only snapshots without migrating. Then every context is loaded through
the server's loader, its change feed read, and its persisted BM25 file checked; the groups are
checked for what boot would drop. Exit 0 when nothing is corrupt, 1 otherwise, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import attrs

from taguru_server.cli.environ import EXIT_FAIL, EXIT_OK, EXIT_USAGE, command_environment
from taguru_server.cli.sizes import human_bytes

USAGE = """\
usage: taguru inspect PATH [--json]   (a data directory, one taguru.sqlite3 file, or a postgres:// URL)

Verify a store offline and read-only: the boot checks (format, identity, integrity), every
context loaded as the server loads it, its change feed, its persisted BM25 index, and the groups.
Without PATH, TAGURU_DATABASE_URL is inspected. Nothing is written, and no lock is taken.

  --json   one JSON document on stdout instead of the lines (the exit code is the same)

exit codes: 0 nothing corrupt, 1 something corrupt, 2 usage error
"""
PG_SCHEMES = ("postgres://", "postgresql://")
FEED_PAGE = 1000


class Usage(Exception):
    """The command line cannot be acted on: the usage goes to stderr, exit 2."""


class Refused(Exception):
    """The target cannot be inspected at all: one line, exit 2."""


@attrs.define
class Report:
    """What one inspection found, in the reference's JSON envelope."""

    target: str
    kind: str
    contexts: list[dict[str, Any]] = attrs.field(factory=list)
    groups: list[dict[str, Any]] = attrs.field(factory=list)
    notices: list[dict[str, Any]] = attrs.field(factory=list)
    total: dict[str, Any] | None = None
    lines: list[str] = attrs.field(factory=list)

    @property
    def corrupt(self) -> int:
        return sum(1 for row in self.contexts if row["status"] != "ok")

    def notice(self, level: str, kind: str, subject: str, message: str) -> None:
        self.notices.append({"level": level, "kind": kind, "subject": subject, "message": message})
        self.lines.append(f"{subject}: {level.upper()} — {message}")

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"target": self.target, "kind": self.kind}
        for key in ("contexts", "groups", "notices"):
            if getattr(self, key):
                doc[key] = getattr(self, key)
        if self.total is not None:
            doc["total"] = self.total
        doc["corrupt"] = self.corrupt
        return doc


def parse(argv: list[str]) -> tuple[str | None, bool] | None:
    """(PATH or None, --json), None for --help anywhere; Usage otherwise."""
    if any(a in ("--help", "-h") for a in argv):
        return None
    as_json = False
    paths: list[str] = []
    for arg in argv:
        if arg == "--json":
            as_json = True
        elif arg.startswith("-") and arg != "-":
            raise Usage(arg)
        else:
            paths.append(arg)
    if len(paths) > 1:
        raise Usage(paths[1])
    return (paths[0] if paths else None), as_json


def cmd_inspect(args: argparse.Namespace) -> int:
    """The command: parse, pick the store, inspect it, print the lines or the JSON document."""
    try:
        parsed = parse(list(args.argv))
    except Usage:
        print(USAGE, end="", file=sys.stderr)
        return EXIT_USAGE
    if parsed is None:
        print(USAGE, end="")
        return EXIT_OK
    path, as_json = parsed
    try:
        report = _inspect(path, command_environment(args))
    except Usage:
        print(USAGE, end="", file=sys.stderr)
        return EXIT_USAGE
    except Refused as exc:
        print(f"taguru: inspect: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if as_json:
        print(json.dumps(report.document(), indent=2, ensure_ascii=False))
    else:
        for line in report.lines:
            print(line)
    if report.corrupt:
        print(f"taguru: inspect: {report.corrupt} corrupt", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def _inspect(path: str | None, env: dict[str, str]) -> Report:
    """Inspect the store PATH names (TAGURU_DATABASE_URL without one)."""
    if path is None:
        from taguru_server.server.config import load_configuration

        try:
            url = load_configuration(env, None).values.get("TAGURU_DATABASE_URL", "").strip()
        except (OSError, ValueError):
            url = ""
        if not url:
            raise Usage("no PATH")
        return _postgres(url)
    if path.startswith(PG_SCHEMES):
        return _postgres(path)
    target = Path(path)
    if target.is_dir():
        return _directory(target)
    if target.is_file():
        return _sqlite(target, target, "store", None)
    raise Refused(f"{path} is neither a file nor a directory")


# ----- SQLite --------------------------------------------------------------------------------------


def _directory(directory: Path) -> Report:
    from taguru_server.store.persist.sqlite import DB_NAME

    try:
        entries = {p.name for p in directory.iterdir()}
    except OSError as exc:
        raise Refused(f"cannot read {directory}: {exc.strerror or exc}") from None
    if DB_NAME not in entries:
        report = Report(str(directory), "directory")
        report.lines.append(f"no taguru store under {directory}")
        return report
    return _sqlite(directory / DB_NAME, directory, "directory", directory / "indexes")


def _sqlite(file: Path, target: Path, kind: str, index_dir: Path | None) -> Report:
    from taguru_server.store.errors import StoreRefused
    from taguru_server.store.persist.sqlite import STORE_ID_FILE, ReadOnlySqlite, identity_mismatch

    report = Report(str(target), kind)
    try:
        store = ReadOnlySqlite(file)
    except StoreRefused as exc:
        return _store_refused(report, str(exc))
    try:
        id_file = file.parent / STORE_ID_FILE
        if kind == "directory" and id_file.exists():
            try:
                recorded = id_file.read_text(encoding="ascii").strip()
            except (OSError, UnicodeDecodeError):
                return _store_refused(report, f"the store identity {id_file} cannot be read")
            if recorded and store.store_id and recorded != store.store_id:
                return _store_refused(report, identity_mismatch(file, store.store_id, recorded, id_file))
        _contents(report, store, index_dir)
    finally:
        store.close()
    sizes = [_size(file), _size(file.with_name(file.name + "-wal"))]
    _finish(report, sum(sizes), _dir_size(index_dir))
    return report


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _dir_size(directory: Path | None) -> int:
    if directory is None or not directory.is_dir():
        return 0
    return sum(_size(p) for p in directory.iterdir() if p.is_file())


def _store_refused(report: Report, error: str) -> Report:
    """The store fails a boot check: one corrupt row, nothing else read."""
    report.contexts.append({"name": report.target, "status": "corrupt_store", "error": error})
    report.lines.append(f"{report.target}: CORRUPT store — {error}")
    return report


# ----- PostgreSQL ----------------------------------------------------------------------------------


def _postgres(url: str) -> Report:
    from taguru_server.store.errors import StoreRefused
    from taguru_server.store.persist.postgres import PostgresPersistence, store_location

    report = Report(f"postgresql://{store_location(url)}", "postgresql")
    try:
        store = PostgresPersistence(url, migrate=False)  # reads only: the version check and the identity
    except StoreRefused as exc:
        return _store_refused(report, str(exc))
    try:
        _contents(report, store, None)
    finally:
        store.close()
    _finish(report, None, 0)
    return report


# ----- the contents --------------------------------------------------------------------------------


def _contents(report: Report, store: Any, index_dir: Path | None) -> None:
    """Every context (loaded, its feed read, its index file checked), then the groups."""
    from taguru_server.store.errors import StoreRefused

    try:
        store.latest_change()  # the change log's position reads
        listed = store.list_contexts()
        groups = store.list_groups()
    except Exception as exc:  # noqa: BLE001 - any failure to read the directory is the store's damage
        _store_refused(report, f"the store's directory of contexts cannot be read ({type(exc).__name__})")
        return
    report.total = {"contexts": len(listed), "groups": len(groups)}
    for cid, name, meta in sorted(listed, key=lambda row: row[1]):
        try:
            _context(report, store, cid, name, meta, index_dir)
        except StoreRefused as exc:
            _corrupt(report, name, str(exc))
    _groups(report, groups, {name for _cid, name, _meta in listed})


def _corrupt(report: Report, name: str, error: str) -> None:
    report.contexts.append({"name": name, "status": "corrupt_context", "error": error})
    report.lines.append(f"{name}: CORRUPT context — {error}")


def _context(report: Report, store: Any, cid: int, name: str, meta: Any, index_dir: Path | None) -> None:
    try:
        ctx, _seq = store.load(cid, name, meta)
    except Exception as exc:  # noqa: BLE001 - a context that does not load is what inspect reports
        _corrupt(report, name, f"the context cannot be loaded ({type(exc).__name__})")
        return
    feed_error = _feed_problem(store, cid)
    if feed_error is not None:
        _corrupt(report, name, feed_error)
        return
    from taguru_server.server.wire.render.contexts import sizes_out

    stats = ctx.stats()
    ratio = stats.dead_edges / stats.associations if stats.associations else 0.0
    row = {
        "name": name,
        "status": "ok",
        **sizes_out(stats),
        "dead_ratio": ratio,
        "dead_attributions": stats.dead_attributions,
        "unsourced_edges": stats.unsourced_edges,
        "unsourced_weight": stats.unsourced_weight,
        "passage_count": len(ctx.passages),
    }
    report.contexts.append(row)
    report.lines.append(
        f"{name}: ok  {stats.associations} associations · {stats.concepts} concepts · {stats.labels} labels · "
        f"{stats.sources} sources · footprint {human_bytes(stats.footprint_bytes)} · {stats.dead_edges} dead "
        f"edge(s) ({ratio * 100:.1f}% dead) · {stats.dead_attributions} dead attribution(s) · "
        f"{stats.unsourced_edges} unsourced edge(s) · {len(ctx.passages)} passages"
    )
    if index_dir is not None:
        _index_note(report, store, ctx, index_dir)


def _feed_problem(store: Any, cid: int) -> str | None:
    """Why the context's change feed cannot be read in order (every event decoded), or None."""
    after = 0
    try:
        while True:
            page = store.feed_page(cid, after, FEED_PAGE)
            for seq, _kind, _fields in page.events:
                if seq <= after:
                    return f"the change feed is out of order at seq {seq}"
                after = seq
            if len(page.events) < FEED_PAGE:
                return None
    except Exception as exc:  # noqa: BLE001 - an unreadable feed is damage
        return f"the change feed cannot be read ({type(exc).__name__})"


def _index_note(report: Report, store: Any, ctx: Any, index_dir: Path) -> None:
    """A persisted BM25 file the next load would rebuild is a note (a derived cache, never a failure)."""
    from taguru_server.store.index.bm25_snapshot import check_file

    try:
        checked = check_file(ctx, index_dir, store.store_id, store.index_seq(ctx.cid))
    except Exception as exc:  # noqa: BLE001 - an unreadable cache file is rebuilt, not damage
        checked = None
        report.notice("note", "stale_index", ctx.name, f"the persisted BM25 index cannot be checked ({exc})")
    if checked is not None and checked.outcome != "reused":
        why = f" ({checked.reason})" if checked.reason else ""
        report.notice(
            "note", "stale_index", ctx.name, f"the persisted BM25 index is {checked.outcome} at the next load{why}"
        )


def _groups(report: Report, groups: dict[str, Any], contexts: set[str]) -> None:
    """Each group's row and the reference's warnings about what boot would drop."""
    from taguru_server.store.persist.groups import MAX_GROUP_DEPTH, MAX_GROUP_MEMBERS, NestingError, validate_nesting

    for name in sorted(groups):
        record = groups[name]
        warnings: list[tuple[str, str]] = []
        for member in record.contexts:
            if member not in contexts:
                warnings.append(("dangling_context_reference", f"member context '{member}' does not exist"))
        for child in record.groups:
            if child not in groups:
                warnings.append(("dangling_child_group_reference", f"child group '{child}' does not exist"))
        if len(record.contexts) > MAX_GROUP_MEMBERS:
            warnings.append(("over_cap_members", f"{len(record.contexts)} member contexts, over the cap of 1000"))
        if len(record.groups) > MAX_GROUP_MEMBERS:
            warnings.append(("over_cap_children", f"{len(record.groups)} child groups, over the cap of 1000"))
        row: dict[str, Any] = {
            "name": name,
            "status": "ok",
            "contexts": len(record.contexts),
            "groups": len(record.groups),
        }
        if warnings:
            row["notes"] = [message for _kind, message in warnings]
        report.groups.append(row)
        tail = "".join(f" · WARNING: {message}" for _kind, message in warnings)
        report.lines.append(
            f"{name}: ok  {len(record.contexts)} member context(s) · {len(record.groups)} child group(s){tail}"
        )
        for kind, message in warnings:
            report.notices.append({"level": "warning", "kind": kind, "subject": name, "message": message})
    kept: dict[str, Any] = {name: attrs.evolve(record, groups=()) for name, record in groups.items()}
    for parent in sorted(groups):
        for child in groups[parent].groups:
            if child not in groups:
                continue
            trial = {**kept, parent: attrs.evolve(kept[parent], groups=(*kept[parent].groups, child))}
            try:
                validate_nesting(trial)
            except NestingError:
                report.notice(
                    "warning",
                    "dropped_nesting_edge",
                    "groups",
                    f"boot drops the nesting edge '{parent}' → '{child}' (it would close a cycle or stack more "
                    f"than {MAX_GROUP_DEPTH} groups)",
                )
                continue
            kept = trial


def _finish(report: Report, store_bytes: int | None, index_bytes: int) -> None:
    """The footer and the totals (when the directory of contexts was read)."""
    if report.total is None:
        return
    footprint = sum(int(row.get("footprint_bytes", 0)) for row in report.contexts)
    report.total.update(
        {
            **({} if store_bytes is None else {"store_bytes": store_bytes}),
            "index_bytes": index_bytes,
            "passage_count": sum(int(row.get("passage_count", 0)) for row in report.contexts),
            "footprint_bytes": footprint,
        }
    )
    store = "" if store_bytes is None else f" · store {human_bytes(store_bytes)}"
    report.lines.append(
        f"total: {report.total['contexts']} contexts · {report.total['groups']} groups{store} · index "
        f"{human_bytes(index_bytes)} · passages {report.total['passage_count']} · footprint if all resident "
        f"{human_bytes(footprint)}"
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `inspect` on the `taguru` command's subparsers."""
    from taguru_server.cli.passthrough import add_passthrough

    return add_passthrough(
        subparsers, "inspect", "verify a store offline and read-only (the backup check)", cmd_inspect
    )
