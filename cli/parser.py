"""The `taguru` argument parser: the serve, import and demo commands here, the others registered by
their own modules (`add_parser`)."""

from __future__ import annotations

import argparse

from taguru_server.cli.environ import STORE_CONFIG_HELP
from taguru_server.cli.import_command import cmd_import
from taguru_server.cli.migrate import add_parser as add_migrate
from taguru_server.cli.serve import cmd_serve, installed_version


def cmd_demo(args: argparse.Namespace) -> int:
    """Import the bundled demo corpus into a local store, start the server, show real answers."""
    from taguru_server.cli.demo.run import cmd_demo as run_demo

    return run_demo(args)


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
    p.add_argument("--config", metavar="FILE", help=STORE_CONFIG_HELP)
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes serving one address and data dir (default TAGURU_WORKERS, else 1)",
    )
    p.add_argument("--addr", metavar="HOST:PORT", help="where to listen (beats TAGURU_ADDR)")
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the SQLite data directory (beats TAGURU_DATA_DIR; not with TAGURU_DATABASE_URL)",
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
    p.add_argument("--config", metavar="FILE", help=STORE_CONFIG_HELP)
    p.add_argument(
        "--url",
        metavar="URL",
        help="import through the running server at URL (POST /import; token from TAGURU_API_TOKEN; default "
        "TAGURU_URL) instead of writing TAGURU_DATA_DIR, which a running server holds",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="import offline into this data dir (beats TAGURU_DATA_DIR, and TAGURU_URL: the data dir, not a server)",
    )
    p.set_defaults(func=cmd_import)
    add_migrate(sub)
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
    from taguru_server.cli.compact import add_parser as add_compact

    add_compact(sub)
    from taguru_server.cli.inspect import add_parser as add_inspect

    add_inspect(sub)
    return parser
