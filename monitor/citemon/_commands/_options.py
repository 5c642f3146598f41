"""Options and helpers shared by several subcommands (not a command itself)."""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Final

from citemon._core.errors import InputError
from citemon._core.settings import Flag
from citemon._core.text import CitationSyntax
from citemon._engine.settings import ScoringSettings

__all__ = [
    "ANSWERS_INPUT",
    "add_marker_arguments",
    "add_scoring_arguments",
    "citation_syntax",
    "open_input",
    "scoring_options",
]


ANSWERS_INPUT: Final = Flag(
    "input", "input", "JSONL file of answers, or - for standard input", env=False, positional=True
)
"""The row of ``score``'s and ``selftest``'s input file (a ``str`` field ``input``)."""


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """How claims are checked: ``--policy``, ``--decompose``, ``--marker-pattern``, …"""
    ScoringSettings.add_arguments(parser, title=ScoringSettings.TITLE)


def add_marker_arguments(parser: argparse.ArgumentParser) -> None:
    """``--marker-pattern`` alone, for a command that reads citation markers in answers but
    neither scores them nor resolves their IDs (``calibrate``)."""
    ScoringSettings.add_arguments(parser, title="citation markers", only=("marker_pattern",))


def citation_syntax(args: argparse.Namespace) -> CitationSyntax:
    """``--marker-pattern`` and ``--passage-id-keys``, checked now."""
    return ScoringSettings.from_args(args).syntax


def scoring_options(args: argparse.Namespace) -> ScoringSettings:
    """The scoring settings from the flags (and variables), checked now."""
    return ScoringSettings.from_args(args)


def open_input(path: str) -> AbstractContextManager[IO[str]]:
    """A file of input lines, or standard input for ``-``; a clear error when it is missing."""
    if path == "-":
        return nullcontext(sys.stdin)
    if not Path(path).is_file():
        raise InputError(f"no such file: {path}")
    return open(path, encoding="utf-8")
