"""The passage store: the text of passages that traces name but do not carry.

``--passage-store URL`` (:mod:`citemon._passages.open`) picks a backend — PostgreSQL
(:mod:`~citemon._passages.postgres`), Chroma (:mod:`~citemon._passages.chroma`), an HTTP batch
service (:mod:`~citemon._passages.http`), SQLite or a JSONL file
(:mod:`~citemon._passages.embedded`), or a ``package.module:factory`` plugin — and wraps it in
:class:`~citemon._passages.managed.ManagedStore` (cache, concurrency cap, timeout, retries,
counts, holding answers through an outage). The scorer asks it once per answer
(:mod:`citemon._engine.passage_text`). docs/passage-store.md is the user's page.
"""

from __future__ import annotations

from citemon._passages.managed import LookupStats, ManagedStore, StoreLimits
from citemon._passages.open import (
    add_passage_store_arguments,
    open_backend,
    open_store,
    redacted,
    store_settings,
)
from citemon._passages.settings import PassageStoreSettings

__all__ = [
    "LookupStats",
    "ManagedStore",
    "PassageStoreSettings",
    "StoreLimits",
    "add_passage_store_arguments",
    "open_backend",
    "open_store",
    "redacted",
    "store_settings",
]
