"""``--passage-store URL``: which backend a URL names, and the flags every command shares.

* ``postgresql://user@host:port/db`` (``postgres://``): :mod:`citemon._passages.postgres`;
* ``chroma://host:port/collection`` (``chromas://``): :mod:`citemon._passages.chroma`;
* ``http://…``, ``https://…``: :mod:`citemon._passages.http`;
* ``sqlite:///path``, a path ending ``.jsonl`` (or ``jsonl:///path``):
  :mod:`citemon._passages.embedded`;
* ``package.module:factory``: a plugin; the zero-argument ``factory()`` returns an object with
  ``async lookup(ids) -> Mapping[str, str]``.

A URL that carries a password is refused (``ConfigError``): a flag is seen in ``ps``, shell
history and logs. The password (``CITEMON_PASSAGE_STORE_PASSWORD`` or
``--passage-store-password-file``; or libpq's own means) and the token
(``CITEMON_PASSAGE_STORE_TOKEN`` or ``--passage-store-token-file``) are the settings' secrets,
read by the one rule of :mod:`citemon._core.settings` and handed to the backend that uses them;
no backend reads the environment. :func:`redacted` is what logs show.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
from typing import Final
from urllib.parse import urlsplit

from citemon._core.errors import ConfigError, redacted
from citemon._core.passages import PassageObserver, PassageStore
from citemon._passages.managed import ManagedStore
from citemon._passages.settings import PassageStoreSettings

__all__ = [
    "add_passage_store_arguments",
    "open_backend",
    "open_store",
    "redacted",
    "store_settings",
]

log = logging.getLogger(__name__)

_PLUGIN: Final = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_PASSWORD: Final = re.compile(r"password\s*=", re.IGNORECASE)


def add_passage_store_arguments(parser: argparse.ArgumentParser, *, hold: bool = False) -> None:
    """The ``--passage-store*`` flags, each defaulting to its ``CITEMON_PASSAGE_STORE*``
    variable; ``hold`` adds ``--passage-store-hold`` (``citemon run``)."""
    fields = [row.field for row in PassageStoreSettings.FLAGS]
    if not hold:
        fields.remove("passage_store_hold")
    PassageStoreSettings.add_arguments(
        parser, title="passage store (text for passages traced without it)", only=fields
    )


def store_settings(args: argparse.Namespace) -> PassageStoreSettings:
    """The flags (and the variables of those a command lacks), checked."""
    return PassageStoreSettings.from_args(args)


def open_backend(
    url: str,
    *,
    query: str | None = None,
    concurrency: int = 8,
    password: str | None = None,
    token: str | None = None,
) -> PassageStore:
    """The backend ``url`` names (not yet connected: connections open on the first lookup),
    with the ``password`` (PostgreSQL) or ``token`` (Chroma, HTTP) it sends."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    # The query of a URL, or the whole of a libpq keyword string (``host=… password=…``),
    # which is no URL and so has nothing ``redacted`` could cut from an error.
    if parts.password or _PASSWORD.search(parts.query if parts.scheme else url):
        raise ConfigError(
            "--passage-store must not carry a password: set CITEMON_PASSAGE_STORE_PASSWORD "
            "(or use libpq's PGPASSWORD or ~/.pgpass)"
        )
    try:
        if scheme in ("postgresql", "postgres"):
            from citemon._passages.postgres import DEFAULT_QUERY, PostgresStore

            return PostgresStore(
                url, query=query or DEFAULT_QUERY, max_size=concurrency, password=password
            )
        if scheme in ("chroma", "chromas"):
            from citemon._passages.chroma import ChromaStore

            return ChromaStore(url, token=token)
        if scheme in ("http", "https"):
            from citemon._passages.http import HTTPStore

            return HTTPStore(url, max_connections=concurrency, token=token)
        if scheme == "sqlite":
            from citemon._passages.embedded import DEFAULT_SQLITE_QUERY, SQLiteStore

            if not parts.path or not os.path.exists(parts.path):
                raise ConfigError(f"--passage-store {url}: no SQLite file at {parts.path!r}")
            return SQLiteStore(parts.path, query=query or DEFAULT_SQLITE_QUERY)
        if scheme == "jsonl" or (not parts.netloc and url.endswith(".jsonl")):
            from citemon._passages.embedded import JSONLStore

            return JSONLStore(parts.path if scheme == "jsonl" else url)
        if _PLUGIN.match(url):
            return _plugin(url)
    except ImportError as exc:
        extra = {"postgresql": "postgres", "postgres": "postgres", "chroma": "chroma"}
        raise ConfigError(
            f"--passage-store {redacted(url)} needs {exc.name}: "
            f"pip install 'citemon[{extra.get(scheme, scheme)}]'"
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--passage-store {redacted(url)}: {exc}") from None
    raise ConfigError(
        f"--passage-store {redacted(url)}: use postgresql://, chroma://, http(s)://, "
        "sqlite:///path, a .jsonl file or package.module:factory"
    )


def _plugin(spec: str) -> PassageStore:
    module_name, attr = spec.split(":", 1)
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load passage store factory {spec!r}: {exc}") from None
    made = factory()
    if not callable(getattr(made, "lookup", None)):
        raise ConfigError(f"{spec}() returned {type(made).__name__}, which has no lookup(ids)")
    store: PassageStore = made
    return store


def open_store(
    args: argparse.Namespace, *, observer: PassageObserver | None = None, hold: bool = False
) -> ManagedStore | None:
    """The managed store the flags ask for, or None without ``--passage-store``; ``hold``:
    answers wait out an outage up to ``--passage-store-hold`` (``citemon run``)."""
    return open_store_from(store_settings(args), observer=observer, hold=hold)


def open_store_from(
    given: PassageStoreSettings, *, observer: PassageObserver | None = None, hold: bool = False
) -> ManagedStore | None:
    """:func:`open_store` from the settings themselves (``citemon run``'s ``settings.passages``)."""
    url = given.passage_store
    if not url:
        return None
    limits = given.limits(hold=hold)
    backend = open_backend(
        url,
        query=given.passage_store_query,
        concurrency=limits.concurrency,
        password=given.secret("password"),
        token=given.secret("token"),
    )
    log.info("passage store: %s (%s)", redacted(url), limits)
    return ManagedStore(
        backend,
        limits,
        observer=observer,
        name=f"passage store {redacted(url)}",
        hash_key=given.passage_hash_key,
    )
