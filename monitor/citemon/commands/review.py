"""Measure citemon on your own traffic: pull a review set for people to label.

Subcommands (DESIGN.md, "Measuring the instrument on production traffic"):
  pull       a review set (default 50 answers, by seed) from the review topic or files
"""

from __future__ import annotations

import argparse
from types import ModuleType

from citemon.commands import _review_pull

__all__ = ["SUBCOMMANDS", "add_arguments", "main"]

SUBCOMMANDS: dict[str, ModuleType] = {
    "pull": _review_pull,
}
"""Subcommand name → module with ``add_arguments(parser)`` and ``main(args) -> int``."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="review_command", required=True, metavar="SUBCOMMAND")
    for name, module in SUBCOMMANDS.items():
        doc = (module.__doc__ or "").strip()
        command = sub.add_parser(
            name,
            help=doc.splitlines()[0] if doc else None,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(review_handler=module.main)


def main(args: argparse.Namespace) -> int:
    return int(args.review_handler(args))
