"""Chroma, the vector database, by its own client, looked up by ID.

``--passage-store chroma://host:port/COLLECTION`` (``chromas://`` for TLS; ``?tenant=…&
database=…`` when not the defaults). One ``collection.get(ids=…, include=["documents"])`` per
answer: IDs are passed to the client as a list, never put into a filter string. The document
stored with an ID is its text. An API token, when the server needs one, is handed in (``token``:
the settings' ``CITEMON_PASSAGE_STORE_TOKEN`` or ``--passage-store-token-file``, sent as
Chroma's ``x-chroma-token`` header), never from a flag.

The client is ``chromadb-client`` (the ``[chroma]`` extra: HTTP only, no embedding models).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["ChromaStore"]


class ChromaStore:
    def __init__(self, url: str, *, token: str | None = None) -> None:
        self._token = token
        parts = urlsplit(url)
        name = parts.path.strip("/")
        if not parts.hostname or not name or "/" in name:
            raise ValueError("a Chroma store is chroma://host:port/collection")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.host = parts.hostname
        self.port = parts.port or 8000
        self.ssl = parts.scheme == "chromas"
        self.collection_name = name
        self.tenant = query.get("tenant")
        self.database = query.get("database")
        self._collection: Any = None

    async def _open(self) -> Any:
        import chromadb  # the [chroma] extra

        kwargs: dict[str, Any] = {"host": self.host, "port": self.port, "ssl": self.ssl}
        if self._token:
            kwargs["headers"] = {"x-chroma-token": self._token}
        if self.tenant:
            kwargs["tenant"] = self.tenant
        if self.database:
            kwargs["database"] = self.database
        client = await chromadb.AsyncHttpClient(**kwargs)
        return await client.get_collection(self.collection_name)

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
        if self._collection is None:
            self._collection = await self._open()
        try:
            got = await self._collection.get(ids=list(ids), include=["documents"])
        except Exception:
            self._collection = None  # reconnect on the next try (a restarted server)
            raise
        documents = got.get("documents") or []
        return {
            str(pid): text
            for pid, text in zip(got.get("ids") or [], documents, strict=False)
            if isinstance(text, str)
        }
