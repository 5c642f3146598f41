"""The misattribution search under ``max_judge_calls_per_answer``: how many judge calls each
claim gets (:func:`allot`) and which of its passages are asked first (:func:`by_overlap`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from citemon._core.text import overlap_words

__all__ = ["allot", "by_overlap"]


def allot(needs: Sequence[int], budget: int) -> list[int]:
    """Share ``budget`` among ``needs`` fairly: the smallest needs are met first, the rest get
    equal shares (max-min fairness); deterministic."""
    grants = [0] * len(needs)
    left = budget
    order = sorted(range(len(needs)), key=lambda i: needs[i])
    for k, i in enumerate(order):
        grants[i] = min(needs[i], left // (len(needs) - k))
        left -= grants[i]
    return grants


def by_overlap(claim: str, candidates: Sequence[str], passages: Mapping[str, str]) -> list[str]:
    """``candidates`` most likely first: content words shared with the claim, then retrieval
    order (``sorted`` is stable)."""
    words = overlap_words(claim)
    return sorted(candidates, key=lambda p: -len(words & overlap_words(passages[p])))
