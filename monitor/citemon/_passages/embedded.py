"""Embedded stores, for the demo, small setups and tests: SQLite and a JSONL file.

``sqlite:///path/to/kb.db`` reads a table ``passages(id TEXT PRIMARY KEY, text TEXT)``, or what
``--passage-store-query`` says: SQL taking the IDs as the named parameter ``:ids``, a JSON
array, e.g. ``SELECT chunk_id, body FROM chunks WHERE chunk_id IN (SELECT value FROM
json_each(:ids))``. The database is opened read-only, one connection per lookup, in a thread.

A path ending ``.jsonl`` (or ``jsonl:///path``) is read once at start: one JSON object a line,
``{"id": …, "text": …}``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final
from urllib.parse import quote

__all__ = ["DEFAULT_SQLITE_QUERY", "JSONLStore", "SQLiteStore"]

DEFAULT_SQLITE_QUERY: Final = (
    "SELECT id, text FROM passages WHERE id IN (SELECT value FROM json_each(:ids))"
)


class SQLiteStore:
    def __init__(self, path: str | Path, *, query: str = DEFAULT_SQLITE_QUERY) -> None:
        if ":ids" not in query:
            raise ValueError("a SQLite --passage-store-query must take the IDs as :ids")
        self.path = Path(path)
        self.query = query

    def _read(self, ids: list[str]) -> dict[str, str]:
        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        with sqlite3.connect(uri, uri=True, timeout=5.0) as conn:
            rows = conn.execute(self.query, {"ids": json.dumps(ids)}).fetchall()
        return {str(r[0]): r[1] for r in rows if isinstance(r[1], str)}

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
        return await asyncio.to_thread(self._read, list(ids))


class JSONLStore:
    """The whole file in memory; bad lines are reported with their number, at start."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.passages: dict[str, str] = {}
        with self.path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    pid, text = row["id"], row["text"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(
                        f"{self.path}: line {number}: not {{'id': …, 'text': …}} ({exc})"
                    ) from None
                if not isinstance(text, str):
                    raise ValueError(f"{self.path}: line {number}: text is not a string")
                self.passages[str(pid)] = text

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
        return {pid: self.passages[pid] for pid in ids if pid in self.passages}
