"""`taguru evaluate` / `taguru evaluate compare`: the hand-rolled command line (docs/evaluate.md)."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import Any, TextIO

from taguru_server.cli.environ import command_environment
from taguru_server.evaluate.compare import run_compare
from taguru_server.evaluate.runner import EXIT_OK, EXIT_USAGE, RunArgs, run
from taguru_server.server.variables import process_environment

USAGE = """\
usage: taguru evaluate --eval FILE --context NAME [options]
       taguru evaluate compare BASE.json HEAD.json [--out FILE]

Score one context's retrieval quality on a labeled eval.jsonl over HTTP (read-only endpoints).

run mode:
  --eval FILE          labeled cases (taguru_eval 1 JSONL)                       (required)
  --context NAME       the context to evaluate                                    (required)
  --url URL            server base URL (default $TAGURU_URL, else http://$TAGURU_ADDR);
                       the bearer token comes from $TAGURU_API_TOKEN (or $TAGURU_API_TOKENS)
  --config FILE        KEY=VALUE env file (default $TAGURU_CONFIG); the real environment wins
  --out FILE           the evaluation artifact (default evaluation.json); an HTML report is
                       written beside it (FILE with .html)
  --thresholds FILE    gate file (taguru_evaluate_thresholds 1); violations exit 3
  --assembly           use POST /contexts/{name}/evidence instead of sources/search
  --max-items N        budget ceilings, applied to both modes: --assembly sends them as the
  --max-bytes N        request's budget, the baseline truncates its hits client-side with the
  --max-tokens N       server's own accounting (defaults 40 / 65536 / 4000)
  --rerank MODEL       ask the server's configured reranker (requires --assembly)

compare mode:
  BASE.json HEAD.json  two evaluation artifacts; per-case changes and aggregate deltas
  --out FILE           changes (default changes.jsonl); an HTML report is written beside it

On a terminal, a progress bar (cases done, rate, time left) is drawn on stderr.

exit codes: 0 completed, 1 the run could not complete, 2 usage or input error,
            3 --thresholds violated (the artifact is still written)
"""

_VALUE_FLAGS = {
    "--eval": "--eval needs a file path",
    "--context": "--context needs a name",
    "--url": "--url needs a value",
    "--config": "--config needs a file path",
    "--out": "--out needs a file path",
    "--thresholds": "--thresholds needs a file path",
    "--rerank": "--rerank needs a model name",
    "--max-items": "--max-items needs a positive integer",
    "--max-bytes": "--max-bytes needs a positive integer",
    "--max-tokens": "--max-tokens needs a positive integer",
}
_MAX_FLAGS = ("--max-items", "--max-bytes", "--max-tokens")
_POSITIVE = re.compile(r"^\+?[0-9]+$")
MAX_U64 = 2**64 - 1


class Usage(Exception):
    pass


class Help(Exception):
    pass


def _positive(flag: str, value: str) -> int:
    if not _POSITIVE.match(value):
        raise Usage(_VALUE_FLAGS[flag])
    n = int(value.lstrip("+"))
    if n < 1 or n > MAX_U64:
        raise Usage(_VALUE_FLAGS[flag])
    return n


def parse_run(argv: list[str]) -> RunArgs:
    values: dict[str, Any] = {}
    assembly = False
    seen: set[str] = set()
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--help", "-h"):
            raise Help
        if a in _VALUE_FLAGS:
            if a in _MAX_FLAGS:
                if a in seen:
                    raise Usage(f"{a} given twice")
                seen.add(a)
            if i + 1 >= len(argv):
                raise Usage(_VALUE_FLAGS[a])
            value = argv[i + 1]
            i += 2
            values[a] = _positive(a, value) if a in _MAX_FLAGS else value
            continue
        if a == "--assembly":
            assembly = True
            i += 1
            continue
        if a.startswith("-") and a != "-":
            raise Usage(f"unknown flag '{a}' for evaluate")
        raise Usage("evaluate takes no positional arguments")
    if "--eval" not in values:
        raise Usage("--eval FILE is required")
    if "--context" not in values:
        raise Usage("--context NAME is required")
    if "--rerank" in values and not assembly:
        raise Usage("--rerank requires --assembly")
    return RunArgs(
        eval=values["--eval"],
        context=values["--context"],
        url=values.get("--url"),
        config=values.get("--config"),
        out=values.get("--out", "evaluation.json"),
        thresholds=values.get("--thresholds"),
        assembly=assembly,
        max_items=values.get("--max-items"),
        max_bytes=values.get("--max-bytes"),
        max_tokens=values.get("--max-tokens"),
        rerank=values.get("--rerank"),
    )


def parse_compare(argv: list[str]) -> tuple[str, str, str]:
    out: str | None = None
    positionals: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--help", "-h"):
            raise Help
        if a == "--out":
            if out is not None:
                raise Usage("--out given twice")
            if i + 1 >= len(argv):
                raise Usage("--out needs a file path")
            out = argv[i + 1]
            i += 2
            continue
        if a.startswith("--"):
            raise Usage(f"unknown flag '{a}' for evaluate compare")
        positionals.append(a)
        i += 1
    if len(positionals) != 2:
        raise Usage(
            f"evaluate compare takes exactly two positional arguments, BASE.json and HEAD.json (got {len(positionals)})"
        )
    return positionals[0], positionals[1], out or "changes.jsonl"


def _usage_error(msg: str, err: TextIO) -> int:
    print(f"taguru: evaluate: {msg} — try 'taguru evaluate --help'", file=err, flush=True)
    return EXIT_USAGE


async def main_async(
    argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None, env: dict[str, str] | None = None
) -> int:
    """The whole command (argv after `evaluate`); usable from a running event loop."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    if not argv:
        return _usage_error("expected --eval FILE --context NAME", err)
    head = argv[0]
    try:
        if head in ("--help", "-h"):
            raise Help
        if head == "compare":
            base, head_path, out_path = parse_compare(argv[1:])
            return run_compare(base, head_path, out_path, out, err)
        if head.startswith("-"):
            return await run(parse_run(argv), out, err, process_environment() if env is None else env)
        return _usage_error(
            f"unknown subcommand '{head}' — the default mode is selected by a leading flag, e.g. "
            "'taguru evaluate --eval FILE --context NAME', or use the 'compare' subcommand",
            err,
        )
    except Help:
        print(USAGE, end="", file=out, flush=True)
        return EXIT_OK
    except Usage as exc:
        return _usage_error(str(exc), err)


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(list(sys.argv[1:] if argv is None else argv)))


class _Passthrough(argparse.ArgumentParser):
    """The `evaluate` subparser hands every following argument, verbatim, to the hand-rolled parser."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns = argparse.Namespace() if namespace is None else namespace
        for key, value in self._defaults.items():
            setattr(ns, key, value)
        ns.evaluate_argv = list(args or [])
        return ns, []


def _cmd(args: argparse.Namespace) -> int:
    return asyncio.run(main_async(args.evaluate_argv, env=command_environment(args)))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `evaluate` on the `taguru` command's subparsers."""
    p = subparsers.add_parser(
        "evaluate", add_help=False, help="score retrieval quality on a labeled eval.jsonl (and compare two runs)"
    )
    p.__class__ = _Passthrough
    p.set_defaults(func=_cmd)
    return p


if __name__ == "__main__":
    sys.exit(main())
