"""PostgreSQL: the team's own table of chunks (a pgvector table is an ordinary table here).

``--passage-store postgresql://user@host:port/db`` with ``--passage-store-query``, SQL that
takes the list of IDs as the named parameter ``ids`` and returns ``(id, text)`` rows::

    SELECT chunk_id, body FROM kb_chunks WHERE chunk_id = ANY(%(ids)s)

psycopg 3 binds the list as a ``text[]`` server-side parameter: an ID is never part of the SQL.
Connections come from a psycopg-pool ``AsyncConnectionPool`` (at most ``--passage-store-
concurrency``, each checked before use, so a restarted server costs one retry, not an error per
pooled connection). The password is handed in (``password``: the settings'
``CITEMON_PASSAGE_STORE_PASSWORD`` or ``--passage-store-password-file``), else libpq's own
means (``PGPASSWORD``, ``~/.pgpass``, ``PGPASSFILE``, a service file), never from the URL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["DEFAULT_QUERY", "PASSWORD_ENV", "PostgresStore"]

PASSWORD_ENV: Final = "CITEMON_PASSAGE_STORE_PASSWORD"
"""The variable the settings read the password from (``PassageStoreSettings``)."""
DEFAULT_QUERY: Final = "SELECT id, text FROM passages WHERE id = ANY(%(ids)s)"


class PostgresStore:
    """Looks IDs up with one query per call, on a pooled connection."""

    def __init__(
        self,
        url: str,
        *,
        query: str = DEFAULT_QUERY,
        max_size: int = 8,
        password: str | None = None,
    ) -> None:
        from psycopg_pool import AsyncConnectionPool  # the [postgres] extra

        if "%(ids)s" not in query:
            raise ValueError("--passage-store-query must take the IDs as %(ids)s")
        self.query = query
        kwargs: dict[str, Any] = {"autocommit": True}
        if password:
            kwargs["password"] = password
        self._pool = AsyncConnectionPool(
            url,
            kwargs=kwargs,
            min_size=1,
            max_size=max(1, max_size),
            open=False,
            check=AsyncConnectionPool.check_connection,
            name="citemon-passages",
        )
        self._opened = False

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
        if not self._opened:
            await self._pool.open(wait=False)
            self._opened = True
        async with self._pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(self.query, {"ids": list(ids)})
            rows = await cur.fetchall()
        return {str(row[0]): row[1] for row in rows if isinstance(row[1], str)}

    async def aclose(self) -> None:
        if self._opened:
            await self._pool.close()
