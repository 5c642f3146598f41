"""The demo's passage store: its help centre as a SQLite table, for ``citemon demo --ids-only``.

With ``--ids-only`` the demo service traces each retrieved document by ID alone (as the
OpenTelemetry GenAI conventions' typed documents and content-off deployments do) and the
monitor looks the text up here (``--passage-store sqlite:///…``): the same figures as the demo
with text in the trace.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

from citemon._core.records import AnswerRecord
from citemon._demo.data import PASSAGES
from citemon._demo.review import OVERLAP_CHUNKS

__all__ = ["demo_passages", "ids_only", "write_demo_store"]


def demo_passages() -> dict[str, str]:
    """Every passage the demo service can retrieve: ID → text."""
    found = {pid: text for pid, (_, text) in PASSAGES.items()}
    for _, a, b in OVERLAP_CHUNKS.values():
        found[a[0]], found[b[0]] = a[2], b[2]
    return found


def write_demo_store(path: Path, passages: dict[str, str] | None = None) -> str:
    """Fill a SQLite file at ``path`` (table ``passages(id, text)``); returns its store URL."""
    rows: Iterable[tuple[str, str]] = (passages or demo_passages()).items()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS passages (id TEXT PRIMARY KEY, text TEXT NOT NULL)")
        db.executemany("INSERT OR REPLACE INTO passages (id, text) VALUES (?, ?)", rows)
    return f"sqlite:///{path.resolve()}"


def ids_only(record: AnswerRecord) -> AnswerRecord:
    """``record`` as a trace without passage text carries it: IDs (and metadata) only."""
    return record.model_copy(
        update={"passages": [p.model_copy(update={"text": ""}) for p in record.passages]}
    )
