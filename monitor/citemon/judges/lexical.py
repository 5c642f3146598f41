"""The offline default judge: a word-overlap heuristic, honest about being one.

It says "entailed" when the passages contain most of the claim's content words, every number the
claim states, and agree with it on negation. It reads no meaning: paraphrase it misses, and a
passage that shares words but says something else can fool it. Its measured agreement with human
labels is in the README; use an HTTP judge (an LLM) or the learned judge for numbers you act on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from citemon.engine.records import Verdict

__all__ = ["LexicalJudge", "content_words"]

_WORD = re.compile(r"[a-z0-9]+(?:[.,'][a-z0-9]+)*")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATION = frozenset(
    [
        "not",
        "no",
        "never",
        "cannot",
        "cant",
        "can't",
        "won't",
        "wont",
        "don't",
        "dont",
        "doesn't",
        "doesnt",
        "isn't",
        "isnt",
        "aren't",
        "arent",
        "without",
        "nor",
        "none",
        "unable",
        "impossible",
    ]
)
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "than",
        "that",
        "this",
        "these",
        "those",
        "there",
        "their",
        "they",
        "them",
        "it",
        "its",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "done",
        "has",
        "have",
        "had",
        "having",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "from",
        "with",
        "as",
        "into",
        "onto",
        "about",
        "over",
        "under",
        "between",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "up",
        "down",
        "out",
        "off",
        "again",
        "further",
        "once",
        "here",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "only",
        "own",
        "same",
        "so",
        "too",
        "very",
        "can",
        "will",
        "just",
        "should",
        "could",
        "would",
        "may",
        "might",
        "must",
        "shall",
        "also",
        "we",
        "you",
        "your",
        "yours",
        "our",
        "ours",
        "he",
        "she",
        "his",
        "her",
        "him",
        "i",
        "me",
        "my",
        "which",
        "who",
        "whom",
        "what",
        "while",
        "because",
        "until",
        "against",
        "per",
        "via",
        "within",
        "upon",
    ]
)


def _stem(word: str) -> str:
    """A crude stemmer: enough to match "logs"/"log" and "extended"/"extensions" by prefix."""
    for suffix in ("ingly", "edly", "ations", "ation", "ments", "ment", "ings", "ing", "ies",
                   "ied", "ed", "es", "s"):  # fmt: skip
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:6]


def content_words(text: str) -> set[str]:
    """Stemmed words that carry content (stopwords and negations removed)."""
    return {
        _stem(w)
        for w in _WORD.findall(text.lower())
        if w not in _STOPWORDS and w not in _NEGATION and not _NUMBER.fullmatch(w)
    }


def _negated(text: str) -> bool:
    lowered = text.lower().replace("’", "'")
    return any(w in _NEGATION for w in re.findall(r"[a-z']+", lowered)) or "n't" in lowered


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


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
        words = content_words(claim)
        if not words:
            return Verdict(entailed=False, reason="claim has no content words", confidence=0.0)
        found = words & content_words(text)
        share = len(found) / len(words)
        missing_numbers = _numbers(claim) - _numbers(text)
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
            key=lambda s: len(words & content_words(s)),
        )
        if _negated(claim) != _negated(best):
            return Verdict(entailed=False, reason="negation disagrees", confidence=share)
        return Verdict(
            entailed=True, reason=f"{share:.0%} of content words found", confidence=share
        )
