"""The offline default judge: a word-overlap heuristic, honest about being one.

It says "entailed" when the passages contain most of the claim's content words, every number the
claim states, and agree with it on negation. It reads no meaning: paraphrase it misses, and a
passage that shares words but says something else can fool it. Its measured agreement with human
labels is in docs/judges.md ("The offline judges, measured"); use an HTTP judge (an LLM) or the
learned judge for numbers you act on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from citemon._core.records import Verdict
from citemon._core.text import negated, number_strings, overlap_words

__all__ = ["LexicalJudge"]


class LexicalJudge:
    """Content-word containment with number and negation agreement.

    ``threshold`` is the share of the claim's content words that must appear in the passages.
    Negation is compared against the passage sentence that best matches the claim, so a "not"
    elsewhere in a long passage does not flip the verdict.
    """

    def __init__(self, *, threshold: float = 0.6) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        self.threshold = threshold

    def __repr__(self) -> str:
        return f"LexicalJudge(threshold={self.threshold})"

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        return self.check(claim, passages)

    def check(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        text = "\n".join(passages.values())
        words = overlap_words(claim)
        if not words:
            return Verdict(entailed=False, reason="claim has no content words", confidence=0.0)
        found = words & overlap_words(text)
        share = len(found) / len(words)
        missing_numbers = number_strings(claim) - number_strings(text)
        if missing_numbers:
            return Verdict(
                entailed=False,
                reason=f"numbers not in passages: {', '.join(sorted(missing_numbers))}",
                confidence=share,
            )
        if share < self.threshold:
            return Verdict(
                entailed=False, reason=f"{share:.0%} of content words found", confidence=share
            )
        best = max(
            re.split(r"(?<=[.!?])\s+", text),
            key=lambda s: len(words & overlap_words(s)),
        )
        if negated(claim) != negated(best):
            return Verdict(entailed=False, reason="negation disagrees", confidence=share)
        return Verdict(
            entailed=True, reason=f"{share:.0%} of content words found", confidence=share
        )
