"""Claims from an answer whose provider returned its citations as structure (docs/dialects.md,
"Native citations"): each sentence carries the citations whose spans fall in it, as a sentence
carries the markers in it; a sentence with none is uncited. From there verdicts, patterns and
metrics are the same as for markers.

A citation with a character range belongs to every sentence the range overlaps (a provider that
cites a phrase gives the sentence holding it the passages it names); one with an insertion point
(``start == end``: OpenAI's ``file_citation``) to the sentence that ends there. A cited passage
whose metadata holds the application's own ID under one of ``--passage-id-keys`` is cited by
that ID (and names every chunk that carries it), else by its own.

Where the provider quotes the passage it cites (Anthropic's ``cited_text``), the quote is
checked against that passage's text without a judge: a quote that is not there sets the claim's
``quote_mismatch`` (whitespace aside: a quote over several content blocks is their texts joined).
Not in an answer marked truncated, whose passages may have been cut short of the quote.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from typing import Final

from citemon._core.records import AnswerRecord, Claim, NativeCitation, Passage
from citemon._core.text import CitationSyntax, strip_markers

__all__ = ["native_claims", "quote_found", "sentence_spans"]

_SPACE: Final = re.compile(r"\s+")


def sentence_spans(answer: str, sentences: Sequence[str]) -> list[tuple[int, int]]:
    """Where each sentence (as :func:`~citemon._engine.claims.split_sentences` gave it: stripped,
    pieces rejoined with one space) lies in ``answer``, in characters, found in order. A
    sentence that cannot be placed gets an empty span where the previous one ended."""
    spans: list[tuple[int, int]] = []
    at = 0
    for sentence in sentences:
        words = sentence.split()
        found = re.compile(r"\s*".join(map(re.escape, words))).search(answer, at) if words else None
        if found is None:
            spans.append((at, at))
            continue
        spans.append((found.start(), found.end()))
        at = found.end()
    return spans


def _owners(citation: NativeCitation, starts: Sequence[int], ends: Sequence[int]) -> range:
    """The sentences a citation belongs to (indices into the sentence spans, whose starts and
    ends both ascend: sentences are placed in order). Found by bisection, not by a scan of every
    sentence per citation: an untrusted answer may carry tens of thousands of each."""
    if citation.end > citation.start:
        # Those starting before the range ends (a prefix) that end after it starts (a suffix).
        first = bisect.bisect_right(ends, citation.start)
        return range(first, bisect.bisect_left(starts, citation.end))
    before = bisect.bisect_left(starts, citation.start)
    return range(before - 1 if before else 0, before if before else min(1, len(starts)))


def quote_found(quote: str, texts: Sequence[str]) -> bool:
    """Whether ``quote`` is in one of ``texts``, whitespace aside."""
    return _quote_in(quote, [_SPACE.sub("", t) for t in texts])


def _quote_in(quote: str, bare: Sequence[str]) -> bool:
    """Whether ``quote`` is in one of ``bare`` (texts without whitespace)."""
    needle = _SPACE.sub("", quote)
    return any(needle in t for t in bare)


def _source(pid: str, named: set[str]) -> str:
    """The source a passage ID names: ``file-1#2`` (the second chunk of one file, as the
    provider readers name chunks) is ``file-1`` when the same citation names ``file-1`` too: a
    provider citing a file cites every chunk of it, as one citation."""
    base, sep, n = pid.rpartition("#")
    return base if sep and n.isdigit() and base in named else pid


def _app_id(passage: Passage, keys: Sequence[str]) -> str | None:
    for key in keys:
        value = (passage.metadata or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and value:
            return value
    return None


def native_claims(
    record: AnswerRecord,
    sentences: Sequence[str],
    by_meta: Mapping[str, list[str]],
    syntax: CitationSyntax,
) -> list[Claim]:
    """One claim per sentence of ``record.answer``, carrying ``record.citations``;
    ``by_meta``: each application ID in the passages' metadata → the passages holding it."""
    spans = sentence_spans(record.answer, sentences)
    starts, ends = [s for s, _ in spans], [e for _, e in spans]
    owned: list[list[NativeCitation]] = [[] for _ in sentences]
    for citation in sorted(record.citations or (), key=lambda c: (c.start, c.end)):
        for i in _owners(citation, starts, ends):
            owned[i].append(citation)
    by_id: dict[str, Passage] = {}
    for p in record.passages:
        by_id.setdefault(p.id, p)
    stripped: dict[str, str] = {}

    def bare(pid: str) -> str:
        # Each passage's text without whitespace, once: every citation quoting it reuses it.
        if pid not in stripped:
            stripped[pid] = _SPACE.sub("", by_id[pid].text)
        return stripped[pid]

    claims: list[Claim] = []
    for index, sentence in enumerate(sentences):
        text = strip_markers(sentence, syntax)
        if not any(ch.isalnum() for ch in text):
            continue
        # ``resolution`` and ``resolved`` (dicts: ordered sets) answer "seen?" in constant
        # time: one citation may name a hundred thousand IDs.
        resolution: dict[str, list[str]] = {}
        dangling: list[str] = []
        resolved: dict[str, None] = {}
        mismatch = False
        for citation in owned[index]:
            named = set(citation.ids)
            for pid in citation.ids:
                passage = by_id.get(pid)
                app = _app_id(passage, syntax.passage_id_keys) if passage is not None else None
                name = app or _source(pid, named)
                if passage is None:
                    pids: list[str] = []
                elif app is not None:
                    pids = by_meta.get(app) or [pid]
                else:
                    pids = [pid]
                if name in resolution:
                    # Another chunk of a source already cited (a file's second search
                    # result): the same citation, naming one more passage.
                    grown = [p for p in pids if p not in resolved]
                    resolution[name].extend(grown)
                    resolved.update(dict.fromkeys(grown))
                    continue
                resolution[name] = list(pids)  # its own list: by_meta's is shared
                if not pids:
                    dangling.append(name)
                resolved.update(dict.fromkeys(pids))
            # A truncated answer's passages may be cut short of the quote: not checked, as a
            # failed claim there blames no citation (apply_truncation).
            if citation.quote and not mismatch and not record.truncated:
                texts = [bare(p) for p in citation.ids if p in by_id and by_id[p].text]
                mismatch = bool(texts) and not _quote_in(citation.quote, texts)
        claims.append(
            Claim(
                sentence=index,
                text=text,
                cited_ids=list(resolution),
                dangling_ids=dangling,
                resolved_ids=list(resolved),
                resolution=resolution,
                quote_mismatch=mismatch,
            )
        )
    return claims
