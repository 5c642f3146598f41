"""The text of passages that arrived without it, looked up in the passage store before judging.

One lookup per answer: every distinct ID of the answer's text-less passages at once. The text
the store gives replaces the empty text, so passage identity, verdicts, excerpts, review
records and evaluation events see it as if the trace had carried it. In an answer the producer
marked truncated, a passage whose traced text the store's extends (cut short) gets the whole
text too; the answer stays truncated, since passages may also have been dropped. Those
passages are marked ``"store"`` (:attr:`~citemon._core.records.AnswerRecord.from_store`). An
ID the store does not hold stays text-less (``no_passage_text``); a lookup that failed marks its IDs
(:attr:`~citemon._core.records.AnswerRecord.lookup_failed`), so the claims citing them are
``unjudged`` with cause ``passage_lookup_failed``.

**Versioned chunks.** When a passage's metadata holds a content hash under ``hash_key``
(default ``content_sha256``: the hex SHA-256 of the chunk's UTF-8 text, as the application
indexed it), the store's text is used only when its hash matches: a chunk edited since the
answer was written is not judged as if the model had read the new text; it stays
``no_passage_text`` (:class:`StoreFill` names it: ``citemon score`` says so).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from citemon._core.passages import PassageLookupError, PassageStore
from citemon._core.records import AnswerRecord

__all__ = ["DEFAULT_HASH_KEY", "StoreFill", "fill_from_store", "missing_ids"]

DEFAULT_HASH_KEY = "content_sha256"


@dataclass(frozen=True, slots=True)
class StoreFill:
    """What one answer's lookup did (for ``--explain-input`` and ``score``'s stderr)."""

    asked: tuple[str, ...] = ()
    filled: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    error: str | None = None


def missing_ids(record: AnswerRecord) -> list[str]:
    """The distinct IDs of the record's passages without text (every passage's, when the
    producer marked the answer truncated: its text may have been cut short) not yet asked of
    the store, in retrieval order."""
    asked = record.asked_store
    return list(
        dict.fromkeys(
            p.id for p in record.passages if (record.truncated or not p.text) and p.id not in asked
        )
    )


def _hash_of(metadata: Mapping[str, object] | None, key: str) -> str | None:
    value = (metadata or {}).get(key)
    return value.lower() if isinstance(value, str) and value else None


def _is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


async def fill_from_store(
    record: AnswerRecord, store: PassageStore, *, hash_key: str = DEFAULT_HASH_KEY
) -> tuple[AnswerRecord, StoreFill]:
    """``record`` with the store's text in its text-less passages (a copy when any changed)."""
    asked = missing_ids(record)
    if not asked:
        return record, StoreFill()
    try:
        found = await store.lookup(asked)
    except PassageLookupError as exc:
        failed = record.model_copy(deep=True)
        failed._origin = dict(record.origin)
        failed._from_store = dict(record.from_store)
        failed._lookup_failed = record.lookup_failed | frozenset(asked)
        failed._asked_store = record.asked_store | frozenset(asked)
        return failed, StoreFill(asked=tuple(asked), error=str(exc))
    filled = record.model_copy(deep=True)
    filled._origin = dict(record.origin)
    filled._lookup_failed = record.lookup_failed
    filled._asked_store = record.asked_store | frozenset(asked)
    sources = dict(record.from_store)
    stale: set[str] = set()
    for passage in filled.passages:
        text = found.get(passage.id)
        if not isinstance(text, str) or not text or not _is_utf8(text):
            continue  # lone surrogates (a JSON "\ud800"): refused, as a trace's text would be
        if passage.text and not (len(text) > len(passage.text) and text.startswith(passage.text)):
            continue  # traced whole (or not a cut of this text): the trace's text stands
        expected = _hash_of(passage.metadata, hash_key)
        if expected is not None and hashlib.sha256(text.encode()).hexdigest() != expected:
            stale.add(passage.id)
            continue
        passage.text = text
        sources[passage.id] = "store"
    filled._from_store = sources
    return filled, StoreFill(
        asked=tuple(asked),
        filled=tuple(p for p in asked if p in sources),
        stale=tuple(p for p in asked if p in stale),
    )
