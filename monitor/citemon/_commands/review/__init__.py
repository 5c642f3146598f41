"""Measure citemon on your own traffic: review sets, a blind review page, Label Studio, agreement.

Subcommands:
  pull       a review set (default 50 answers, by seed) from the review topic or files
  serve      a local review page: one task per cited claim, labels appended as they are given
  export     a review set as Label Studio tasks and labelling config
  import     a Label Studio JSON export as labels
  agreement  Cohen's kappa and the confusion table of two reviewers on one set
"""

from __future__ import annotations

import argparse
from types import ModuleType

from citemon._commands.review import agreement, export, import_, pull, serve

__all__ = ["SUBCOMMANDS", "add_arguments", "main"]

SUBCOMMANDS: dict[str, ModuleType] = {
    "pull": pull,
    "serve": serve,
    "export": export,
    "import": import_,
    "agreement": agreement,
}
"""Subcommand name → its module (one per subcommand, in this package), with
``add_arguments(parser)`` and ``main(args) -> int``; its docstring is its help."""


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
