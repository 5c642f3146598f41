"""``--passage-store URL``: which backend a URL names, and the flags every command shares.

* ``postgresql://user@host:port/db`` (``postgres://``): :mod:`citemon.passages.postgres`;
* ``chroma://host:port/collection`` (``chromas://``): :mod:`citemon.passages.chroma`;
* ``http://…``, ``https://…``: :mod:`citemon.passages.http`;
* ``sqlite:///path``, a path ending ``.jsonl`` (or ``jsonl:///path``):
  :mod:`citemon.passages.embedded`;
* ``package.module:factory``: a plugin; the zero-argument ``factory()`` returns an object with
  ``async lookup(ids) -> Mapping[str, str]``.

A URL that carries a password is refused (``ConfigError``): a flag is seen in ``ps``, shell
history and logs. The password comes from ``CITEMON_PASSAGE_STORE_PASSWORD`` (or libpq's own
means), a token from ``CITEMON_PASSAGE_STORE_TOKEN``. :func:`redacted` is what logs show.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from citemon.core.errors import ConfigError
from citemon.core.passages import PassageObserver, PassageStore
from citemon.core.settings import parse_duration_s
from citemon.engine.passage_text import DEFAULT_HASH_KEY
from citemon.passages.managed import ManagedStore, StoreLimits

__all__ = [
    "DEFAULT_HOLD_S",
    "add_passage_store_arguments",
    "open_backend",
    "open_store",
    "redacted",
    "store_limits",
]

log = logging.getLogger(__name__)

DEFAULT_HOLD_S: Final = 300.0
"""``citemon run``'s ``--passage-store-hold``: how long one answer waits out a store outage."""

_PLUGIN: Final = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(name, default)


def _duration(value: str) -> float:
    try:
        return parse_duration_s(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_passage_store_arguments(parser: argparse.ArgumentParser, *, hold: bool = False) -> None:
    """The ``--passage-store*`` flags, each defaulting to its ``CITEMON_PASSAGE_STORE*``
    variable; ``hold`` adds ``--passage-store-hold`` (``citemon run``)."""
    d = StoreLimits()
    group = parser.add_argument_group("passage store (text for passages traced without it)")
    group.add_argument(
        "--passage-store",
        metavar="URL",
        default=_env("CITEMON_PASSAGE_STORE"),
        help="look up the text of passages that arrived without it: postgresql://, "
        "chroma://host:port/collection, http(s)://, sqlite:///path, FILE.jsonl or "
        "package.module:factory (env CITEMON_PASSAGE_STORE; the password from "
        "CITEMON_PASSAGE_STORE_PASSWORD, never in the URL)",
    )
    group.add_argument(
        "--passage-store-query",
        metavar="SQL",
        default=_env("CITEMON_PASSAGE_STORE_QUERY"),
        help="PostgreSQL: SQL taking the IDs as %%(ids)s and returning (id, text) rows "
        "(default: SELECT id, text FROM passages WHERE id = ANY(%%(ids)s)); SQLite: :ids, a "
        "JSON array (env CITEMON_PASSAGE_STORE_QUERY)",
    )
    group.add_argument(
        "--passage-store-cache-size",
        type=int,
        metavar="N",
        default=int(_env("CITEMON_PASSAGE_STORE_CACHE_SIZE", d.cache_size)),
        help=f"passages kept in the lookup cache (0: none; default {d.cache_size})",
    )
    group.add_argument(
        "--passage-store-cache-ttl",
        type=_duration,
        metavar="DURATION",
        default=_duration(str(_env("CITEMON_PASSAGE_STORE_CACHE_TTL", d.cache_ttl_s))),
        help=f"how long a cached passage is used (default {d.cache_ttl_s:.0f}s)",
    )
    group.add_argument(
        "--passage-store-concurrency",
        type=int,
        metavar="N",
        default=int(_env("CITEMON_PASSAGE_STORE_CONCURRENCY", d.concurrency)),
        help=f"lookups in flight at most; also the pool size (default {d.concurrency})",
    )
    group.add_argument(
        "--passage-store-timeout",
        type=_duration,
        metavar="DURATION",
        default=_duration(str(_env("CITEMON_PASSAGE_STORE_TIMEOUT", d.timeout_s))),
        help=f"one lookup's round trip at most (default {d.timeout_s:g}s)",
    )
    group.add_argument(
        "--passage-store-retries",
        type=int,
        metavar="N",
        default=int(_env("CITEMON_PASSAGE_STORE_RETRIES", d.retries)),
        help=f"retries of a failed round trip, with backoff (default {d.retries})",
    )
    group.add_argument(
        "--passage-hash-key",
        metavar="KEY",
        default=_env("CITEMON_PASSAGE_HASH_KEY", DEFAULT_HASH_KEY),
        help="metadata key of a passage's content hash (hex SHA-256 of its text): store "
        f"text that does not match is not used (default {DEFAULT_HASH_KEY})",
    )
    if hold:
        group.add_argument(
            "--passage-store-hold",
            type=_duration,
            metavar="DURATION",
            default=_duration(str(_env("CITEMON_PASSAGE_STORE_HOLD", DEFAULT_HOLD_S))),
            help="while the store is down, hold each answer up to this long before scoring it "
            f"unjudged (passage_lookup_failed); 0: do not hold (default {DEFAULT_HOLD_S:.0f}s)",
        )


def store_limits(args: argparse.Namespace) -> StoreLimits:
    values = {
        "cache_size": args.passage_store_cache_size,
        "cache_ttl_s": args.passage_store_cache_ttl,
        "concurrency": args.passage_store_concurrency,
        "timeout_s": args.passage_store_timeout,
        "retries": args.passage_store_retries,
        "hold_s": getattr(args, "passage_store_hold", 0.0),
    }
    if values["cache_size"] < 0 or values["concurrency"] < 1 or values["retries"] < 0:
        raise ConfigError(
            "--passage-store-cache-size must be >= 0, --passage-store-concurrency >= 1 and "
            "--passage-store-retries >= 0"
        )
    if values["timeout_s"] <= 0 or values["hold_s"] < 0:
        raise ConfigError("--passage-store-timeout must be > 0 and --passage-store-hold >= 0")
    return StoreLimits(**values)


def redacted(url: str) -> str:
    """``url`` without a password or a query string (what logs and errors show)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit((parts.scheme, user + host, parts.path, "", ""))


def open_backend(url: str, *, query: str | None = None, concurrency: int = 8) -> PassageStore:
    """The backend ``url`` names (not yet connected: connections open on the first lookup)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if parts.password or "password=" in parts.query.lower():
        raise ConfigError(
            "--passage-store must not carry a password: set CITEMON_PASSAGE_STORE_PASSWORD "
            "(or use libpq's PGPASSWORD or ~/.pgpass)"
        )
    try:
        if scheme in ("postgresql", "postgres"):
            from citemon.passages.postgres import DEFAULT_QUERY, PostgresStore

            return PostgresStore(url, query=query or DEFAULT_QUERY, max_size=concurrency)
        if scheme in ("chroma", "chromas"):
            from citemon.passages.chroma import ChromaStore

            return ChromaStore(url)
        if scheme in ("http", "https"):
            from citemon.passages.http import HTTPStore

            return HTTPStore(url, max_connections=concurrency)
        if scheme == "sqlite":
            from citemon.passages.embedded import DEFAULT_SQLITE_QUERY, SQLiteStore

            if not parts.path or not os.path.exists(parts.path):
                raise ConfigError(f"--passage-store {url}: no SQLite file at {parts.path!r}")
            return SQLiteStore(parts.path, query=query or DEFAULT_SQLITE_QUERY)
        if scheme == "jsonl" or (not parts.netloc and url.endswith(".jsonl")):
            from citemon.passages.embedded import JSONLStore

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
    args: argparse.Namespace, *, observer: PassageObserver | None = None
) -> ManagedStore | None:
    """The managed store the flags ask for, or None without ``--passage-store``."""
    url = getattr(args, "passage_store", None)
    if not url:
        return None
    limits = store_limits(args)
    backend = open_backend(url, query=args.passage_store_query, concurrency=limits.concurrency)
    log.info("passage store: %s (%s)", redacted(url), limits)
    return ManagedStore(backend, limits, observer=observer, name=f"passage store {redacted(url)}")
