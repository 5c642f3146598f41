"""Options and helpers shared by several subcommands (not a command itself)."""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO

from monitor.claims import DEFAULT_MARKER_PATTERN, CitationSyntax
from monitor.errors import InputError
from monitor.scoring import ScoringOptions

__all__ = ["add_scoring_arguments", "open_input", "scoring_options"]


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """How claims are checked: ``--policy``, ``--decompose``, ``--marker-pattern``, …"""
    parser.add_argument(
        "--policy",
        choices=("any_of", "single"),
        default="any_of",
        help="any_of: the union of cited passages must entail (default); "
        "single: exactly one cited passage, which entails",
    )
    parser.add_argument(
        "--decompose",
        choices=("sentence", "llm"),
        default="sentence",
        help="a sentence is a claim (default), or the judge splits sentences",
    )
    parser.add_argument(
        "--marker-pattern",
        default=DEFAULT_MARKER_PATTERN,
        help="regex for citation markers; group 1 holds the IDs",
    )
    parser.add_argument(
        "--overlap-tokens",
        type=int,
        default=12,
        help="shared run of tokens that flags a chunk-overlap misattribution",
    )


def scoring_options(args: argparse.Namespace) -> ScoringOptions:
    return ScoringOptions(
        policy=args.policy,
        decompose=args.decompose,
        overlap_tokens=args.overlap_tokens,
        syntax=CitationSyntax(args.marker_pattern),
    )


def open_input(path: str) -> AbstractContextManager[IO[str]]:
    """A file of input lines, or standard input for ``-``; a clear error when it is missing."""
    if path == "-":
        return nullcontext(sys.stdin)
    if not Path(path).is_file():
        raise InputError(f"no such file: {path}")
    return open(path, encoding="utf-8")
