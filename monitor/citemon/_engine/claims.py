"""Sentence splitting and citation extraction: pure functions, no I/O.

pysbd does the sentence boundaries, one paragraph at a time, and a paragraph longer than
``PYSBD_CHUNK_CHARS`` in windows that end on a sentence pysbd itself found: pysbd is quadratic
in the text it is given (a 128 KB paragraph took 20 s, 1 MB about 20 minutes, all on the event
loop); windows make it linear. Two of its habits are wrong for cited answers and are repaired here:

* a marker after a sentence's final punctuation (``… plan. [p-3310] Next …``) is attached to the
  *next* sentence, and a marker at the very end becomes a "sentence" of its own; both belong to
  the sentence before;
* it splits after time abbreviations ("02:00 a.m. | UTC daily.").
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

import pysbd

from citemon._core.records import AnswerRecord, Claim
from citemon._core.text import DEFAULT_SYNTAX, CitationSyntax, strip_markers
from citemon._engine.native import native_claims

__all__ = ["PYSBD_CHUNK_CHARS", "extract_claims", "resolve_marker", "split_sentences"]

PYSBD_CHUNK_CHARS = 2000
"""Longest text handed to pysbd at once; a longer paragraph goes in windows (see the module)."""

_PARAGRAPH = re.compile(r"\n\s*\n")
_ID_SPLIT = re.compile(r"\s*[,;]\s*")
_TIME_ABBREV = re.compile(r"\b[ap]\.m\.\s*$", re.IGNORECASE)
_TIME_CONTINUATION = re.compile(
    r"^(?:[a-z0-9(]|[A-Z]{2,5}\b|(?:Eastern|Pacific|Central|Mountain|local)\b)"
)
_ABBREV_END = re.compile(
    r"\b(?:e\.g|i\.e|etc|vs|approx|cf|Dr|Mr|Mrs|Ms|Prof|St|No|Fig|Jan|Feb|Mar|Apr|Jun|Jul|Aug"
    r"|Sep|Sept|Oct|Nov|Dec)\.\s*$"
)


# One segmenter per thread: ``Segmenter.segment`` keeps the text it is splitting on the
# instance, and the monitor splits answers in a pool of worker threads.
_local = threading.local()


def _segmenter() -> pysbd.Segmenter:
    seg: pysbd.Segmenter | None = getattr(_local, "plain", None)
    if seg is None:
        seg = _local.plain = pysbd.Segmenter(language="en", clean=False)
    return seg


def _span_segmenter() -> pysbd.Segmenter:
    seg: pysbd.Segmenter | None = getattr(_local, "spans", None)
    if seg is None:
        seg = _local.spans = pysbd.Segmenter(language="en", clean=False, char_span=True)
    return seg


def split_sentences(text: str, syntax: CitationSyntax = DEFAULT_SYNTAX) -> list[str]:
    """Split an answer into sentences, each keeping the markers that belong to it."""
    sentences: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        if not paragraph.strip():
            continue
        pieces: list[str] = []  # shared across chunks, so the repairs below span their seams
        for raw in _segments(paragraph):
            piece = raw.strip()
            if not piece:
                continue
            lead = syntax.leading.match(piece)
            if lead and pieces:
                # Markers that open a piece close the sentence before it.
                pieces[-1] = f"{pieces[-1]} {lead.group(0).strip()}"
                piece = piece[lead.end() :].strip()
                if not piece:
                    continue
            if pieces and _continues(pieces[-1], piece):
                pieces[-1] = f"{pieces[-1]} {piece}"
            else:
                pieces.append(piece)
        sentences.extend(pieces)
    return sentences


def _segments(paragraph: str, limit: int = PYSBD_CHUNK_CHARS) -> list[str]:
    """pysbd's sentences of ``paragraph``, at most ``limit`` characters at a time: each window
    keeps every sentence but its last (which the window may have cut short), and the next window
    starts where that sentence starts. A sentence longer than a window is cut at a space."""
    out: list[str] = []
    start = 0
    while len(paragraph) - start > limit:
        window = paragraph[start : start + limit]
        spans = _span_segmenter().segment(window)
        if len(spans) > 1:
            out.extend(span.sent for span in spans[:-1])
            start += spans[-1].start
        else:
            cut = window.rfind(" ") + 1 or limit
            out.append(window[:cut])
            start += cut
    out.extend(_segmenter().segment(paragraph[start:]))
    return out


def _continues(previous: str, piece: str) -> bool:
    if _TIME_ABBREV.search(previous):
        return bool(_TIME_CONTINUATION.match(piece))
    return bool(_ABBREV_END.search(previous)) and piece[:1].islower()


class _Resolver:
    """Marker → retrieved documents (docs/design.md, "Passage identity"): (1) the
    document whose ID equals it; (2) else every document whose metadata holds it under one of
    ``keys`` (chunks of one source document share such an ID: a citation names them all);
    (3) else, for a numeric marker, the document at that 1-based position; else nothing."""

    def __init__(self, record: AnswerRecord, keys: Sequence[str]) -> None:
        self.ids = [p.id for p in record.passages]
        self.known = frozenset(self.ids)
        self.by_meta: dict[str, list[str]] = {}
        for p in record.passages:
            if not p.metadata:
                continue
            for key in keys:
                value = p.metadata.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    value = str(value)
                if isinstance(value, str) and value:
                    named = self.by_meta.setdefault(value, [])
                    if p.id not in named:
                        named.append(p.id)

    def resolve(self, token: str) -> tuple[str, list[str], str]:
        """``(cited ID, passage IDs, how)``; ``how`` is ``id``, ``metadata``, ``position`` or
        ``dangling``. The cited ID is the passage ID for (1) and (3), the marker otherwise."""
        if token in self.known:
            return token, [token], "id"
        named = self.by_meta.get(token)
        if named:
            return token, named, "metadata"
        if token.isdigit() and 1 <= int(token) <= len(self.ids):
            pid = self.ids[int(token) - 1]
            return pid, [pid], "position"
        return token, [], "dangling"


def resolve_marker(
    record: AnswerRecord, token: str, syntax: CitationSyntax = DEFAULT_SYNTAX
) -> tuple[str, list[str], str]:
    """How one marker token resolves in ``record``: ``(cited ID, passage IDs, how)``."""
    return _Resolver(record, syntax.passage_id_keys).resolve(token)


def extract_claims(record: AnswerRecord, syntax: CitationSyntax = DEFAULT_SYNTAX) -> list[Claim]:
    """Split ``record.answer`` into one claim per sentence with its resolved citations.

    Sentences with no letters or digits left once markers are stripped are not claims. An
    answer with native citations (:attr:`~citemon._core.records.AnswerRecord.citations`)
    gives each sentence the citations whose spans fall in it instead
    (:mod:`citemon._engine.native`).
    """
    resolver = _Resolver(record, syntax.passage_id_keys)
    if record.citations is not None:
        return native_claims(
            record, split_sentences(record.answer, syntax), resolver.by_meta, syntax
        )
    claims: list[Claim] = []
    for index, sentence in enumerate(split_sentences(record.answer, syntax)):
        text = strip_markers(sentence, syntax)
        if not any(ch.isalnum() for ch in text):
            continue
        cited: list[str] = []
        dangling: list[str] = []
        resolved: list[str] = []
        resolution: dict[str, list[str]] = {}
        for match in syntax.regex.finditer(sentence):
            for token in _ID_SPLIT.split(match.group(1).strip()):
                if not token:
                    continue
                name, pids, _ = resolver.resolve(token)
                if name in cited:
                    continue
                cited.append(name)
                resolution[name] = pids
                if not pids:
                    dangling.append(name)
                resolved.extend(p for p in pids if p not in resolved)
        claims.append(
            Claim(
                sentence=index,
                text=text,
                cited_ids=cited,
                dangling_ids=dangling,
                resolved_ids=resolved,
                resolution=resolution,
            )
        )
    return claims
