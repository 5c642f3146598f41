"""The ``--passage-store*`` flags and their ``CITEMON_PASSAGE_STORE*`` variables (one model, as
every command's settings are: :class:`citemon._core.settings.FlagSettings`), and the store's two
secrets by the one rule for secrets: ``CITEMON_PASSAGE_STORE_PASSWORD`` (PostgreSQL) and
``CITEMON_PASSAGE_STORE_TOKEN`` (Chroma, HTTP), variables only, or the files named by
``--passage-store-password-file`` and ``--passage-store-token-file``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from citemon._core.errors import ConfigError
from citemon._core.settings import (
    Flag,
    FlagSettings,
    one_secret_source,
    parse_duration_s,
    secret_from,
    whole_at_least_0,
)
from citemon._engine.passage_text import DEFAULT_HASH_KEY
from citemon._passages.managed import StoreLimits

__all__ = ["DEFAULT_HOLD_S", "PassageStoreSettings"]

DEFAULT_HOLD_S = 300.0
"""``citemon run``'s ``--passage-store-hold``: how long one answer waits out a store outage."""

_D = StoreLimits()


def _duration(value: str) -> float:
    return parse_duration_s(value)


def _at_least_1(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


class PassageStoreSettings(FlagSettings):
    """Field ``x`` ⇔ env ``CITEMON_X``; the password and the token are variables (or files),
    never flags."""

    TITLE: ClassVar[str] = "passage store (text for passages traced without it)"
    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--passage-store",
            "passage_store",
            "look up the text of passages that arrived without it: postgresql://, "
            "chroma://host:port/collection, http(s)://, sqlite:///path, FILE.jsonl or "
            "package.module:factory (the password from CITEMON_PASSAGE_STORE_PASSWORD, never "
            "in the URL)",
            metavar="URL",
        ),
        Flag(
            "--passage-store-query",
            "passage_store_query",
            "PostgreSQL: SQL taking the IDs as %%(ids)s and returning (id, text) rows "
            "(default: SELECT id, text FROM passages WHERE id = ANY(%%(ids)s)); SQLite: :ids, "
            "a JSON array",
            metavar="SQL",
        ),
        Flag(
            "--passage-store-cache-size",
            "passage_store_cache_size",
            f"passages kept in the lookup cache (0: none; default {_D.cache_size})",
            whole_at_least_0,
            metavar="N",
        ),
        Flag(
            "--passage-store-cache-ttl",
            "passage_store_cache_ttl",
            f"how long a cached passage is used (default {_D.cache_ttl_s:.0f}s)",
            _duration,
            what="a duration (300, 300s, 5m)",
            metavar="DURATION",
        ),
        Flag(
            "--passage-store-concurrency",
            "passage_store_concurrency",
            f"lookups in flight at most; also the pool size (default {_D.concurrency})",
            _at_least_1,
            what="a whole number >= 1",
            metavar="N",
        ),
        Flag(
            "--passage-store-timeout",
            "passage_store_timeout",
            f"one lookup's round trip at most (default {_D.timeout_s:g}s)",
            _duration,
            what="a duration (5, 5s, 250ms)",
            metavar="DURATION",
        ),
        Flag(
            "--passage-store-retries",
            "passage_store_retries",
            f"retries of a failed round trip, with backoff (default {_D.retries})",
            whole_at_least_0,
            metavar="N",
        ),
        Flag(
            "--passage-hash-key",
            "passage_hash_key",
            "metadata key of a passage's content hash (hex SHA-256 of its text): store text "
            f"that does not match is not used (default {DEFAULT_HASH_KEY})",
            metavar="KEY",
        ),
        Flag(
            "--passage-store-hold",
            "passage_store_hold",
            "while the store is down, hold each answer up to this long before scoring it "
            f"unjudged (passage_lookup_failed); 0: do not hold (default {DEFAULT_HOLD_S:.0f}s)",
            _duration,
            what="a duration (300, 300s, 5m)",
            metavar="DURATION",
        ),
        Flag(
            "--passage-store-password-file",
            "passage_store_password_file",
            "file holding the PostgreSQL password (or set CITEMON_PASSAGE_STORE_PASSWORD)",
            Path,
            metavar="FILE",
        ),
        Flag(
            "--passage-store-token-file",
            "passage_store_token_file",
            "file holding the Chroma or HTTP store's token (or set CITEMON_PASSAGE_STORE_TOKEN)",
            Path,
            metavar="FILE",
        ),
    )

    passage_store: str | None = None
    passage_store_query: str | None = None
    passage_store_cache_size: int = Field(_D.cache_size, ge=0)
    passage_store_cache_ttl: float = Field(_D.cache_ttl_s, ge=0)
    passage_store_concurrency: int = Field(_D.concurrency, ge=1)
    passage_store_timeout: float = Field(_D.timeout_s, gt=0)
    passage_store_retries: int = Field(_D.retries, ge=0)
    passage_hash_key: str = DEFAULT_HASH_KEY
    passage_store_hold: float = Field(DEFAULT_HOLD_S, ge=0)
    passage_store_password: SecretStr | None = Field(None, repr=False)
    passage_store_password_file: Path | None = None
    passage_store_token: SecretStr | None = Field(None, repr=False)
    passage_store_token_file: Path | None = None

    @field_validator(
        "passage_store_password",
        "passage_store_password_file",
        "passage_store_token",
        "passage_store_token_file",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _one_source_each(self) -> PassageStoreSettings:
        one_secret_source(
            self.passage_store_password,
            self.passage_store_password_file,
            what="the passage store password",
        )
        one_secret_source(
            self.passage_store_token, self.passage_store_token_file, what="the passage store token"
        )
        return self

    def secret(self, which: Literal["password", "token"]) -> str | None:
        """The store's password or token, from its variable or its file (read now): for the
        backend only, never to be logged."""
        value = getattr(self, f"passage_store_{which}")
        path = getattr(self, f"passage_store_{which}_file")
        got = secret_from(value, path, file_flag=f"--passage-store-{which}-file")
        if got is None:
            return None
        if which == "password":
            return got.get_secret_value()  # libpq's: a password may hold spaces
        # The token is sent in a header: a line end (a secret made with `echo`) is dropped, and
        # anything else a header cannot carry is refused here, since httpx would refuse it with
        # the header, token included, in the message the store logs as its last error.
        token = got.get_secret_value().strip()
        if not all("!" <= ch <= "~" for ch in token):
            raise ConfigError(
                "the passage store token (CITEMON_PASSAGE_STORE_TOKEN or "
                "--passage-store-token-file) holds a space, control or non-ASCII character, "
                "which an HTTP header cannot carry (the token is not shown)"
            )
        return token or None

    def limits(self, *, hold: bool) -> StoreLimits:
        return StoreLimits(
            cache_size=self.passage_store_cache_size,
            cache_ttl_s=self.passage_store_cache_ttl,
            concurrency=self.passage_store_concurrency,
            timeout_s=self.passage_store_timeout,
            retries=self.passage_store_retries,
            hold_s=self.passage_store_hold if hold else 0.0,
        )
