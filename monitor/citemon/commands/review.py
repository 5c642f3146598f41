"""Measure citemon on your own traffic: review sets, a blind review page, Label Studio, agreement.

Subcommands (docs/design.md, "Review loop and estimates"):
  pull       a review set (default 50 answers, by seed) from the review topic or files
  serve      a local review page: one task per cited claim, labels appended as they are given
  export     a review set as Label Studio tasks and labelling config
  import     a Label Studio JSON export as labels
  agreement  Cohen's kappa and the confusion table of two reviewers on one set
"""

from __future__ import annotations

import argparse
from types import ModuleType

from citemon.commands import (
    _review_agreement,
    _review_export,
    _review_import,
    _review_pull,
    _review_serve,
)

__all__ = ["SUBCOMMANDS", "add_arguments", "main"]

SUBCOMMANDS: dict[str, ModuleType] = {
    "pull": _review_pull,
    "serve": _review_serve,
    "export": _review_export,
    "import": _review_import,
    "agreement": _review_agreement,
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
