"""`taguru migrate`: bring the store's schema up to this build, and copy a SQLite store into PostgreSQL."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from taguru_server.cli.datadir import DataDirLock
from taguru_server.cli.environ import EXIT_FAIL, EXIT_OK, EXIT_USAGE, STORE_CONFIG_HELP, settings_or_exit


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply the store's pending schema migrations alone (boot applies them too) and say what was done."""
    from taguru_server.store.errors import StoreRefused

    settings = settings_or_exit(args)
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


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `taguru migrate` on the `taguru` command's subparsers."""
    p = subparsers.add_parser(
        "migrate",
        help="bring the store's schema up to this build (PostgreSQL: TAGURU_DATABASE_URL; else the data dir)",
    )
    p.add_argument("--config", metavar="FILE", help=STORE_CONFIG_HELP)
    p.add_argument(
        "--from-sqlite",
        metavar="DATA_DIR",
        help="copy the SQLite store of DATA_DIR, exactly, into the (empty) PostgreSQL store of TAGURU_DATABASE_URL",
    )
    p.set_defaults(func=cmd_migrate)
    return p
