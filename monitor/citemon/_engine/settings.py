"""How claims are checked, as settings: :class:`ScoringSettings`, its flags and their checks.

Shared by ``score`` and ``run`` (where it is the ``scoring`` part of the service's settings),
and what the :class:`~citemon._engine.scoring.Scorer` itself takes: the one statement of each
setting and its default. Every check is in the model, so a bad ``--marker-pattern`` or
``--overlap-tokens`` is a usage error naming the flag before anything starts, not a traceback on
the first answer.
"""

from __future__ import annotations

import re
from typing import ClassVar, Final, Literal

from pydantic import Field, field_validator

from citemon._core.settings import Flag, FlagSettings, whole_at_least_0
from citemon._core.text import DEFAULT_MARKER_PATTERN, DEFAULT_PASSAGE_ID_KEYS, CitationSyntax

__all__ = ["DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER", "SCORING_FLAGS", "Policy", "ScoringSettings"]

DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER: Final = 100
"""``--max-judge-calls-per-answer`` / ``CITEMON_MAX_JUDGE_CALLS_PER_ANSWER``, in judge calls."""

Policy = Literal["any_of", "single"]
"""``--policy``: what a citation set must do for a claim to be ``correct``."""

SCORING_FLAGS: tuple[Flag, ...] = (
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
"""The scoring flags (``args.policy``, ``args.marker_pattern``…)."""


class ScoringSettings(FlagSettings):
    """How claims are checked (``score`` and ``run``). Field ``x`` ⇔ env ``CITEMON_X``."""

    FLAGS: ClassVar[tuple[Flag, ...]] = SCORING_FLAGS
    TITLE: ClassVar[str] = "scoring"

    policy: Policy = "any_of"
    """``CITEMON_POLICY``."""
    decompose: Literal["sentence", "llm"] = "sentence"
    """``CITEMON_DECOMPOSE``."""
    marker_pattern: str = DEFAULT_MARKER_PATTERN
    """``CITEMON_MARKER_PATTERN``: a regex whose group 1 holds the IDs."""
    passage_id_keys: str = ",".join(DEFAULT_PASSAGE_ID_KEYS)
    """``CITEMON_PASSAGE_ID_KEYS``: comma-separated; empty means no metadata look-up."""
    overlap_tokens: int = 12
    """``CITEMON_OVERLAP_TOKENS``: at least 1 (below, every pair would be flagged)."""
    max_judge_calls_per_answer: int = Field(DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER, ge=0)
    """``CITEMON_MAX_JUDGE_CALLS_PER_ANSWER``."""

    @field_validator("marker_pattern")
    @classmethod
    def _a_regex_with_a_group(cls, value: str) -> str:
        syntax = CitationSyntax(value)
        try:
            groups = syntax.regex.groups
            syntax.leading  # noqa: B018 - compiled here so that it fails here
        except re.error as exc:
            raise ValueError(f"--marker-pattern is not a valid regex: {exc}") from None
        if groups < 1:
            raise ValueError("--marker-pattern needs a capturing group: group 1 holds the IDs")
        return value

    @field_validator("overlap_tokens")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"--overlap-tokens must be at least 1, not {value}")
        return value

    @property
    def syntax(self) -> CitationSyntax:
        """The citation markers and the metadata keys their IDs are looked up under."""
        keys = tuple(k.strip() for k in self.passage_id_keys.split(",") if k.strip())
        return CitationSyntax(self.marker_pattern, passage_id_keys=keys)

    @classmethod
    def defaults(cls) -> ScoringSettings:
        """The defaults, whatever the environment holds: a :class:`Scorer
        <citemon._engine.scoring.Scorer>` built without settings in library code is not
        configured by ``CITEMON_*`` variables behind its caller's back."""
        return cls.model_construct()
