"""HTTP: a small batch contract a team can put in front of any store (Elasticsearch, a CMS, S3).

``--passage-store https://kb.internal/citemon/_passages``: citemon POSTs, once per answer::

    {"ids": ["doc-1", "doc-7"]}

and expects ``200`` with a JSON object whose ``passages`` maps each ID the service holds to its
text (IDs it lacks are left out)::

    {"passages": {"doc-1": "The Eiffel Tower is 330 metres tall."}}

IDs travel only in the JSON body, never in the URL. Any other status, a body that is not such
an object, or a connection error is a failed round trip (retried). A bearer token, when the
service needs one, is handed in (``token``: the settings' ``CITEMON_PASSAGE_STORE_TOKEN`` or
``--passage-store-token-file``, sent as ``Authorization: Bearer …``), never from a flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import httpx

__all__ = ["TOKEN_ENV", "HTTPStore"]

TOKEN_ENV: Final = "CITEMON_PASSAGE_STORE_TOKEN"
"""The variable the settings read the token from (``PassageStoreSettings``)."""


class HTTPStore:
    def __init__(self, url: str, *, max_connections: int = 8, token: str | None = None) -> None:
        self.url = url
        headers = {"accept": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._client = httpx.AsyncClient(
            headers=headers,
            limits=httpx.Limits(max_connections=max(1, max_connections)),
            timeout=None,  # the managing layer's timeout bounds each round trip
        )

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
        response = await self._client.post(self.url, json={"ids": list(ids)})
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code} from the passage service")
        body = response.json()
        passages = body.get("passages") if isinstance(body, dict) else None
        if not isinstance(passages, dict):
            raise ValueError('reply is not {"passages": {id: text}}')
        return {str(k): v for k, v in passages.items() if isinstance(v, str)}

    async def aclose(self) -> None:
        await self._client.aclose()
