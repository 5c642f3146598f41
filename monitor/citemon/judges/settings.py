"""The judges' environment variables, read through pydantic-settings as ``citemon run``'s are.

Each ``CITEMON_JUDGE*`` variable is a documented constant and a field of
:class:`JudgeEnvironment`. The values stay strings: the ``--judge*`` flags convert and check them
(argparse converts a string default as it converts a flag), so a bad variable is the same usage
error naming it as a bad flag, and the flag wins over the variable.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["API_KEY_ENV", "JUDGE_ENV_VARS", "JudgeEnvironment"]

JUDGE_ENV: Final = "CITEMON_JUDGE"
"""``--judge``: lexical (default), learned, http, classifier or package.module:factory."""
BASE_URL_ENV: Final = "CITEMON_JUDGE_BASE_URL"
"""``--judge-base-url``: the OpenAI-compatible (or TEI) base URL."""
MODEL_ENV: Final = "CITEMON_JUDGE_MODEL"
"""``--judge-model``."""
CONCURRENCY_ENV: Final = "CITEMON_JUDGE_CONCURRENCY"
"""``--judge-concurrency``: judge requests in flight (default 8)."""
TIMEOUT_ENV: Final = "CITEMON_JUDGE_TIMEOUT"
"""``--judge-timeout``: seconds per request (default 30)."""
RETRIES_ENV: Final = "CITEMON_JUDGE_RETRIES"
"""``--judge-retries``: retries after a failed request (default 3)."""
PROTOCOL_ENV: Final = "CITEMON_JUDGE_PROTOCOL"
"""``--judge-protocol``: v1 (default) or v2."""
LABEL_ENV: Final = "CITEMON_JUDGE_LABEL"
"""``--judge-label``: the classifier's entailment label (default entailment)."""
THRESHOLD_ENV: Final = "CITEMON_JUDGE_THRESHOLD"
"""``--judge-threshold``: entailed iff P(entailed) ≥ this."""
BATCH_PAIRS_ENV: Final = "CITEMON_JUDGE_BATCH_PAIRS"
"""``--judge-batch-pairs``: the classifier's pairs per request (default 32)."""
WINDOW_WORDS_ENV: Final = "CITEMON_JUDGE_WINDOW_WORDS"
"""``--judge-window-words``: the classifier's chunk length in words (default 300)."""
OVERLAP_WORDS_ENV: Final = "CITEMON_JUDGE_OVERLAP_WORDS"
"""``--judge-overlap-words``: words shared by consecutive chunks (default 50)."""
FORMAT_ENV: Final = "CITEMON_JUDGE_FORMAT"
"""``--judge-format``: json (default) or minicheck."""
API_KEY_ENV: Final = "CITEMON_JUDGE_API_KEY"
"""The HTTP judges' API key (default: unset, no ``Authorization``); never a flag, never shown."""


class JudgeEnvironment(BaseSettings):
    """The ``CITEMON_JUDGE*`` variables as set (``None``: unset; ``""`` stays ``""``)."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore")

    judge: str | None = Field(None, validation_alias=JUDGE_ENV)
    base_url: str | None = Field(None, validation_alias=BASE_URL_ENV)
    model: str | None = Field(None, validation_alias=MODEL_ENV)
    concurrency: str | None = Field(None, validation_alias=CONCURRENCY_ENV)
    timeout: str | None = Field(None, validation_alias=TIMEOUT_ENV)
    retries: str | None = Field(None, validation_alias=RETRIES_ENV)
    protocol: str | None = Field(None, validation_alias=PROTOCOL_ENV)
    label: str | None = Field(None, validation_alias=LABEL_ENV)
    threshold: str | None = Field(None, validation_alias=THRESHOLD_ENV)
    batch_pairs: str | None = Field(None, validation_alias=BATCH_PAIRS_ENV)
    window_words: str | None = Field(None, validation_alias=WINDOW_WORDS_ENV)
    overlap_words: str | None = Field(None, validation_alias=OVERLAP_WORDS_ENV)
    format: str | None = Field(None, validation_alias=FORMAT_ENV)
    api_key: str | None = Field(None, validation_alias=API_KEY_ENV, repr=False)

    def get(self, variable: str, default: str) -> str:
        """The value of the documented ``variable``, or ``default`` when it is unset."""
        for name, field in type(self).model_fields.items():
            if field.validation_alias == variable:
                value = getattr(self, name)
                return default if value is None else str(value)
        raise KeyError(f"{variable} is not a documented judge variable")


JUDGE_ENV_VARS: Final = tuple(
    str(f.validation_alias) for f in JudgeEnvironment.model_fields.values()
)
"""Every judge variable, for the docs and the tests."""
