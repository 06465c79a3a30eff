"""`taguru evidence CONTEXT ORIGIN…`: ask a running server for an evidence package and show it as a table.

The request goes to `POST /contexts/{name}/evidence` (with `"explain": true`, so the package lists
its stages); the table shows the items (fused rank, kind, what, sources, lanes, bytes/tokens), then
what was omitted and why, the budget used against its limits and the stage timings the server sent
in its `Server-Timing` header. `--json` prints the package itself.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any
from urllib.parse import quote

from taguru_server.cli.environ import add_server_options, client_environment, connect, server_url
from taguru_server.client.http import CallError, NotEnvelope, ServerError, SetupError, TransportError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EVIDENCE_TIMEOUT_SECS = 60
SNIPPET_CHARS = 40
PIPE_WIDTH = 120  # the table's width when stdout is not a terminal


class EvidenceFailed(Exception):
    """One line for stderr; `code`: the exit status (2 for a setting or URL that cannot be used)."""

    def __init__(self, message: str, code: int = EXIT_FAIL) -> None:
        super().__init__(message)
        self.code = code


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"origins": list(args.origins), "explain": True}
    if args.labels:
        body["labels"] = list(args.labels)
    budget = {
        key: value
        for key, value in (
            ("max_items", args.max_items),
            ("max_bytes", args.max_bytes),
            ("max_tokens", args.max_tokens),
        )
        if value is not None
    }
    if budget:
        body["budget"] = budget
    if args.rerank:
        body["rerank"] = {}
    return body


def fetch(args: argparse.Namespace) -> tuple[Any, str]:
    """(the package, the Server-Timing header) or EvidenceFailed with the one line to print."""
    try:
        env = client_environment(args)
        url = server_url(args.url, env)
    except SetupError as exc:
        raise EvidenceFailed(str(exc), EXIT_USAGE) from None
    client = connect(url, env, EVIDENCE_TIMEOUT_SECS)
    path = "/contexts/" + quote(args.context, safe="") + "/evidence"
    try:
        reply = client.send_sync("POST", path, request_body(args))
        return client.decode(reply, path), reply.headers.get("Server-Timing", "")
    except TransportError as exc:
        raise EvidenceFailed(f"cannot reach the server at {url}: {exc.detail}") from None
    except ServerError as exc:
        text = exc.error if exc.error is not None else f"HTTP {exc.status}"
        raise EvidenceFailed(f"{text} ({exc.code or exc.status})") from None
    except NotEnvelope:
        raise EvidenceFailed(f"{url} answered with something that is not a taguru response") from None
    except CallError as exc:
        raise EvidenceFailed(exc.message) from None


# ----- rendering -------------------------------------------------------------------------


def _snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _what(item: Mapping[str, Any]) -> str:
    kind = str(item.get("kind", ""))
    payload = item.get(kind)
    if not isinstance(payload, Mapping):
        return ""
    if kind == "association":
        return f"{payload.get('subject', '')} —{payload.get('label', '')}→ {payload.get('object', '')}"
    for key in ("text", "summary", "title", "id"):
        if isinstance(payload.get(key), str):
            return _snippet(payload[key])
    return ""


def item_sources(item: Mapping[str, Any]) -> list[str]:
    """`source ¶paragraph` for the item's own passage, then for each citation it carries."""
    refs: list[Mapping[str, Any]] = []
    payload = item.get(str(item.get("kind", "")))
    if isinstance(payload, Mapping) and isinstance(payload.get("source"), str):
        refs.append(payload)
    refs.extend(r for r in item.get("citation_refs") or [] if isinstance(r, Mapping))
    out: list[str] = []
    for ref in refs:
        label = str(ref.get("source"))
        if ref.get("paragraph") is not None:
            label += f" ¶{ref['paragraph']}"
        if label not in out:
            out.append(label)
    return out


def _lanes(item: Mapping[str, Any]) -> list[str]:
    """One `lane:rank` per lane that found the item; a passage's own lanes (bm25, vector) in brackets."""
    parts = [f"{r.get('lane')}:{r.get('rank')}" for r in item.get("lane_ranks") or [] if isinstance(r, Mapping)]
    payload = item.get(str(item.get("kind", "")))
    lanes = payload.get("lanes") if isinstance(payload, Mapping) else None
    if isinstance(lanes, Mapping):
        inner = " ".join(f"{name}:{v.get('rank')}" for name, v in lanes.items() if isinstance(v, Mapping))
        if inner:
            parts.append(f"({inner})")
    return parts


def server_timings(header: str) -> list[tuple[str, float]]:
    """`name;dur=ms, …` as (name, ms) pairs, in the header's order."""
    out: list[tuple[str, float]] = []
    for entry in header.split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        for p in params:
            key, _, value = p.partition("=")
            if name and key.strip() == "dur":
                try:
                    out.append((name, float(value)))
                except ValueError:
                    pass
    return out


@contextmanager
def console(stream: IO[str]) -> Iterator[Any]:
    """A rich console drawing into memory; the text goes to `stream` in one write at the end.

    Writing ourselves keeps a closed stdout a plain BrokenPipeError (see cli/guard.py) instead of
    rich's own exit; on a terminal the text keeps its styles and the terminal's width.
    """
    from rich.console import Console

    tty = hasattr(stream, "isatty") and stream.isatty()
    buffer = io.StringIO()
    width = shutil.get_terminal_size().columns if tty else PIPE_WIDTH
    yield Console(file=buffer, force_terminal=tty, width=width, highlight=False, soft_wrap=False)
    stream.write(buffer.getvalue())
    stream.flush()


def items_table(items: list[Any], limit: int | None = None) -> Any:
    from rich.table import Table

    table = Table(pad_edge=False, box=None, header_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("what", overflow="fold", max_width=SNIPPET_CHARS)  # the one column that gives way
    table.add_column("sources", no_wrap=True)
    table.add_column("lanes", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    for item in items[:limit]:
        if not isinstance(item, Mapping):
            continue
        table.add_row(
            str(item.get("fused_rank", "")),
            str(item.get("kind", "")),
            _what(item),
            "\n".join(item_sources(item)),
            "\n".join(_lanes(item)),
            str(item.get("bytes", "")),
            str(item.get("estimated_tokens", "")),
        )
    return table


def budget_line(package: Mapping[str, Any]) -> str:
    budget = package.get("budget") or {}
    limits = budget.get("limits") or {}
    return (
        f"budget: {budget.get('items_used')}/{limits.get('max_items')} items, "
        f"{budget.get('bytes_used')}/{limits.get('max_bytes')} bytes, "
        f"{budget.get('tokens_used')}/{limits.get('max_tokens')} tokens"
    )


def omitted_line(package: Mapping[str, Any]) -> str:
    by_reason = package.get("omitted_by_reason") or {}
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(by_reason.items()))
    return f"omitted: {package.get('omitted_total', 0)}" + (f" ({reasons})" if reasons else "")


def stages_line(package: Mapping[str, Any], timing: str) -> str:
    durations = dict(server_timings(timing))
    stages = (package.get("plan") or {}).get("stages") or []
    parts = []
    for stage in stages:
        name = str(stage.get("stage"))
        ms = durations.pop(name, None)
        status = "" if stage.get("status") == "ran" else f" {stage.get('status')}"
        if stage.get("reason"):
            status += f" ({stage['reason']})"
        parts.append(f"{name}{status}" + (f" {ms:.2f}ms" if ms is not None else ""))
    parts += [f"{name} {ms:.2f}ms" for name, ms in durations.items()]
    return "stages: " + ", ".join(parts) if parts else "stages: (not reported)"


def render(package: Mapping[str, Any], timing: str, stream: IO[str]) -> None:
    with console(stream) as out:
        items = package.get("items") or []
        out.print(items_table(items) if items else "no items")
        out.print(omitted_line(package))
        out.print(budget_line(package))
        out.print(stages_line(package, timing))


# ----- the command -----------------------------------------------------------------------


def cmd_evidence(args: argparse.Namespace) -> int:
    try:
        package, timing = fetch(args)
    except EvidenceFailed as exc:
        print(f"taguru evidence: {exc}", file=sys.stderr)
        return exc.code
    if args.json:
        print(json.dumps(package, ensure_ascii=False, indent=2))
    else:
        render(package, timing, sys.stdout)
    return EXIT_OK


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "evidence",
        help="ask a running server for an evidence package and print it as a table",
        description="POST /contexts/CONTEXT/evidence on a running server and print the package readably.",
    )
    p.add_argument("context", metavar="CONTEXT", help="the context to ask")
    p.add_argument("origins", nargs="+", metavar="ORIGIN", help="the concepts (or names) to start from")
    p.add_argument("--labels", nargs="+", metavar="LABEL", default=[], help="association labels to follow")
    p.add_argument("--max-items", type=int, metavar="N", help="budget: at most N items (server default 40)")
    p.add_argument("--max-bytes", type=int, metavar="N", help="budget: at most N bytes (server default 65536)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="budget: at most N estimated tokens")
    p.add_argument("--rerank", action="store_true", help="ask the server's reranker (TAGURU_RERANK_URL) to reorder")
    p.add_argument("--json", action="store_true", help="print the package as JSON instead of a table")
    add_server_options(
        p,
        "the server (default: TAGURU_URL, else http://TAGURU_ADDR, else http://127.0.0.1:8248); "
        "the token comes from TAGURU_API_TOKEN or TAGURU_API_TOKENS",
    )
    p.set_defaults(func=cmd_evidence)
    return p
