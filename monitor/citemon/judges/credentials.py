"""Where an HTTP judge is and how it proves who asks: the base URL, the API key, the credentials
a URL may carry, and the one way they are taken out of anything shown.

:class:`Credentials` is what :class:`~citemon.judges.transport.HTTPTransport` sends with each
request and nothing else: the API key as a bearer token, credentials in the base URL
(``http://user:key@host/v1``) as HTTP Basic auth, the URL itself sent without them and shown
without them or its query string (``?api-key=…``). :meth:`Credentials.redact` takes every form
of them (the key, the password as given and as URL-decoded, the Basic token) out of a text, and
an ``Authorization`` value a server echoes back whatever it holds.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from citemon._core.errors import ConfigError
from citemon.judges.settings import API_KEY_ENV

__all__ = ["Credentials"]

# A credential a server echoes back ("authorization": "Bearer sk-…"), whatever key it holds.
_AUTH_VALUE = re.compile(r"(?i)\b(bearer|basic|token)(\s+)[^\s\"',;}]+")


@dataclass(frozen=True, slots=True)
class Credentials:
    """A judge's base URL and credentials, parsed and checked once (:meth:`parse`)."""

    base_url: str
    """What requests go to: without credentials, with its query string."""
    shown_base: str
    """What messages and logs show: without credentials or query string."""
    api_key: str | None = field(repr=False)
    auth: httpx.BasicAuth | None = field(repr=False)
    secrets: tuple[str, ...] = field(repr=False)
    """Every form of the credentials, longest first (what :meth:`redact` takes out)."""

    @classmethod
    def parse(cls, base_url: str, api_key: str | None) -> Credentials:
        """Checked: an absolute http(s) URL with a host, and a key a header can carry; a
        :class:`ConfigError` that shows neither otherwise."""
        try:
            parsed = httpx.URL(base_url.strip().rstrip("/"))
        except httpx.InvalidURL:
            raise ConfigError("the judge base URL is not a valid URL") from None  # may hold a key
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(
                "the judge base URL must be absolute, http:// or https:// with a host "
                "(e.g. http://127.0.0.1:8000/v1)"
            )
        # A key read from a file often ends in a newline; inside, only visible ASCII can be sent
        # (anything else makes httpx raise with the header, key included, in its message).
        key = (api_key or "").strip() or None
        if key and not all("!" <= ch <= "~" for ch in key):
            raise ConfigError(
                f"the judge API key ({API_KEY_ENV}) holds a space, control or non-ASCII "
                "character, which an HTTP header cannot carry (the key is not shown)"
            )
        # Credentials in the URL become Basic auth; the URL kept and shown is without them.
        auth: httpx.BasicAuth | None = None
        secrets = [key or ""]
        if parsed.userinfo:
            user, password = parsed.username, parsed.password
            auth = httpx.BasicAuth(user, password)
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            raw_password = parsed.userinfo.decode("ascii").partition(":")[2]
            secrets += [password, raw_password, token]
            parsed = parsed.copy_with(username=None, password=None)
        return cls(
            base_url=str(parsed),
            shown_base=str(parsed.copy_with(query=None, fragment=None)),
            api_key=key,
            auth=auth,
            secrets=tuple(sorted({x for x in secrets if x}, key=len, reverse=True)),
        )

    @property
    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header of the API key (none without one)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def request_auth(self) -> dict[str, Any]:
        """httpx's ``auth=`` keyword for the URL's credentials (empty without any)."""
        return {} if self.auth is None else {"auth": self.auth}

    def url(self, path: str) -> str:
        """``{base_url}/{path}``: the path gets it, a query string (``?api-version=…``) stays
        after it."""
        parsed = httpx.URL(self.base_url)
        return str(parsed.copy_with(path=parsed.path.rstrip("/") + "/" + path))

    def redact(self, text: str) -> str:
        """``text`` without any form of these credentials, nor any echoed ``Authorization``
        value: a misbehaving server may echo request headers back in an error body, and a
        transport error may quote the URL."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return _AUTH_VALUE.sub(r"\1\2***", text)
