"""Options and helpers shared by several subcommands (not a command itself)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO

from citemon.core.errors import ConfigError, InputError
from citemon.engine.claims import DEFAULT_MARKER_PATTERN, DEFAULT_PASSAGE_ID_KEYS, CitationSyntax
from citemon.engine.scoring import DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER, ScoringOptions

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
        "--passage-id-keys",
        type=_keys,
        default=os.environ.get("CITEMON_PASSAGE_ID_KEYS", ",".join(DEFAULT_PASSAGE_ID_KEYS)),
        help="metadata keys holding the ID a citation names when no document has it as its ID, "
        f"comma-separated (default {','.join(DEFAULT_PASSAGE_ID_KEYS)}; empty: none) "
        "[env CITEMON_PASSAGE_ID_KEYS]",
    )
    parser.add_argument(
        "--overlap-tokens",
        type=int,
        default=12,
        help="shared run of tokens that flags a chunk-overlap misattribution",
    )
    parser.add_argument(
        "--max-judge-calls-per-answer",
        type=_whole("CITEMON_MAX_JUDGE_CALLS_PER_ANSWER"),
        default=os.environ.get(
            "CITEMON_MAX_JUDGE_CALLS_PER_ANSWER", str(DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER)
        ),
        help="judge calls per answer past which the misattribution search is cut, least "
        f"likely passages first (default {DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER}; 0: no bound) "
        "[env CITEMON_MAX_JUDGE_CALLS_PER_ANSWER]",
    )


def _keys(value: str) -> tuple[str, ...]:
    """``--passage-id-keys``: comma-separated metadata keys, blanks dropped."""
    return tuple(k.strip() for k in value.split(",") if k.strip())


def _whole(env_var: str) -> Callable[[str], int]:
    """An argparse ``type``: a whole number >= 0, whose error names the env var too."""

    def convert(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = -1
        if number < 0:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a whole number >= 0 (from the flag or {env_var})"
            )
        return number

    return convert


def scoring_options(args: argparse.Namespace) -> ScoringOptions:
    """The scoring flags, checked now: a bad ``--marker-pattern`` would otherwise surface as a
    traceback on the first answer, and ``--overlap-tokens`` below 1 flags every pair."""
    if args.overlap_tokens < 1:
        raise ConfigError(f"--overlap-tokens must be at least 1, not {args.overlap_tokens}")
    keys = args.passage_id_keys
    syntax = CitationSyntax(
        args.marker_pattern, passage_id_keys=_keys(keys) if isinstance(keys, str) else keys
    )
    try:
        groups = syntax.regex.groups
        syntax.leading  # noqa: B018 - compiled here so that it fails here
    except re.error as exc:
        raise ConfigError(f"--marker-pattern is not a valid regex: {exc}") from None
    if groups < 1:
        raise ConfigError("--marker-pattern needs a capturing group: group 1 holds the IDs")
    return ScoringOptions(
        policy=args.policy,
        decompose=args.decompose,
        overlap_tokens=args.overlap_tokens,
        syntax=syntax,
        max_judge_calls_per_answer=args.max_judge_calls_per_answer,
    )


def open_input(path: str) -> AbstractContextManager[IO[str]]:
    """A file of input lines, or standard input for ``-``; a clear error when it is missing."""
    if path == "-":
        return nullcontext(sys.stdin)
    if not Path(path).is_file():
        raise InputError(f"no such file: {path}")
    return open(path, encoding="utf-8")
