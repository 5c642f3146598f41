"""The text toolkit: citation markers, tokens, stems, stopwords and content words.

Pure functions over strings, shared by the scorer, the judges and the judge checks; nothing of
citemon imported.

* **Citation markers** follow the configured :class:`CitationSyntax` (``--marker-pattern``):
  :func:`strip_markers` turns a cited sentence into its claim. Everything that reads a claim
  (the claim splitter, the label readers) strips markers with it.
* **Two vocabularies**, one per offline judge, because each is part of a measured model:
  the learned judge's (:func:`tokens`, :func:`stem`, :func:`content_words`, :data:`STOPWORDS`,
  :data:`NEGATIONS`, :data:`MODALS`; its shipped weights were fitted on exactly these) and the
  lexical judge's word overlap (:func:`overlap_words`, :func:`overlap_stem`,
  :data:`OVERLAP_STOPWORDS`, :data:`OVERLAP_NEGATIONS`; a 6-letter prefix match). Making the
  lexical judge use the learned judge's stemmer and stopwords changes its verdict on 19 of 2,034
  labelled and example pairs (measured when they were brought together here), so each judge
  keeps its own, side by side, and ``tests/unit/test_text.py`` pins both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "DEFAULT_MARKER_PATTERN",
    "DEFAULT_PASSAGE_ID_KEYS",
    "DEFAULT_SYNTAX",
    "MODALS",
    "NEGATIONS",
    "OVERLAP_NEGATIONS",
    "OVERLAP_STOPWORDS",
    "STOPWORDS",
    "CitationSyntax",
    "content_words",
    "negated",
    "number_strings",
    "numbers",
    "overlap_stem",
    "overlap_words",
    "sentences",
    "stem",
    "strip_markers",
    "tokens",
]

# ---------------------------------------------------------------------------------------------
# Citation markers

_ID = r"[A-Za-z][A-Za-z_]*-?\d[\w.-]*|\d+"
DEFAULT_MARKER_PATTERN = rf"\[\s*((?:{_ID})(?:\s*[,;]\s*(?:{_ID}))*)\s*\]"
"""``[p-3310]``, ``[1]``, ``[1, 2]``, ``[doc3]``; ``[1][2]`` is two markers. Group 1: the IDs."""

_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,;:!?])")


DEFAULT_PASSAGE_ID_KEYS: tuple[str, ...] = (
    "passage_id",
    "doc_id",
    "document_id",
    "source_id",
    "ref_doc_id",
)
"""``--passage-id-keys``: metadata keys under which a document carries the ID the application
showed its model (docs/design.md, "Passage identity")."""


@dataclass(frozen=True, slots=True)
class CitationSyntax:
    """How citation markers look; group 1 of ``pattern`` holds one or more IDs (``,``/``;``)."""

    pattern: str = DEFAULT_MARKER_PATTERN
    passage_id_keys: tuple[str, ...] = DEFAULT_PASSAGE_ID_KEYS
    """Metadata keys a marker is looked up under when no document has it as its ID."""

    @property
    def regex(self) -> re.Pattern[str]:
        return _compile(self.pattern)

    @property
    def leading(self) -> re.Pattern[str]:
        return _compile(rf"^\s*(?:(?:{self.pattern})\s*)+")


DEFAULT_SYNTAX = CitationSyntax()
"""The default marker syntax (``--marker-pattern`` unset)."""


@lru_cache(maxsize=32)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def strip_markers(sentence: str, syntax: CitationSyntax = DEFAULT_SYNTAX) -> str:
    """The sentence as a claim: markers removed, spacing tidied."""
    text = syntax.regex.sub(" ", sentence)
    return _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACE.sub(" ", text)).strip()


# ---------------------------------------------------------------------------------------------
# The learned judge's vocabulary (its shipped weights were fitted on exactly these)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Function words that carry no content for alignment. Negations and modals are *not* here:
# they are features of their own.
STOPWORDS = _words(
    """a an the and or but if then else of to in on at by for with from as into onto over under
    about above below between through during before after up down out off again further once
    is are was were be been being am has have had having do does did doing this that these
    those it its it's they them their theirs he him his she her hers we us our ours you your
    yours i me my mine which who whom whose what when where why how there here also such so
    than too very just only both each few more most other some any all same own s t ll re ve d
    m o y can't won't while because until although though however thus therefore hence
    one ones via per etc e g ie eg"""
)
NEGATIONS = _words(
    """not no never none nobody nothing neither nor without cannot can't don't doesn't didn't
    isn't aren't wasn't weren't won't wouldn't shouldn't couldn't hasn't haven't hadn't lack
    lacks lacking fail fails failed unable"""
)
MODALS = _words(
    """may might could can would should possibly perhaps likely unlikely probably potentially
    suggest suggests suggested appear appears seem seems believed thought estimated
    approximately about around roughly"""
)

_TOKEN = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+(?:[.,]\d+)*%?")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+|\s#+\s")
_BRACKETED = re.compile(r"\[\s*[\w\-]+(?:\s*,\s*[\w\-]+)*\s*\]")
"""Any bracketed word list (``[1]``, ``[edit]``, ``[a, b]``). Not the citation syntax: the
claim reaches a judge with its markers already stripped; this tidies *passage* text (web pages'
``[edit]``, footnote marks) the way the learned judge's training data was tidied."""


def tokens(text: str) -> list[str]:
    """Word and number tokens, original case, bracketed tags removed."""
    return _TOKEN.findall(_BRACKETED.sub(" ", text))


def stem(word: str) -> str:
    """A crude, deterministic suffix stripper: enough to match "children"/"child" style pairs
    that matter for containment, without a stemming package."""
    w = word.lower().strip("'-")
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) <= 3 or w[0].isdigit():
        return w
    for suffix, repl in (
        ("ies", "y"),
        ("ied", "y"),
        ("ing", ""),
        ("edly", ""),
        ("ed", ""),
        ("ly", ""),
        ("es", ""),
        ("s", ""),
    ):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + repl
            break
    if w.endswith("ren") and len(w) > 5:  # children -> child
        w = w[:-3]
    return w


def content_words(toks: Iterable[str]) -> list[str]:
    """Stemmed tokens minus stopwords, negations and modals (order kept, repeats kept)."""
    out = []
    for t in toks:
        low = t.lower()
        if low in STOPWORDS or low in NEGATIONS or low in MODALS:
            continue
        if len(low) == 1 and not low.isdigit():
            continue
        out.append(stem(low))
    return out


def sentences(text: str) -> list[str]:
    """Split passage text into sentences with a regex: pysbd is too slow for 100 kB web pages,
    and a missed split only makes a window a little larger."""
    return [s for s in (part.strip() for part in _SENTENCE_END.split(text)) if s]


def numbers(toks: Iterable[str]) -> set[str]:
    """The numbers among ``toks`` (a trailing ``%`` and thousands commas dropped)."""
    out = set()
    for t in toks:
        if _NUMBER.fullmatch(t.rstrip("%")):
            out.add(t.rstrip("%").replace(",", ""))
    return out


# ---------------------------------------------------------------------------------------------
# The lexical judge's vocabulary (word overlap on 6-letter prefix stems)

_WORD = re.compile(r"[a-z0-9]+(?:[.,'][a-z0-9]+)*")
OVERLAP_STOPWORDS = _words(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does done down during each few
    for from further had has have having he her here him his how i if in into is it its just
    may me might more most must my of off on once only onto or other our ours out over own
    per same shall she should so some such than that the their them then there these they
    this those through to too under until up upon very via was we were what when where which
    while who whom why will with within would you your yours"""
)
OVERLAP_NEGATIONS = _words(
    """aren't arent can't cannot cant doesn't doesnt don't dont impossible isn't isnt never no
    none nor not unable without won't wont"""
)


def overlap_stem(word: str) -> str:
    """A crude stemmer: enough to match "logs"/"log" and "extended"/"extensions" by prefix."""
    for suffix in ("ingly", "edly", "ations", "ation", "ments", "ment", "ings", "ing", "ies",
                   "ied", "ed", "es", "s"):  # fmt: skip
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:6]


def overlap_words(text: str) -> set[str]:
    """The lexical judge's content words: prefix stems, stopwords, negations and numbers out."""
    return {
        overlap_stem(w)
        for w in _WORD.findall(text.lower())
        if w not in OVERLAP_STOPWORDS and w not in OVERLAP_NEGATIONS and not _NUMBER.fullmatch(w)
    }


def negated(text: str) -> bool:
    """Whether ``text`` says no, not, never, … (the lexical judge's negation test)."""
    lowered = text.lower().replace("’", "'")
    return any(w in OVERLAP_NEGATIONS for w in re.findall(r"[a-z']+", lowered)) or "n't" in lowered


def number_strings(text: str) -> set[str]:
    """Every number written in ``text``, thousands commas dropped."""
    return {n.replace(",", "") for n in _NUMBER.findall(text)}
