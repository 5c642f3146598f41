"""Short excerpts of the passages a verdict is about, for the results record's ``excerpts``.

The results topic is read by people paged at night (``citemon inspect``), often without the
tracing backend at hand, so each record carries enough of the cited and supporting passages to
judge the verdict: not the documents. The scorer keeps excerpts of up to
:data:`MAX_EXCERPT_CHARS` (so a score held until its offset commits costs kilobytes, however
long the passages); :func:`recut` then cuts them to ``--results-excerpt-chars``. The text is
what the monitor received: what the shim recorded after its ``redact`` hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from citemon._core.records import AnswerScore

__all__ = ["MAX_EXCERPTS", "MAX_EXCERPT_CHARS", "excerpt_of", "excerpts", "recut"]

MAX_EXCERPT_CHARS: Final = 4000
"""The largest ``--results-excerpt-chars``: what the scorer keeps of each passage."""

MAX_EXCERPTS: Final = 32
"""Passages excerpted per record at most (the first mentioned), so a record stays far below
Kafka's 1 MB message limit: 32 × 4000 characters × 4 bytes of UTF-8 at the largest setting,
32 × 240 × 4 ≈ 30 KB at the default."""


def excerpt_of(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, ``…`` marking a cut."""
    if len(text) <= max_chars:
        return text
    return text[: max(0, max_chars - 1)].rstrip() + "…"


def excerpts(
    score: AnswerScore, passages: Mapping[str, str], max_chars: int = MAX_EXCERPT_CHARS
) -> dict[str, str]:
    """Excerpts (≤ ``max_chars`` each) of the passages the claims cite or are supported by, in
    first-mention order, at most :data:`MAX_EXCERPTS`; IDs that name no retrieved passage
    (dangling) have none."""
    out: dict[str, str] = {}
    if max_chars <= 0:
        return out
    for claim in score.claims:
        for pid in (*claim.cited_ids, *claim.resolved_ids, *claim.supported_by):
            if pid not in out and pid in passages:
                if len(out) >= MAX_EXCERPTS:
                    return out
                out[pid] = excerpt_of(passages[pid], max_chars)
    return out


def recut(kept: Mapping[str, str], max_chars: int) -> dict[str, str]:
    """The scorer's excerpts cut to ``max_chars`` (≤ :data:`MAX_EXCERPT_CHARS`): the same text
    as cutting the passages themselves, since those were cut at a larger size."""
    return {pid: excerpt_of(text, max_chars) for pid, text in kept.items()}
