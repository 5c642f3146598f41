"""The judges' settings: :class:`JudgeSettings`, its ``CITEMON_JUDGE*`` variables and flags.

One pydantic-settings model and one flag table (:data:`JUDGE_FLAGS`), through the mechanism of
:mod:`citemon._core.settings`: ``score``, ``run``, ``selftest``, ``calibrate`` and ``demo`` add the
same ``--judge*`` flags. Each variable is a documented constant below, with its default; the
names are case-sensitive (``citemon_judge_model`` is another variable). A bad value of a
variable is the same usage error, naming it, as a bad flag; the flag wins over the variable.

The API key of the HTTP judges follows the one rule for secrets
(:mod:`citemon._core.settings`): a variable only (:data:`API_KEY_ENV`), never a flag, never
logged (:class:`~pydantic.SecretStr` in the model, left out of every ``repr``), or a file named
by ``--judge-api-key-file`` (:data:`API_KEY_FILE_ENV`); :meth:`JudgeSettings.secret_api_key` is
the one reading of it, which ``load_judge`` hands to the transport.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Final

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from citemon._core.settings import Flag, FlagSettings, one_secret_source, secret_from

__all__ = [
    "API_KEY_ENV",
    "API_KEY_FILE_ENV",
    "JUDGE_ENV_VARS",
    "JUDGE_FLAGS",
    "JudgeEnvironment",
    "JudgeSettings",
]

JUDGE_ENV: Final = "CITEMON_JUDGE"
"""``--judge``: lexical (default), learned, http, classifier or package.module:factory."""
BASE_URL_ENV: Final = "CITEMON_JUDGE_BASE_URL"
"""``--judge-base-url``: the OpenAI-compatible (or TEI) base URL (default
``http://127.0.0.1:8000/v1``)."""
MODEL_ENV: Final = "CITEMON_JUDGE_MODEL"
"""``--judge-model``: the model name sent to the judge server (default ``judge``)."""
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
"""``--judge-threshold``: entailed iff P(entailed) ≥ this (default unset: the calibration
file's, else the judge's own rule)."""
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
API_KEY_FILE_ENV: Final = "CITEMON_JUDGE_API_KEY_FILE"
"""``--judge-api-key-file``: a file holding the API key instead (default unset)."""


def _number_or_unset(value: str) -> float | None:
    return None if not value.strip() else float(value)


JUDGE_FLAGS: Final = (
    Flag(
        "--judge",
        "judge",
        "lexical (default), learned, http, classifier, or package.module:factory",
    ),
    Flag("--judge-base-url", "base_url", "OpenAI-compatible base URL of the http judge"),
    Flag("--judge-model", "model", "model name sent to the judge server (default judge)"),
    Flag(
        "--judge-concurrency",
        "max_inflight",
        "hard cap on judge requests in flight (default 8)",
        int,
    ),
    Flag("--judge-timeout", "timeout_s", "seconds per judge request (default 30)", float),
    Flag("--judge-retries", "retries", "retries after a failed judge request (default 3)", int),
    Flag(
        "--judge-protocol",
        "protocol",
        "http judge wire contract: v1 (one claim per request, default) or v2 (batched)",
        choices=("v1", "v2"),
    ),
    Flag(
        "--judge-label",
        "label",
        "classifier: the model's entailment label, case-insensitive (default entailment)",
    ),
    Flag(
        "--judge-threshold",
        "threshold",
        "entailed iff P(entailed) >= this (default: the --calibration file's, else 0.5)",
        _number_or_unset,
        what="a number",
    ),
    Flag(
        "--judge-batch-pairs",
        "batch_pairs",
        "classifier: most (passage, claim) pairs per request (default 32, TEI's cap)",
        int,
    ),
    Flag(
        "--judge-window-words",
        "window_words",
        "classifier: longer passages are scored in chunks of this many words (default 300)",
        int,
    ),
    Flag(
        "--judge-overlap-words",
        "overlap_words",
        "classifier: words shared by consecutive chunks (default 50)",
        int,
    ),
    Flag(
        "--judge-format",
        "format",
        "http judge prompt and reply: json (citemon's, structured outputs; default) or "
        "minicheck (MiniCheck's Document/Claim prompt, a Yes/No reply; protocol v1 only)",
        choices=("json", "minicheck"),
    ),
    Flag(
        "--judge-api-key-file",
        "api_key_file",
        f"file holding the http/classifier judge's API key (or set {API_KEY_ENV})",
        Path,
    ),
)
"""The ``--judge*`` flags (``args.judge``, ``args.judge_base_url``…)."""


class JudgeSettings(FlagSettings):
    """The judge and its options. Field ``x`` ⇔ the variable of its ``validation_alias``."""

    model_config = SettingsConfigDict(
        case_sensitive=True,
        extra="ignore",
        validate_default=True,
        frozen=True,
        populate_by_name=True,
    )
    FLAGS: ClassVar[tuple[Flag, ...]] = JUDGE_FLAGS
    TITLE: ClassVar[str] = "judge"

    judge: str = Field("lexical", validation_alias=JUDGE_ENV)
    base_url: str = Field("http://127.0.0.1:8000/v1", validation_alias=BASE_URL_ENV)
    model: str = Field("judge", validation_alias=MODEL_ENV)
    # Named as the transport names them (HTTPTransport's keywords), so load_judge copies none.
    max_inflight: int = Field(8, validation_alias=CONCURRENCY_ENV)
    timeout_s: float = Field(30.0, validation_alias=TIMEOUT_ENV)
    retries: int = Field(3, validation_alias=RETRIES_ENV)
    protocol: str = Field("v1", validation_alias=PROTOCOL_ENV)
    label: str = Field("entailment", validation_alias=LABEL_ENV)
    threshold: float | None = Field(None, validation_alias=THRESHOLD_ENV)
    batch_pairs: int = Field(32, validation_alias=BATCH_PAIRS_ENV)
    window_words: int = Field(300, validation_alias=WINDOW_WORDS_ENV)
    overlap_words: int = Field(50, validation_alias=OVERLAP_WORDS_ENV)
    format: str = Field("json", validation_alias=FORMAT_ENV)
    api_key: SecretStr | None = Field(None, validation_alias=API_KEY_ENV, repr=False)
    api_key_file: Path | None = Field(None, validation_alias=API_KEY_FILE_ENV)

    @field_validator("api_key_file", mode="before")
    @classmethod
    def _empty_file_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _one_key(self) -> JudgeSettings:
        one_secret_source(self.api_key, self.api_key_file, what="the judge API key")
        return self

    def secret_api_key(self) -> str | None:
        """The API key, from its variable or its file (read now): for the transport only,
        never to be logged."""
        key = secret_from(self.api_key, self.api_key_file, file_flag="--judge-api-key-file")
        return None if key is None else key.get_secret_value()

    @field_validator("threshold", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("max_inflight")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("--judge-concurrency must be at least 1")
        return value

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        if value not in ("v1", "v2"):
            raise ValueError(f"--judge-protocol must be v1 or v2, not {value!r}")
        return value

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in ("json", "minicheck"):
            raise ValueError(
                f"--judge-format (or CITEMON_JUDGE_FORMAT) must be json or minicheck, not {value!r}"
            )
        return value

    def calibrated(self, threshold: float | None) -> JudgeSettings:
        """These settings with a calibration file's ``threshold``, unless one was given (a
        calibration that chose a threshold for this judge measured its error *at* it)."""
        if self.threshold is not None or threshold is None:
            return self
        return self.model_copy(update={"threshold": threshold})


JUDGE_ENV_VARS: Final = tuple(JudgeSettings.env_vars().values())
"""Every judge variable, for the docs and the tests."""


class JudgeEnvironment:
    """The ``CITEMON_JUDGE*`` variables as set, as text (``""`` stays ``""``), read through
    :class:`JudgeSettings`'s pydantic-settings source; or ``values`` (variable → text)."""

    def __init__(self, **values: str) -> None:
        if values:
            self._raw = dict(values)
        else:
            self._raw = {
                JudgeSettings.env_var(field): text
                for field, text in JudgeSettings.environment().items()
            }

    def __repr__(self) -> str:  # names only: the API key is among the values
        return f"JudgeEnvironment(set={sorted(self._raw)})"

    def get(self, variable: str, default: str) -> str:
        """The value of the documented ``variable``, or ``default`` when it is unset."""
        if variable not in JUDGE_ENV_VARS:
            raise KeyError(f"{variable} is not a documented judge variable")
        return self._raw.get(variable, default)

    @property
    def api_key(self) -> str | None:
        """:data:`API_KEY_ENV`'s value (pass it to the HTTP client only; never log it)."""
        return self._raw.get(API_KEY_ENV)
