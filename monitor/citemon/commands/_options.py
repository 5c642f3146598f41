"""Options and helpers shared by several subcommands (not a command itself)."""

from __future__ import annotations

import argparse
import re
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, ClassVar, Literal

from pydantic import Field

from citemon.core.errors import ConfigError, InputError
from citemon.core.settings import Flag, FlagSettings, whole_at_least_0
from citemon.core.text import DEFAULT_MARKER_PATTERN, DEFAULT_PASSAGE_ID_KEYS, CitationSyntax
from citemon.engine.scoring import DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER, ScoringOptions

__all__ = [
    "ScoringSettings",
    "add_marker_arguments",
    "add_scoring_arguments",
    "citation_syntax",
    "open_input",
    "scoring_options",
]


class ScoringSettings(FlagSettings):
    """How claims are checked (``score`` and ``run``). Field ``x`` ⇔ env ``CITEMON_X``."""

    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--policy",
            "policy",
            "any_of: the union of cited passages must entail (default); "
            "single: exactly one cited passage, which entails",
            choices=("any_of", "single"),
        ),
        Flag(
            "--decompose",
            "decompose",
            "a sentence is a claim (default), or the judge splits sentences",
            choices=("sentence", "llm"),
        ),
        Flag(
            "--marker-pattern",
            "marker_pattern",
            "regex for citation markers; group 1 holds the IDs",
        ),
        Flag(
            "--passage-id-keys",
            "passage_id_keys",
            "metadata keys holding the ID a citation names when no document has it as its ID, "
            f"comma-separated (default {','.join(DEFAULT_PASSAGE_ID_KEYS)}; empty: none)",
        ),
        Flag(
            "--overlap-tokens",
            "overlap_tokens",
            "shared run of tokens that flags a chunk-overlap misattribution (default 12)",
            int,
        ),
        Flag(
            "--max-judge-calls-per-answer",
            "max_judge_calls_per_answer",
            "judge calls per answer past which the misattribution search is cut, least "
            f"likely passages first (default {DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER}; 0: no bound)",
            whole_at_least_0,
        ),
    )

    policy: Literal["any_of", "single"] = "any_of"
    """``CITEMON_POLICY``."""
    decompose: Literal["sentence", "llm"] = "sentence"
    """``CITEMON_DECOMPOSE``."""
    marker_pattern: str = DEFAULT_MARKER_PATTERN
    """``CITEMON_MARKER_PATTERN``."""
    passage_id_keys: str = ",".join(DEFAULT_PASSAGE_ID_KEYS)
    """``CITEMON_PASSAGE_ID_KEYS``: comma-separated; empty means no metadata look-up."""
    overlap_tokens: int = 12
    """``CITEMON_OVERLAP_TOKENS`` (checked by :func:`scoring_options`: at least 1)."""
    max_judge_calls_per_answer: int = Field(DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER, ge=0)
    """``CITEMON_MAX_JUDGE_CALLS_PER_ANSWER``."""


def _keys(value: str) -> tuple[str, ...]:
    """``--passage-id-keys``: comma-separated metadata keys, blanks dropped."""
    return tuple(k.strip() for k in value.split(",") if k.strip())


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """How claims are checked: ``--policy``, ``--decompose``, ``--marker-pattern``, …"""
    ScoringSettings.add_arguments(parser, title="scoring")


def add_marker_arguments(parser: argparse.ArgumentParser) -> None:
    """``--marker-pattern`` alone, for a command that reads citation markers in answers but
    neither scores them nor resolves their IDs (``calibrate``)."""
    ScoringSettings.add_arguments(parser, title="citation markers", only=("marker_pattern",))


def citation_syntax(args: argparse.Namespace) -> CitationSyntax:
    """``--marker-pattern`` and ``--passage-id-keys``, checked now: a bad pattern would
    otherwise surface as a traceback on the first answer."""
    return _syntax(ScoringSettings.from_args(args))


def scoring_options(args: argparse.Namespace) -> ScoringOptions:
    """The scoring flags, checked now (:func:`citation_syntax`; ``--overlap-tokens`` below 1
    flags every pair)."""
    given = ScoringSettings.from_args(args)
    if given.overlap_tokens < 1:
        raise ConfigError(f"--overlap-tokens must be at least 1, not {given.overlap_tokens}")
    return ScoringOptions(
        policy=given.policy,
        decompose=given.decompose,
        overlap_tokens=given.overlap_tokens,
        syntax=_syntax(given),
        max_judge_calls_per_answer=given.max_judge_calls_per_answer,
    )


def _syntax(given: ScoringSettings) -> CitationSyntax:
    syntax = CitationSyntax(given.marker_pattern, passage_id_keys=_keys(given.passage_id_keys))
    try:
        groups = syntax.regex.groups
        syntax.leading  # noqa: B018 - compiled here so that it fails here
    except re.error as exc:
        raise ConfigError(f"--marker-pattern is not a valid regex: {exc}") from None
    if groups < 1:
        raise ConfigError("--marker-pattern needs a capturing group: group 1 holds the IDs")
    return syntax


def open_input(path: str) -> AbstractContextManager[IO[str]]:
    """A file of input lines, or standard input for ``-``; a clear error when it is missing."""
    if path == "-":
        return nullcontext(sys.stdin)
    if not Path(path).is_file():
        raise InputError(f"no such file: {path}")
    return open(path, encoding="utf-8")
