"""A `taguru` subcommand whose arguments its own hand-written parser reads (its exact usage texts), not argparse."""

from __future__ import annotations

import argparse
from typing import Any


class Passthrough(argparse.ArgumentParser):
    """A subparser that hands every following argument, verbatim, to the command as `args.argv`."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns = argparse.Namespace() if namespace is None else namespace
        for key, value in self._defaults.items():
            setattr(ns, key, value)
        ns.argv = list(args or [])
        return ns, []


def add_passthrough(subparsers: Any, name: str, summary: str, func: Any) -> argparse.ArgumentParser:
    """Register `name` on the `taguru` command's subparsers, its arguments left to `func(args)` (`args.argv`)."""
    p = subparsers.add_parser(name, add_help=False, help=summary)
    p.__class__ = Passthrough
    p.set_defaults(func=func)
    return p
