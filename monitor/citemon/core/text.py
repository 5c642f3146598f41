"""Text utilities shared by the scorer and the judges: words, stems, stopwords, negation, numbers.

Pure functions over strings; no citemon imports.
"""

from __future__ import annotations

import re

__all__ = [
    "NEGATIONS",
    "NUMBER",
    "STOPWORDS",
    "WORD",
    "content_words",
    "negated",
    "numbers",
    "stem",
]

WORD = re.compile(r"[a-z0-9]+(?:[.,'][a-z0-9]+)*")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
NEGATIONS = frozenset(
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
STOPWORDS = frozenset(
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


def stem(word: str) -> str:
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
        stem(w)
        for w in WORD.findall(text.lower())
        if w not in STOPWORDS and w not in NEGATIONS and not NUMBER.fullmatch(w)
    }


def negated(text: str) -> bool:
    lowered = text.lower().replace("’", "'")
    return any(w in NEGATIONS for w in re.findall(r"[a-z']+", lowered)) or "n't" in lowered


def numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in NUMBER.findall(text)}
