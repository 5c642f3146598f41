"""Review samples of production traffic: pull a review set, label it, compare with citemon.

Each subcommand lives in its own module of :mod:`citemon.review` that defines
``add_arguments(parser)`` and ``main(args) -> int`` (the same two functions a command module
defines) and a one-line module docstring used as its help; this module finds them, so adding
a subcommand is adding a module (``citemon/review/pull.py`` is ``citemon review pull``).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from types import ModuleType

from citemon import review

__all__ = ["add_arguments", "main", "subcommands"]


def subcommands() -> dict[str, ModuleType]:
    """Subcommand name → module, for every module of :mod:`citemon.review` that defines
    ``add_arguments`` and ``main`` (``review/foo_bar.py`` is ``foo-bar``)."""
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(review.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"citemon.review.{info.name}")
        if callable(getattr(module, "add_arguments", None)) and callable(
            getattr(module, "main", None)
        ):
            found[info.name.replace("_", "-")] = module
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="review_command", required=True, metavar="SUBCOMMAND")
    for name, module in subcommands().items():
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
