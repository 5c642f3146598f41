"""The passage store: the text of passages that traces name but do not carry.

``--passage-store URL`` (:mod:`citemon.passages.open`) picks a backend — PostgreSQL
(:mod:`~citemon.passages.postgres`), Chroma (:mod:`~citemon.passages.chroma`), an HTTP batch
service (:mod:`~citemon.passages.http`), SQLite or a JSONL file
(:mod:`~citemon.passages.embedded`), or a ``package.module:factory`` plugin — and wraps it in
:class:`~citemon.passages.managed.ManagedStore` (cache, concurrency cap, timeout, retries,
counts, holding answers through an outage). The scorer asks it once per answer
(:mod:`citemon.engine.passage_text`). docs/passage-store.md is the user's page.
"""

from __future__ import annotations

from citemon.passages.managed import LookupStats, ManagedStore, StoreLimits
from citemon.passages.open import (
    add_passage_store_arguments,
    open_backend,
    open_store,
    redacted,
    store_settings,
)
from citemon.passages.settings import PassageStoreSettings

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
