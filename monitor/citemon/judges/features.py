"""Alignment features between a claim and the passages it cites, for the learned judge.

Pure functions over text, no I/O and no third-party packages: the learned judge must run on a
bare install, and ``scripts/train_judge.py`` must compute exactly the same numbers at training
time as the judge does at run time (both import :func:`extract`). The words, stems and
stopwords are the learned judge's vocabulary in :mod:`citemon._core.text`.

Each feature answers a question a careful reader asks when checking a citation: are the claim's
words in the passage at all (containment), are they *together* in one place (best-matching
sentence window), do the rare words match (IDF-weighted), do the numbers and names agree, does a
negation or a hedge appear on one side only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from citemon._core.text import (
    MODALS,
    NEGATIONS,
    STOPWORDS,
    content_words,
    numbers,
    sentences,
    tokens,
)

__all__ = ["FEATURE_NAMES", "extract"]

FEATURE_NAMES: tuple[str, ...] = (
    "containment",  # share of claim content words found anywhere in the passages
    "idf_containment",  # same, each word weighted by its IDF
    "best_window",  # best share of claim content words inside one window of sentences
    "best_window_idf",  # same, IDF-weighted
    "bigram_containment",  # share of claim content-word bigrams found in the passages
    "best_window_bigram",  # same, inside the best window
    "longest_run",  # longest run of consecutive claim tokens found verbatim, / claim length
    "missing_idf_max",  # IDF of the rarest claim word absent from the passages (scaled)
    "missing_count",  # log1p of claim content words absent from the passages
    "numbers_present",  # share of claim numbers found in the passages (1 when none)
    "has_numbers",  # the claim carries a number
    "entity_containment",  # share of capitalised claim tokens found (case-folded) in passages
    "negation_mismatch",  # a negation in the claim or in its best window, not both
    "modality_mismatch",  # a hedge/modal in the claim or in its best window, not both
    "claim_length",  # log1p of claim content words
    "passage_length",  # log1p of passage tokens (long web pages behave unlike short chunks)
    "window_share",  # share of passage tokens the best window holds
    "prefix_containment",  # containment on 5-letter prefixes (inflection and derivation)
    "top3_union",  # IDF-weighted share covered by the union of the 3 best windows
)


_MAX_MISSING_IDF = 12.0  # scale for missing_idf_max (IDF of a word seen in 1 of ~100k docs)


def _entities(toks: Sequence[str]) -> set[str]:
    # Capitalised tokens that are not sentence-initial (the first token is capitalised anyway).
    return {
        t.lower()
        for i, t in enumerate(toks)
        if i > 0 and t[:1].isupper() and t.lower() not in STOPWORDS
    }


def _bigrams(words: Sequence[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(words))


def _longest_run(claim_low: Sequence[str], passage_ngrams: set[tuple[str, ...]], cap: int) -> int:
    """Longest n (≤ cap) such that some n consecutive claim tokens occur verbatim in a passage."""
    best = 0
    for n in range(1, min(cap, len(claim_low)) + 1):
        if any(
            tuple(claim_low[i : i + n]) in passage_ngrams for i in range(len(claim_low) - n + 1)
        ):
            best = n
        else:
            break
    return best


def extract(
    claim: str,
    passages: Mapping[str, str] | Sequence[str],
    idf: Mapping[str, float],
    *,
    default_idf: float,
    window_sentences: int = 2,
    max_run: int = 8,
) -> list[float]:
    """The feature vector (ordered as :data:`FEATURE_NAMES`) for ``claim`` against ``passages``.

    ``passages`` are read as one union of evidence: containment counts a word found in any of
    them; windows of ``window_sentences`` consecutive sentences never cross a passage boundary.
    ``idf`` maps stemmed words to inverse document frequency; unknown words get ``default_idf``.
    ``max_run`` caps the verbatim-run search (tokens), which bounds the cost on long pages.
    """
    texts = list(passages.values()) if isinstance(passages, Mapping) else list(passages)
    claim_toks = tokens(claim)
    claim_words = content_words(claim_toks)
    claim_set = set(claim_words)
    claim_low = [t.lower() for t in claim_toks]

    passage_tokens: list[str] = []
    windows: list[list[str]] = []  # raw tokens per window
    for text in texts:
        sent_toks = [tokens(s) for s in sentences(text)]
        for st in sent_toks:
            passage_tokens.extend(st)
        if not sent_toks:
            continue
        for i in range(max(1, len(sent_toks) - window_sentences + 1)):
            win: list[str] = []
            for st in sent_toks[i : i + window_sentences]:
                win.extend(st)
            windows.append(win)

    passage_words = content_words(passage_tokens)
    passage_set = set(passage_words)
    passage_low = [t.lower() for t in passage_tokens]

    def w(word: str) -> float:
        return idf.get(word, default_idf)

    # fsum, not sum: a sum over a set depends on its order, which PYTHONHASHSEED changes, and
    # ties between windows then fell either way; fsum is exact, so one text gives one vector.
    total_idf = math.fsum(w(x) for x in claim_set) or 1.0
    found = claim_set & passage_set
    containment = len(found) / len(claim_set) if claim_set else 1.0
    idf_containment = math.fsum(w(x) for x in found) / total_idf if claim_set else 1.0

    claim_bigrams = _bigrams(claim_words)
    passage_bigrams = _bigrams(passage_words)
    bigram_containment = (
        len(claim_bigrams & passage_bigrams) / len(claim_bigrams) if claim_bigrams else containment
    )

    # Best window: the place where most of the claim's (IDF-weighted) content sits together.
    window_hits: list[tuple[float, frozenset[str]]] = []
    best_share = best_idf = best_bigram = 0.0
    best_window_low: set[str] = set()
    best_window_len = 0
    for win in windows:
        win_words = content_words(win)
        win_set = set(win_words)
        hit = claim_set & win_set
        if not hit and best_window_len:
            continue
        share_idf = math.fsum(w(x) for x in hit) / total_idf if claim_set else 1.0
        window_hits.append((share_idf, frozenset(hit)))
        if share_idf > best_idf or not best_window_len:
            best_idf = share_idf
            best_share = len(hit) / len(claim_set) if claim_set else 1.0
            best_bigram = (
                len(claim_bigrams & _bigrams(win_words)) / len(claim_bigrams)
                if claim_bigrams
                else best_share
            )
            best_window_low = {t.lower() for t in win}
            best_window_len = max(1, len(win))

    covered: set[str] = set()
    for _, hit_set in sorted(window_hits, key=lambda h: h[0], reverse=True)[:3]:
        covered |= hit_set
    top3_union = math.fsum(w(x) for x in covered) / total_idf if claim_set else 1.0
    claim_prefixes = {x[:5] for x in claim_set}
    passage_prefixes = {x[:5] for x in passage_set}
    prefix_containment = (
        len(claim_prefixes & passage_prefixes) / len(claim_prefixes) if claim_prefixes else 1.0
    )

    passage_ngrams: set[tuple[str, ...]] = set()
    for n in range(1, min(max_run, len(claim_low)) + 1):
        passage_ngrams.update(
            tuple(passage_low[i : i + n]) for i in range(len(passage_low) - n + 1)
        )
    longest = _longest_run(claim_low, passage_ngrams, max_run)
    longest_run = longest / min(max_run, len(claim_low)) if claim_low else 0.0

    missing = claim_set - passage_set
    missing_idf_max = max((w(x) for x in missing), default=0.0) / _MAX_MISSING_IDF

    claim_numbers = numbers(claim_toks)
    passage_numbers = numbers(passage_tokens)
    numbers_present = (
        len(claim_numbers & passage_numbers) / len(claim_numbers) if claim_numbers else 1.0
    )

    claim_entities = _entities(claim_toks)
    passage_low_set = set(passage_low)
    entity_containment = (
        len(claim_entities & passage_low_set) / len(claim_entities) if claim_entities else 1.0
    )

    claim_low_set = set(claim_low)
    neg_claim = bool(claim_low_set & NEGATIONS) or any(t.endswith("n't") for t in claim_low)
    neg_win = bool(best_window_low & NEGATIONS) or any(t.endswith("n't") for t in best_window_low)
    mod_claim = bool(claim_low_set & MODALS)
    mod_win = bool(best_window_low & MODALS)

    return [
        containment,
        idf_containment,
        best_share,
        best_idf,
        bigram_containment,
        best_bigram,
        longest_run,
        missing_idf_max,
        math.log1p(len(missing)),
        numbers_present,
        1.0 if claim_numbers else 0.0,
        entity_containment,
        1.0 if neg_claim != neg_win else 0.0,
        1.0 if mod_claim != mod_win else 0.0,
        math.log1p(len(claim_set)),
        math.log1p(len(passage_tokens)),
        min(1.0, best_window_len / len(passage_tokens)) if passage_tokens else 0.0,
        prefix_containment,
        top3_union,
    ]
